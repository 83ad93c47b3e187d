from pathlib import Path

from layergeom import models
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    models.materialize(
        sm.wildcards.model,
        sm.wildcards.checkpoint,
        sm.params.model_cfg,
        sm.params.out_dir,
        reference_dir=Path(sm.input.reference).parent if "reference" in sm.input.keys() else None,
        tokenizer_dir=Path(sm.input.tokenizer).parent if "tokenizer" in sm.input.keys() else None,
        trained_dir=sm.input.trained if "trained" in sm.input.keys() else None,
        hub_dir=sm.input.hub if "hub" in sm.input.keys() else None,
        **({"download_dir": Path(sm.input.gguf).parent} if "gguf" in sm.input.keys() else {}),
    )
