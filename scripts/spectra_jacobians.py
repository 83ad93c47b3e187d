from pathlib import Path

from layergeom import models
from layergeom.adapters import get_adapter
from layergeom.runtime import resolve_device
from layergeom.spectral.jobs.jacobians import SUFFIXES, boundary_jacobians
from layergeom.store import ActivationStore
from layergeom.workflow import job

sm = snakemake  # noqa: F821
s = sm.params.settings
with job(sm, seed=s["seed"], threads=sm.threads):
    model = models.load_model(Path(sm.input.weights).parent, device=resolve_device(s["device"]))
    names = sm.params.boundaries
    files = {k: sm.output[k] for k in SUFFIXES}  # one list per kind, in boundary order
    boundary_jacobians(
        get_adapter(model),
        ActivationStore(sm.input.activations),
        names,
        {n: {k: files[k][i] for k in files} for i, n in enumerate(names)},
        dict(s["spectra"]),
        seed=s["seed"],
        weights=sm.input.weights,
    )
