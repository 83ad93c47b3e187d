from layergeom.spectral.jobs.common import BoundaryFiles
from layergeom.spectral.jobs.cumulative import write_cumulative
from layergeom.workflow import job, job_device, snapshot_seconds

sm = snakemake  # noqa: F821
cfg = sm.params.settings["spectra"]
with job(sm, threads=sm.threads):
    write_cumulative(
        BoundaryFiles(sm.params.boundaries, sm.input.npy, sm.input.groups, sm.input.meta),
        sm.output[0],
        ci_level=cfg["ci_level"],
        ci_blocks=cfg["ci_blocks"],
        snapshot_s=snapshot_seconds(sm),
        device=job_device(sm),
    )
