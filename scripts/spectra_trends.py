from layergeom.spectral.trends import write_trends
from layergeom.workflow import job

sm = snakemake  # noqa: F821
s = sm.params.settings
with job(sm, seed=s["seed"]):
    write_trends(sm.input[0], sm.output[0], level=s["spectra"]["ci_level"], seed=s["seed"])
