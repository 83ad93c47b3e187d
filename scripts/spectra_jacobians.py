import sys
from pathlib import Path

sys.path.insert(0, f"{snakemake.scriptdir}/../src")  # noqa: F821
from layergeom import models
from layergeom.adapters import get_adapter
from layergeom.runtime import resolve_device
from layergeom.spectral import pipeline
from layergeom.store import ActivationStore
from layergeom.workflow import job

sm = snakemake  # noqa: F821
cfg = sm.params.spectra
with job(sm, seed=sm.params.run["seed"], threads=sm.threads):
    model = models.load_model(Path(sm.input.weights).parent, device=resolve_device(sm.params.run["device"]))
    names = sm.params.boundaries
    pipeline.boundary_jacobians(
        get_adapter(model),
        ActivationStore(sm.input.activations),
        names,
        dict(zip(names, zip(sm.output.npy, sm.output.tsv, sm.output.groups, sm.output.meta))),
        n_samples=cfg["n_samples"],
        context=cfg["context"],
        chunk_size=cfg["chunk_size"],
        autodiff=cfg["autodiff"],
        spectral_norm=cfg["sample_spectral_norm"],
        dtype=cfg["dtype"],
        seed=sm.params.run["seed"],
        n_groups=cfg.get("n_groups", 16),  # the Jacobian job's key (config/schema/spectra.schema.yaml)
    )
