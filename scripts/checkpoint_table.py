import json

from layergeom.io import write_tsv
from layergeom.manifest import checkpoint_table, warn_identical
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    records = [json.loads(open(p).read()) for p in sm.input]
    warn_identical(records)
    write_tsv(checkpoint_table(records), sm.output[0])
