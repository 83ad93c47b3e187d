import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../src")  # noqa: F821
from layergeom.spectral.pipeline import write_schur
from layergeom.workflow import job

sm = snakemake  # noqa: F821
cfg = sm.params.spectra
seed = sm.params.seed  # spectra.schur_control_seed, or the workflow's seed
with job(sm, seed=seed, threads=sm.threads):
    write_schur(
        sm.params.boundaries,
        sm.input.npy,
        sm.output[0],
        alphas=cfg["alphas"],
        seed=seed,
        variant=cfg["cumulative_variant"],
        sr_k=cfg["sr_k"],
        complex_tol=cfg["complex_tol"],
        boundary_metrics=cfg["schur_boundary_metrics"],
    )
