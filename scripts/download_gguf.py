import sys
from pathlib import Path

sys.path.insert(0, f"{snakemake.scriptdir}/../src")  # noqa: F821
from layergeom import models
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    models.fetch_gguf(sm.params.gguf, Path(sm.output[0]).parent)
