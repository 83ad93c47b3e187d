from layergeom.plots.spectral import draw
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    # the figure's own spectra keys only (the gradient and convergence figures read none)
    settings = {"spectra": {}, **sm.params.settings}
    draw(sm.params.figure, list(sm.input), settings, sm.output.png, sm.output.pdf)
