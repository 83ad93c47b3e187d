from layergeom import materialize
from layergeom.sources import materialize_args
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    materialize.materialize(
        sm.wildcards.model,
        sm.wildcards.checkpoint,
        sm.params.model_cfg,
        sm.params.out_dir,
        **materialize_args(dict(sm.input.items())),  # the folders its inputs name, by role (layergeom.sources)
    )
