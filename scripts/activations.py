from pathlib import Path

from layergeom import corpus, models, store
from layergeom.adapters import get_adapter
from layergeom.runtime import device_info, resolve_device
from layergeom.workflow import job, snapshot_seconds

sm = snakemake  # noqa: F821
s = sm.params.settings
with job(sm, seed=s["seed"], threads=sm.threads):
    device = resolve_device(s["device"])
    model = models.load_model(Path(sm.input.weights).parent, device=device)
    windows = corpus.load_windows(sm.input.windows)
    # the device of the forward passes goes into store.json and from there into the manifest
    meta = {"model": sm.wildcards.model, "checkpoint": sm.wildcards.checkpoint, "device": device_info(device)}
    st = s["activations"]
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
