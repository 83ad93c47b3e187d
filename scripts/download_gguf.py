from pathlib import Path

from layergeom import materialize
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    materialize.fetch_gguf(sm.params.gguf, Path(sm.output[0]).parent)
