from layergeom.spectral.trends import write_trends
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm, seed=sm.params.seed):
    write_trends(sm.input[0], sm.output[0], level=sm.params.spectra["ci_level"], seed=sm.params.seed)
