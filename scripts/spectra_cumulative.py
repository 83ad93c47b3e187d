import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../src")  # noqa: F821
from layergeom.spectral.pipeline import write_cumulative
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm, threads=sm.threads):
    write_cumulative(sm.params.boundaries, sm.input.npy, sm.output[0])
