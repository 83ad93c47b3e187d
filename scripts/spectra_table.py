from layergeom.spectral.jobs.common import BoundaryFiles
from layergeom.spectral.jobs.table import write_spectra
from layergeom.workflow import job, job_device, snapshot_seconds

sm = snakemake  # noqa: F821
cfg = sm.params.settings["spectra"]
with job(sm, threads=sm.threads):
    write_spectra(
        BoundaryFiles(sm.params.boundaries, sm.input.npy, sm.input.groups, sm.input.meta),
        sm.output.table,
        sm.output.eigenvalues,
        sr_k=cfg["sr_k"],
        dtype=cfg["dtype"],
        rank_tol=cfg["rank_tol"],
        ci_level=cfg["ci_level"],
        ci_method=cfg["ci_method"],
        ci_blocks=cfg["ci_blocks"],
        snapshot_s=snapshot_seconds(sm),
        device=job_device(sm),
    )
