from layergeom.plots.convergence import draw_tokenwise
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    draw_tokenwise(list(sm.input), sm.params.checkpoints, sm.params.label, sm.output.png, sm.output.pdf)
