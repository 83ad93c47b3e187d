import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../src")  # noqa: F821
from layergeom.plots.spectral import draw
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    draw(sm.params.figure, list(sm.input), sm.params.settings, sm.output.png, sm.output.pdf)
