from layergeom.plots.spectral import draw
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    draw(sm.params.figure, list(sm.input), sm.params.settings, sm.output.png, sm.output.pdf)
