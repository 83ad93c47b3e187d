import os

# OpenMP threads that spin while waiting make small torch ops 10-100x slower on a shared machine
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from layergeom.runtime import resolve_device
from layergeom.tokenwise.pipeline import write_fits
from layergeom.workflow import job

sm = snakemake  # noqa: F821
s = sm.params.settings
with job(sm, seed=s["seed"], threads=sm.threads):
    write_fits(
        sm.input.activations,
        int(sm.wildcards.layer),
        s["tokenwise"],
        seed=s["seed"],
        device=resolve_device(s["device"]),
        out_table=sm.output.table,
        out_patches=sm.output.patches,
    )
