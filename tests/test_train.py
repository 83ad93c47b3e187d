"""The `train` model source: learning, checkpoints at log-spaced steps, determinism."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TINY

from layergeom import corpus, models, train

TCFG = {"steps": 60, "n_checkpoints": 5, "batch_size": 8, "lr": 0.01, "weight_decay": 0.0, "warmup_fraction": 0.1,
        "grad_clip": 1.0, "heldout_fraction": 0.1, "seed": 0, "threads": 2}  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    docs = corpus.load_documents({"source": "python-docs"})
    corpus.train_bpe(docs, 512, d)
    tok = models.load_tokenizer(d)
    return corpus.make_windows(docs, tok, None, 32, seed=0)["tokens"], tok


@pytest.fixture(scope="module")
def run(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("train") / "ckpts"
    rows = train.train("llama", TINY["llama"]["hf_config"], data[0], data[1], TCFG, out, "t")
    return out, rows


def test_log_spaced_steps():
    s = train.log_spaced_steps(1000, 8)
    assert s[0] == 0 and s[-1] == 1000 and len(s) == 8 and s == sorted(set(s))
    ratios = np.diff(np.log(np.array(s[1:], dtype=float)))
    assert ratios.max() < 3 * ratios.min() + 1e-9  # roughly log-spaced


def test_training_lowers_heldout_loss(run):
    _, rows = run
    held = [r["heldout_loss"] for r in rows if not np.isnan(r["heldout_loss"])]
    assert held[0] > np.log(512) - 0.5  # random init: about uniform over the vocabulary
    assert held[-1] < held[0] - 0.5


def test_checkpoints_exist_load_and_step0_is_init(run):
    out, _ = run
    steps = train.log_spaced_steps(TCFG["steps"], TCFG["n_checkpoints"])
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(f"step{s}" for s in steps)
    init = models.build_random("llama", TINY["llama"]["hf_config"], TCFG["seed"])
    for s in steps:
        m = models.load_model(out / f"step{s}")
        sha = json.loads((out / f"step{s}" / "source.json").read_text())["weights_sha256"]
        assert sha == models.weights_sha256(m.state_dict())
    step0 = json.loads((out / "step0" / "source.json").read_text())["weights_sha256"]
    assert step0 == models.weights_sha256(init.state_dict())
    last = json.loads((out / f"step{steps[-1]}" / "source.json").read_text())["weights_sha256"]
    assert last != step0


def test_same_seed_gives_identical_checkpoints(run, data, tmp_path):
    out, _ = run
    cfg = dict(TCFG, steps=10, n_checkpoints=3)
    a = train.train("llama", TINY["llama"]["hf_config"], data[0], data[1], cfg, tmp_path / "a", "t")
    b = train.train("llama", TINY["llama"]["hf_config"], data[0], data[1], cfg, tmp_path / "b", "t")
    key = ["step", "train_loss", "heldout_loss"]
    assert np.array_equal([[r[k] for k in key] for r in a], [[r[k] for k in key] for r in b], equal_nan=True)
    for s in train.log_spaced_steps(10, 3):
        ha = json.loads((tmp_path / "a" / f"step{s}" / "source.json").read_text())["weights_sha256"]
        hb = json.loads((tmp_path / "b" / f"step{s}" / "source.json").read_text())["weights_sha256"]
        assert ha == hb
