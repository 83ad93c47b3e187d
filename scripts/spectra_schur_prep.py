from layergeom.spectral.jobs.common import BoundaryFiles
from layergeom.spectral.jobs.schur import write_schur_prep
from layergeom.workflow import job, job_device, snapshot_seconds

sm = snakemake  # noqa: F821
cfg = sm.params.settings["spectra"]
# spectra.schur_control_seed, or the workflow's seed (as scripts/spectra_schur.py)
seed = sm.params.settings["seed"] if cfg["schur_control_seed"] is None else cfg["schur_control_seed"]
with job(sm, seed=seed, threads=sm.threads):
    write_schur_prep(
        BoundaryFiles(sm.params.boundaries, sm.input.npy, sm.input.groups, sm.input.meta),
        sm.output.part,
        sm.output.arrays,
        first=sm.params.first,
        alphas=cfg["alphas"],
        seed=seed,
        sr_k=cfg["sr_k"],
        dtype=cfg["dtype"],
        rank_tol=cfg["rank_tol"],
        boundary_metrics=cfg["schur_boundary_metrics"],
        orders=cfg["schur_orders"],
        order_alphas=cfg["schur_order_alphas"],
        ci_blocks=cfg["schur_ci_blocks"],
        ci_controls=cfg["schur_ci_controls"],
        snapshot_s=snapshot_seconds(sm),
        device=job_device(sm),
        siblings=list(sm.params.siblings),
    )
