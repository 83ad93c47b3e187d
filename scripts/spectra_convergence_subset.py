from layergeom.spectral.jobs.common import BoundaryFiles
from layergeom.spectral.jobs.convergence import write_convergence_subset
from layergeom.workflow import job, job_device, snapshot_seconds

sm = snakemake  # noqa: F821
cfg = sm.params.settings["spectra"]
with job(sm, threads=sm.threads):
    write_convergence_subset(
        BoundaryFiles(sm.params.boundaries, sm.input.npy, sm.input.groups, sm.input.meta),
        sm.output[0],
        subset=sm.params.subset,
        sizes=cfg["convergence_sizes"],
        n_edge=cfg["convergence_boundaries"],
        sr_k=cfg["sr_k"],
        dtype=cfg["dtype"],
        rank_tol=cfg["rank_tol"],
        ci_level=cfg["ci_level"],
        snapshot_s=snapshot_seconds(sm),
        device=job_device(sm),
        siblings=list(sm.params.siblings),
    )
