from layergeom.claims.table import write_model_claims
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm, seed=sm.params.settings["seed"]):
    write_model_claims(sm.output[0], sm.params.checkpoints, sm.params.nulls, sm.params.settings, sm.wildcards.model)
