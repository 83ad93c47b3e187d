import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../src")  # noqa: F821
from layergeom.spectral.pipeline import write_spectra
from layergeom.workflow import job

sm = snakemake  # noqa: F821
cfg = sm.params.spectra
with job(sm, threads=sm.threads):
    write_spectra(
        sm.params.boundaries,
        sm.input.npy,
        sm.input.tsv,
        sm.output.table,
        sm.output.eigenvalues,
        sr_k=cfg["sr_k"],
        complex_tol=cfg["complex_tol"],
    )
