from layergeom.spectral.jobs.table import gather_spectra
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm):
    gather_spectra(
        sm.input.parts,
        sm.params.boundaries,
        sm.output.table,
        sm.output.eigenvalues,
        inputs=[*sm.input.npy, *sm.input.groups, *sm.input.meta],
    )
