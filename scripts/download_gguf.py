from pathlib import Path

from layergeom import models
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    models.fetch_gguf(sm.params.gguf, Path(sm.output[0]).parent)
