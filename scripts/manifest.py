import json

from layergeom.manifest import write_manifest
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    write_manifest(
        sm.output[0],
        source=json.loads(open(sm.input.source).read()),
        windows=json.loads(open(sm.input.windows_meta).read()),
        activations=sm.input.activations,
        boundaries=sm.params.boundaries,
        seed=sm.params.settings["seed"],
    )
