from pathlib import Path

from layergeom import corpus, models, store
from layergeom.adapters import get_adapter
from layergeom.runtime import resolve_device
from layergeom.workflow import job, snapshot_seconds

sm = snakemake  # noqa: F821
with job(sm, seed=sm.params.run["seed"], threads=sm.threads):
    model = models.load_model(Path(sm.input.weights).parent, device=resolve_device(sm.params.run["device"]))
    windows = corpus.load_windows(sm.input.windows)
    meta = {"model": sm.wildcards.model, "checkpoint": sm.wildcards.checkpoint}
    st = sm.params.store
    store.dump_activations(
        get_adapter(model),
        windows,
        sm.output[0],
        batch_size=st["batch_size"],
        dtype=st["dtype"],
        boundaries=st["boundaries"],
        extra_meta=meta,
        snapshot_s=snapshot_seconds(sm),
        resume_inputs=[sm.input.weights, sm.input.windows],
    )
