from layergeom.spectral.jobs.common import BoundaryFiles
from layergeom.spectral.jobs.cumulative import write_cumulative_variant
from layergeom.workflow import job, job_device, snapshot_seconds

sm = snakemake  # noqa: F821
cfg = sm.params.settings["spectra"]
with job(sm, threads=sm.threads):
    write_cumulative_variant(
        BoundaryFiles(sm.params.boundaries, sm.input.npy, sm.input.groups, sm.input.meta),
        sm.output[0],
        variant=sm.wildcards.variant,
        ci_level=cfg["ci_level"],
        ci_blocks=cfg["ci_blocks"],
        snapshot_s=snapshot_seconds(sm),
        device=job_device(sm),
        siblings=list(sm.params.siblings),
    )
