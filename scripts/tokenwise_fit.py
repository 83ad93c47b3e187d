import os

# OpenMP threads that spin while waiting make small torch ops 10-100x slower on a shared machine
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from layergeom.runtime import resolve_device
from layergeom.tokenwise.pipeline import run_fit_layer
from layergeom.workflow import job

sm = snakemake  # noqa: F821
with job(sm, seed=sm.params.run["seed"], threads=sm.threads):
    run_fit_layer(
        sm.input.activations,
        int(sm.wildcards.layer),
        sm.params.tokenwise,
        seed=sm.params.run["seed"],
        device=resolve_device(sm.params.run["device"]),
        out_table=sm.output.table,
        out_patches=sm.output.patches,
    )
