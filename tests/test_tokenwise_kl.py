"""Paper A functional test and pipeline: fast KL == slow KL for every family, synthetic layers, table columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import torch
from conftest import ROOT, tiny_model

from layergeom import config as lgconfig
from layergeom.adapters import get_adapter
from layergeom.store import dump_activations
from layergeom.tokenwise import CLASSES
from layergeom.tokenwise.kl import kl_against, kl_from_logits, patched_kl, patched_kl_slow
from layergeom.tokenwise.pipeline import SUMMARY_COLUMNS, fit_layer, summarise
from layergeom.tokenwise.stats import spearman_ci

SMALL = dict(k=12, n_anchors=40, mlp_steps=30, mlp_patience=5, energy_ranks=[1, 2, 4, 8], bootstrap=200)


def tokenwise_cfg(**over) -> dict:
    """The schema defaults (filled by the config validator) with test sizes."""
    cfg = lgconfig.validate(
        {"models": {"m": {"source": "config", "family": "llama", "hf_config": {}, "checkpoints": {"c": {}}}}}
    )
    return {**cfg["tokenwise"], **SMALL, **over}


def test_schema_defaults_are_the_methods_choices():
    cfg = lgconfig.validate(
        {"models": {"m": {"source": "config", "family": "llama", "hf_config": {}, "checkpoints": {"c": {}}}}}
    )
    t = cfg["tokenwise"]
    assert (t["k"], t["n_anchors"], t["leave_one_out"], t["rank"], t["lowrank_form"]) == (
        64,
        512,
        True,
        8,
        "identity_plus",
    )
    assert (t["mlp_width"], t["proj_k"], t["bootstrap"], t["ridge"], t["primary_convention"]) == (
        32,
        1,
        1000,
        1e-3,
        "delta",
    )
    assert t["classes"] == list(CLASSES)
    schema = lgconfig.load_schema("tokenwise")
    assert all("description" in p and "default" in p for p in schema["properties"].values())


def test_kl_from_logits_matches_scipy_entropy():
    g = torch.Generator().manual_seed(0)
    p, q = torch.randn(4, 50, generator=g), torch.randn(4, 50, generator=g)
    ref = [scipy.stats.entropy(torch.softmax(p[i].double(), 0), torch.softmax(q[i].double(), 0)) for i in range(4)]
    np.testing.assert_allclose(kl_from_logits(p, q).numpy(), ref, rtol=1e-5)


@pytest.mark.parametrize("scale", [1e-4, 1e-2, 1.0, 30.0])
def test_kl_against_keeps_precision_for_small_and_large_patches(scale):
    """The difference form (log sum p e^D - sum p D) == the log-softmax KL of the same fp32 logits in extended
    precision, from tiny patches (KL ~1e-9 nats, where even a float64 log-softmax loses digits) to huge ones."""
    g = torch.Generator().manual_seed(3)
    P = 4 * torch.randn(3, 50_000, generator=g)
    Q = P[:, None, :] + scale * torch.randn(3, 2, 50_000, generator=g)

    def log_softmax(x):  # in x87 extended precision (64-bit mantissa): an independent, more precise reference
        x = x.numpy().astype(np.longdouble)
        top = x.max(-1, keepdims=True)
        return x - top - np.log(np.exp(x - top).sum(-1, keepdims=True))

    lp, lq = log_softmax(P)[:, None, :], log_softmax(Q)
    ref = torch.as_tensor((np.exp(lp) * (lp - lq)).sum(-1).astype(np.float64))
    got = kl_against(P, torch.softmax(P.double(), -1), Q)
    assert got.shape == (3, 2) and got.dtype == torch.float64
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=0)


@pytest.mark.parametrize("max_rows", [1, 256], ids=["window-by-window", "windows-stacked"])
def test_fast_kl_equals_slow_kl(family, token_ids, max_rows):
    """One clean pass + batched resumes == a full patched forward per anchor, for every family (Mamba too),
    whether each window is resumed alone or the anchors of several windows share one resume call."""
    adapter = get_adapter(tiny_model(family))
    ids = torch.cat([token_ids, token_ids.flip(1)]).numpy()  # (4, 24)
    windows, positions = np.array([2, 0, 1, 0, 3, 1, 1, 2]), np.array([5, 3, 1, 17, 12, 9, 23, 5])
    g = np.random.default_rng(0)
    d = adapter.d_model
    patches = {l: g.standard_normal((2, len(windows), d)).astype(np.float32) for l in range(adapter.n_layers)}
    fast = patched_kl(adapter, ids, windows, positions, patches, max_rows=max_rows)
    slow = patched_kl_slow(adapter, ids, windows, positions, patches)
    for l in patches:
        assert np.all(fast[l] > 0)
        np.testing.assert_allclose(fast[l], slow[l], rtol=1e-4, atol=1e-7)


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory):
    """Activations of a tiny Llama whose block 0 is the identity (all its parameters zero)."""
    model = tiny_model("llama", seed=1)
    adapter = get_adapter(model)
    with torch.no_grad():
        for p in adapter.blocks()[0].parameters():
            p.zero_()
    windows = np.random.default_rng(0).integers(0, 512, (12, 16))
    path = tmp_path_factory.mktemp("tokenwise") / "activations"
    dump_activations(adapter, windows, path, batch_size=4)
    return adapter, windows, path


def _layer(tiny_store, layer, **over):
    adapter, windows, path = tiny_store
    cfg = tokenwise_cfg(**over)
    table, patches = fit_layer(path, layer, cfg, seed=0)
    idx = np.load(path / "index.npy")[patches["rows"]]
    kl = patched_kl(adapter, windows, idx[:, 0], idx[:, 1], {layer: patches["t"]}, max_rows=256)[layer]
    return table, patches, kl, cfg


def test_patching_the_clean_output_of_each_block_changes_nothing(tiny_store):
    """The patch for layer l replaces h_(l+1) (the store's next block input, or ``final``), not h_l."""
    adapter, windows, path = tiny_store
    from layergeom.store import ActivationStore

    store = ActivationStore(path)
    names = store.block_inputs()
    rows = np.flatnonzero(store.nonbos)[::7]
    idx = store.index[rows]
    for layer in range(adapter.n_layers):
        clean = np.stack([store.states(names[layer + 1])[rows], store.states(names[layer])[rows]])
        kl = patched_kl(adapter, windows, idx[:, 0], idx[:, 1], {layer: clean}, max_rows=256)[layer]
        assert np.abs(kl[0]).max() < 1e-6
        if layer > 0:  # block 0 is the identity, so h_0 = h_1 there
            assert kl[1].min() > 0 and np.median(kl[1]) > 1e3 * np.abs(kl[0]).max()


def test_exactly_tokenwise_layer_has_no_residual_and_no_kl(tiny_store):
    table, patches, kl, _ = _layer(tiny_store, 0)
    assert set(table["class"]) == set(CLASSES)
    assert table["relerr"].max() < 1e-6
    assert np.abs(kl).max() < 1e-6


def test_cross_token_residual_predicts_kl(tiny_store):
    """Block 1 is a random block: its attention mixes tokens, a term no tokenwise map can fit."""
    table, patches, kl, cfg = _layer(tiny_store, 1)
    for i, name in enumerate(patches["classes"]):
        g = table[table["class"] == name]
        assert g["relerr"].min() > 1e-3
        r = spearman_ci(g["relerr"], kl[i], n_boot=200, seed=0, level=0.95)
        assert r.rho > 0 and r.ci_low > 0, name


def test_tokenwise_table_columns(tiny_store):
    tables, kls = [], []
    for layer in (0, 1):
        table, patches, kl, cfg = _layer(tiny_store, layer)
        tables.append(table)
        for i, name in enumerate(patches["classes"]):
            kls.append(pd.DataFrame({"layer": layer, "class": name, "anchor": np.arange(kl.shape[1]), "kl": kl[i]}))
    summary, anchors, pooled = summarise(tables, pd.concat(kls), cfg, seed=0)
    assert list(summary.columns[: len(SUMMARY_COLUMNS)]) == SUMMARY_COLUMNS
    assert {"proj_tok", "energy_tok", "energy_res", "relerr_delta", "proj_full_k8", "cos_full_tok_abs"} <= set(
        summary.columns
    )
    assert len(summary) == 2 * len(CLASSES)
    assert (summary["n_anchors"] == cfg["n_anchors"]).all()
    one = summary[(summary["layer"] == 1) & (summary["class"] == "lowrank")].iloc[0]
    assert one["rho_ci_low"] <= one["spearman_rho"] <= one["rho_ci_high"]
    g = anchors[(anchors["layer"] == 1) & (anchors["class"] == "lowrank")]
    assert one["spearman_rho"] == pytest.approx(scipy.stats.spearmanr(g["relerr"], g["kl"]).statistic)
    assert one["kl"] == pytest.approx(g["kl"].mean())
    assert set(pooled["class"]) == set(CLASSES)


def test_bootstrap_ci_equals_a_loop_over_resamples():
    g = np.random.default_rng(0)
    x = g.standard_normal(60)
    y = x + g.standard_normal(60)
    r = spearman_ci(x, y, n_boot=300, seed=5, level=0.95)
    idx = np.random.default_rng(5).integers(0, 60, size=(300, 60))
    boots = [scipy.stats.spearmanr(x[i], y[i]).statistic for i in idx]
    assert (r.ci_low, r.ci_high) == pytest.approx(tuple(np.quantile(boots, [0.025, 0.975])), rel=1e-10)
    assert r.rho == pytest.approx(scipy.stats.spearmanr(x, y).statistic)


def test_rules_and_reports_exist():
    text = (ROOT / "rules" / "tokenwise.smk").read_text()
    for fig in ("geometry", "relerr", "relerr_kl", "rho", "energy_rank"):
        assert f"results/figures/tokenwise_{fig}.png" in text
        assert (ROOT / "report" / f"tokenwise_{fig}.rst").exists()
