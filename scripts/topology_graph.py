from layergeom.topology.pipeline import run_topologies
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm, seed=sm.params.run["seed"], threads=sm.threads):
    run_topologies(
        sm.input.activations,
        sm.params.boundaries,
        sm.params.topology,
        seed=sm.params.run["seed"],
        nodes=sm.output.nodes,
        edges=sm.output.edges,
        sweeps=sm.output.sweep,
    )
