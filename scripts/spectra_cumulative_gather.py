from layergeom.spectral.jobs.cumulative import gather_cumulative
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    gather_cumulative(
        list(sm.input.parts),
        sm.params.boundaries,
        sm.output[0],
        sm.params.variants,
        inputs=[*sm.input.npy, *sm.input.groups, *sm.input.meta],
    )
