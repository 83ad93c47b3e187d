from layergeom.io import write_tsv
from layergeom.topology.pipeline import checkpoint_coupling
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm, seed=sm.params.run["seed"], threads=sm.threads):
    table, by_operator, sweep = checkpoint_coupling(
        sm.params.boundaries, sm.input.graphs, sm.input.sweeps, sm.input.jacobians, sm.input.spectra,
        sm.params.topology,
        seed=sm.params.run["seed"],
    )  # fmt: skip
    write_tsv(table, sm.output.table)
    write_tsv(by_operator, sm.output.by_operator)
    write_tsv(sweep, sm.output.sweep)
