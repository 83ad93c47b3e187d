from layergeom.topology.pipeline import write_coupling
from layergeom.workflow import job

sm = snakemake  # noqa: F821
s = sm.params.settings
with job(sm, seed=s["seed"], threads=sm.threads):
    write_coupling(
        sm.params.boundaries, sm.input.graphs, sm.input.sweeps, sm.input.jacobians, sm.input.spectra,
        s["topology"],
        seed=s["seed"],
        table=sm.output.table,
        by_operator=sm.output.by_operator,
        sweep=sm.output.sweep,
    )  # fmt: skip
