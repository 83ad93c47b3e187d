import os
from pathlib import Path

# OpenMP threads that spin while waiting make small torch ops 10-100x slower on a shared machine
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from layergeom.runtime import resolve_device
from layergeom.tokenwise.pipeline import write_kl
from layergeom.workflow import job, snapshot_seconds

sm = snakemake  # noqa: F821
s = sm.params.settings
with job(sm, seed=s["seed"], threads=sm.threads):
    write_kl(
        Path(sm.input.weights).parent,
        sm.input.activations,
        list(sm.input.patches),
        device=resolve_device(s["device"]),
        batch_rows=s["tokenwise"]["kl_batch_rows"],
        out=sm.output[0],
        snapshot_s=snapshot_seconds(sm),
    )
