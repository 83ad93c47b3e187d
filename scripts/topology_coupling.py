from layergeom.io import write_tsv
from layergeom.topology.pipeline import checkpoint_coupling
from layergeom.workflow import job

sm = snakemake  # noqa: F821
s = sm.params.settings
with job(sm, seed=s["seed"], threads=sm.threads):
    table, by_operator, sweep = checkpoint_coupling(
        sm.params.boundaries, sm.input.graphs, sm.input.sweeps, sm.input.jacobians, sm.input.spectra,
        s["topology"],
        seed=s["seed"],
    )  # fmt: skip
    write_tsv(table, sm.output.table)
    write_tsv(by_operator, sm.output.by_operator)
    write_tsv(sweep, sm.output.sweep)
