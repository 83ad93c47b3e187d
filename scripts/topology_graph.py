from layergeom.topology.pipeline import run_topologies
from layergeom.workflow import job

sm = snakemake  # noqa: F821
s = sm.params.settings
with job(sm, seed=s["seed"], threads=sm.threads):
    run_topologies(
        sm.input.activations,
        sm.params.boundaries,
        s["topology"],
        seed=s["seed"],
        nodes=sm.output.nodes,
        edges=sm.output.edges,
        sweeps=sm.output.sweep,
    )
