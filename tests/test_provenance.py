"""manifest.json's provenance: layergeom's version and code id, the library versions, the device of the
forward passes and the hub commit, each checked against a second route (the modules' own __version__, git)."""

from __future__ import annotations

import json
import subprocess
from importlib import metadata

import numpy as np
import pytest
import torch
import transformers
from conftest import ROOT, tiny_model

import layergeom
from layergeom import manifest, store
from layergeom.adapters import get_adapter
from layergeom.runtime import device_info

WINDOWS = np.random.default_rng(0).integers(0, 500, size=(3, 8))
SOURCE = {"model": "t", "checkpoint": "c", "source": "hub", "weights_sha256": "0", "n_layers": 2, "d_model": 32}
WIN = {"corpus": "python-docs", "n_windows": 3, "window_tokens": 8}


@pytest.fixture(scope="module")
def acts(tmp_path_factory):
    ad = get_adapter(tiny_model("llama"))
    path = tmp_path_factory.mktemp("acts") / "activations"
    st = store.dump_activations(ad, WINDOWS, path, extra_meta={"device": device_info("cpu")})
    return st


def test_manifest_carries_versions_code_device_and_hub_commit(tmp_path, acts):
    src = {**SOURCE, "hub_commit": "a" * 40}
    man = manifest.write_manifest(tmp_path / "m.json", source=src, windows=WIN, activations=acts.path,
                                  boundaries=acts.model_boundaries, seed=0)  # fmt: skip
    assert json.loads((tmp_path / "m.json").read_text()) == man
    assert man["layergeom_version"] == layergeom.__version__
    # the distribution's version; the build's (PyPI's CUDA torch: 2.15.0 vs 2.15.0+cu132) is the device's "torch"
    assert man["torch_version"] == metadata.version("torch") and torch.__version__.startswith(man["torch_version"])
    assert man["transformers_version"] == transformers.__version__
    assert man["numpy_version"] == np.__version__
    assert man["hub_commit"] == "a" * 40
    assert man["device"] == {"type": "cpu", "name": device_info("cpu")["name"], "torch": torch.__version__,
                             "cuda": torch.version.cuda}  # fmt: skip
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if (ROOT / ".git").exists() and head.returncode == 0:
        dirty = subprocess.run(["git", "-C", str(ROOT), "diff", "HEAD", "--quiet"]).returncode != 0
        assert man["code_id"] == f"git:{head.stdout.strip()}" + ("+dirty" if dirty else "")
    else:
        assert man["code_id"] == f"layergeom {layergeom.__version__}"


def test_outside_a_checkout_the_code_id_is_the_package_version(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "__file__", str(tmp_path / "site-packages" / "layergeom" / "manifest.py"))
    manifest.code_id.cache_clear()
    try:
        assert manifest.code_id() == f"layergeom {layergeom.__version__}"
    finally:
        manifest.code_id.cache_clear()


def test_a_manifest_without_a_hub_download_has_no_commit(tmp_path, acts):
    man = manifest.write_manifest(tmp_path / "m.json", source=SOURCE, windows=WIN, activations=acts.path,
                                  boundaries=acts.model_boundaries, seed=0)  # fmt: skip
    assert man["hub_commit"] is None
