from layergeom.spectral.jobs.convergence import gather_convergence
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    gather_convergence(
        list(sm.input.parts),
        sm.params.boundaries,
        sm.output[0],
        inputs=[*sm.input.npy, *sm.input.groups, *sm.input.meta],
    )
