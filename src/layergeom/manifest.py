"""``results/{model}/{checkpoint}/manifest.json``: what was measured, on which weights and text."""

from __future__ import annotations

import functools
import json
import logging
import subprocess
from importlib import metadata
from pathlib import Path

from .runtime import LayergeomError, atomic_path
from .store import ActivationStore

log = logging.getLogger("layergeom")


#: the libraries whose versions a manifest records (``{name}_version``)
LIBRARIES = ("torch", "transformers", "numpy")


@functools.cache
def code_id() -> str:
    """The code that ran: ``git:{commit}`` of the checkout layergeom runs from (``+dirty`` when tracked files differ
    from it), else ``layergeom {version}`` (an installed package)."""
    from . import __version__

    root = Path(__file__).resolve().parents[2]
    if (root / ".git").exists():
        try:
            head = subprocess.run(
                ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30
            )
            dirty = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError):
            head = None
        if head is not None and head.returncode == 0 and head.stdout.strip():
            return f"git:{head.stdout.strip()}{'+dirty' if dirty.stdout.strip() else ''}"
    return f"layergeom {__version__}"


def provenance() -> dict:
    """layergeom's version and code id, and the versions of the libraries the numbers come from."""
    from . import __version__

    out = {"layergeom_version": __version__, "code_id": code_id()}
    for lib in LIBRARIES:
        try:
            out[f"{lib}_version"] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[f"{lib}_version"] = None
    return out


def write_manifest(out, *, source: dict, windows: dict, activations, boundaries: list[str], seed: int) -> dict:
    st = ActivationStore(Path(activations))
    if st.model_boundaries != list(boundaries):
        raise LayergeomError(
            f"{source['model']}: the config implies boundaries {boundaries[:3]}... but the model has "
            f"{st.model_boundaries[:3]}...; "
            "check n_layers and family"
        )
    manifest = {
        "model": source["model"],
        "checkpoint": source["checkpoint"],
        "source": source["source"],
        "revision": source.get("revision"),
        "weights_sha256": source["weights_sha256"],
        "model_type": source.get("model_type"),
        "n_layers": source["n_layers"],
        "d_model": source["d_model"],
        "boundaries": list(boundaries),
        "dtype": source.get("dtype", "float32"),
        "activations_dtype": st.dtype,
        "activations_boundaries": st.boundaries,
        "corpus": windows["corpus"],
        "n_windows": windows["n_windows"],
        "window_tokens": windows["window_tokens"],
        "seed": seed,
        "hub_commit": source.get("hub_commit"),  # the commit the hub revision pointed at when downloaded
        "device": st.meta.get("device"),  # of the forward passes (the activations job)
        **provenance(),
    }
    with atomic_path(out) as tmp:
        Path(tmp).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def warn_identical(records: list[dict]) -> list[str]:
    """Warnings for checkpoints of one model whose weights hash identically (some hub revisions do)."""
    seen: dict[str, str] = {}
    out = []
    for r in records:
        sha, name = r["weights_sha256"], r["checkpoint"]
        if sha in seen:
            out.append(f"checkpoints '{seen[sha]}' and '{name}' of {r['model']} have identical weights ({sha[:12]})")
        else:
            seen[sha] = name
    for w in out:
        log.warning(w)
    return out


def checkpoint_table(records: list[dict]):
    """checkpoints.tsv: one row per checkpoint with its weight hash and the first checkpoint it is identical to."""
    import pandas as pd

    cols = ["model", "checkpoint", "source", "revision", "weights_sha256"]
    first: dict[str, str] = {}
    rows = []
    for r in records:
        same = first.setdefault(r["weights_sha256"], r["checkpoint"])
        rows.append({**{c: r.get(c) for c in cols}, "identical_to": same if same != r["checkpoint"] else ""})
    return pd.DataFrame(rows, columns=[*cols, "identical_to"])
