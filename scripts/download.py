from layergeom import fetch
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    fetch.download_hub(
        sm.params.model_id,
        sm.params.revision,
        sm.output[0],
        trust_remote_code=sm.params.trust_remote_code,
        name=sm.wildcards.model,
        family=sm.params.family,
        n_layers=sm.params.n_layers,
    )
