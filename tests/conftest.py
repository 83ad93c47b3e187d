"""Shared fixtures: tiny random models of every family, built from config/test.yaml (one source of truth)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: no spinning OpenMP threads on 2 shared cores

import pytest

pytest.register_assert_rewrite("lg_runs")

import torch  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from layergeom.adapters import FAMILIES, get_adapter  # noqa: E402
from layergeom.models import build_random  # noqa: E402

TEST_CONFIG = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
TINY = {m["family"]: m for m in TEST_CONFIG["models"].values()}


def tiny_model(family: str, seed: int = 0, dtype=torch.float32):
    """A tiny randomly initialised model of a family (vocab 512, 2 layers, d=32)."""
    return build_random(family, TINY[family]["hf_config"], seed, dtype=dtype)


@pytest.fixture(params=FAMILIES)
def family(request):
    return request.param


@pytest.fixture
def tiny_adapter(family):
    return get_adapter(tiny_model(family))


@pytest.fixture
def token_ids():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 512, (2, 24), generator=g)
