"""Exact sublayer Jacobians: finite differences, a closed form, the naive per-sample reference, the structured
mean against autodiff, samples and groups, the store path and its resumption after a crash."""

from __future__ import annotations

import gc
import json
import logging
import math
import signal
import weakref
from pathlib import Path

import forked
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ROOT, central_differences, tiny_model
from schema_defaults import SEED, SPECTRA, boundary_kw, jacobian_kw

from layergeom.adapters import FAMILIES, adapter_class, get_adapter
from layergeom.adapters import parts as P
from layergeom.models import random_from_config
from layergeom.resume import work_folder
from layergeom.runtime import LayergeomError
from layergeom.spectral import jacobians as jac
from layergeom.spectral import structured as st
from layergeom.spectral.jobs.jacobians import SUMMARY_COLUMNS, boundary_jacobians, resume_key
from layergeom.store import ActivationStore, dump_activations

MODE = SPECTRA["autodiff"]  # the autodiff mode of the Jacobian job

# transformers computes the RMSNorms of Llama, Gemma 3 and Mamba (and Mamba's SSM parameters) in float32
# even in a float64 model, so those updates carry float32 rounding (~1e-7 relative): their differences
# need a larger step and a looser bound; so does GPT-NeoX's eager attention in context (float32 softmax; a
# length-1 softmax is exactly 1). GPT-2 runs in float64 throughout.
FD = {"float64": (1e-3, 1e-8), "float32_inside": (2e-2, 1e-4)}  # (step, tolerance relative to max|J|)
FLOAT32_INSIDE = {"isolated": {"llama", "gemma3", "mamba"}, "in_context": {"gpt_neox", "llama", "gemma3", "mamba"}}


@pytest.fixture(params=[f for f in FAMILIES if not adapter_class(f).uses_tokens])
def family(request):
    """Families whose updates depend on the state alone; token-dependent ones (Gemma-4): the contract tests
    in test_adapters.py (Jacobians == finite differences per model type) and the store test below."""
    return request.param


def fd_setting(family, context="isolated"):
    return FD["float32_inside" if family in FLOAT32_INSIDE[context] else "float64"]


@pytest.fixture
def adapter64(family):
    return get_adapter(tiny_model(family, dtype=torch.float64))


def test_isolated_matches_finite_differences(adapter64, family):
    ad = adapter64
    h, tol = fd_setting(family)
    x = torch.randn(3, ad.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for b in ad.boundaries:
        J = jac.isolated_jacobians(ad, b, x, mode=MODE)
        with torch.no_grad():
            fd = central_differences(lambda X, b=b: ad.update(b, X), x, h)
        scale = fd.abs().max()
        assert scale > 1e-6, f"{b}: degenerate update"
        assert torch.allclose(J, fd, atol=tol * scale, rtol=0), f"{b}: {(J - fd).abs().max() / scale:.2e}"


def test_in_context_matches_finite_differences(adapter64, family):
    ad = adapter64
    h, tol = fd_setting(family, "in_context")
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, ad.d_model, dtype=torch.float64, generator=g)
    prefix = torch.randn(2, 5, ad.d_model, dtype=torch.float64, generator=g)
    for b in ad.boundaries:
        J = jac.in_context_jacobians(ad, b, prefix, x, mode=MODE)
        with torch.no_grad():
            fd = torch.stack(
                [
                    central_differences(
                        lambda X, i=i, b=b: ad.update_in_context(b, prefix[i].expand(len(X), 5, ad.d_model), X),
                        x[i : i + 1],
                        h,
                    )[0]
                    for i in range(len(x))
                ]
            )
        scale = fd.abs().max()
        assert torch.allclose(J, fd, atol=tol * scale, rtol=0), f"{b}: {(J - fd).abs().max() / scale:.2e}"
        # the prefix matters for token-mixing updates and not for the tokenwise MLP
        iso = jac.isolated_jacobians(ad, b, x, mode=MODE)
        if b.kind == "mlp":
            assert torch.allclose(J, iso, atol=1e-10 * scale)
        else:
            assert (J - iso).abs().max() > 1e-4 * scale


def test_mean_jacobian_in_context_uses_the_prefix_and_shortcuts_only_mlp(adapter64):
    ad = adapter64
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, ad.d_model, dtype=torch.float64, generator=g)
    prefix = torch.randn(3, 4, ad.d_model, dtype=torch.float64, generator=g)
    for b in ad.boundaries:
        mean, summ = jac.mean_jacobian(ad, b, x, prefix, **jacobian_kw(chunk_size=2, dtype=torch.float64))
        ref = jac.in_context_jacobians(ad, b, prefix, x, mode=MODE)  # the full path for every kind
        assert mean.dtype == np.float64 and mean.shape == (ad.d_model, ad.d_model)
        np.testing.assert_allclose(mean, ref.mean(0).numpy(), atol=1e-10 * float(ref.abs().max()))
        np.testing.assert_allclose(summ["fro_norm"], torch.linalg.matrix_norm(ref).numpy(), rtol=1e-10)
        np.testing.assert_allclose(summ["trace"], ref.diagonal(dim1=1, dim2=2).sum(-1).numpy(), atol=1e-10)


def test_llama_attention_closed_form():
    """Isolated attention of a length-1 sequence: J = W_O · repeat_kv(W_V) · J_RMSNorm(x)."""
    model = tiny_model("llama", dtype=torch.float64)
    ad = get_adapter(model)
    cfg = model.config
    n_heads, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = cfg.hidden_size // n_heads
    x = torch.randn(4, ad.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    for layer in range(ad.n_layers):
        blk = model.model.layers[layer]
        with torch.no_grad():  # give the norm a non-trivial weight so that it enters the check
            blk.input_layernorm.weight.copy_(1 + 0.3 * torch.randn(ad.d_model, dtype=torch.float64))
        w, eps = blk.input_layernorm.weight.detach(), cfg.rms_norm_eps
        Wv = blk.self_attn.v_proj.weight.detach()  # (n_kv*hd, d)
        Wo = blk.self_attn.o_proj.weight.detach()  # (d, n_heads*hd)
        Wv_rep = Wv.view(n_kv, hd, -1).repeat_interleave(n_heads // n_kv, dim=0).reshape(n_heads * hd, -1)
        d = ad.d_model
        r = torch.sqrt(x.pow(2).mean(-1) + eps)  # (N,)
        eye = torch.eye(d, dtype=torch.float64)
        # y = w ⊙ x / r  =>  ∂y/∂x = diag(w) (I / r − x xᵀ / (d r³))
        J_norm = w[None, :, None] * (
            eye / r[:, None, None] - x[:, :, None] * x[:, None, :] / (d * r[:, None, None] ** 3)
        )
        expected = Wo @ Wv_rep @ J_norm  # (N, d, d)
        J = jac.isolated_jacobians(ad, f"L{layer}.attn", x, mode=MODE)
        # the RMSNorm runs in float32 inside transformers (see FD above): float32-level agreement
        assert torch.allclose(J, expected, atol=1e-5 * float(expected.abs().max()), rtol=0), (J - expected).abs().max()


def test_batched_equals_naive_per_sample(family):
    ad = get_adapter(tiny_model(family))
    x = torch.randn(2, ad.d_model, generator=torch.Generator().manual_seed(5))
    for b in ad.boundaries:
        for mode in ("rev", "fwd"):
            J = jac.isolated_jacobians(ad, b, x, mode=mode)
            ref = jac.naive_jacobians(ad, b, x)
            assert torch.allclose(J, ref, atol=1e-5 * float(ref.abs().max()), rtol=0), (b, mode)


def test_select_samples_and_groups():
    T = 8
    last = jac.select_samples(n_windows=5, window_tokens=T, n_samples=10, samples="last", seed=SEED)
    np.testing.assert_array_equal(last, [7, 15, 23, 31, 39])  # last position of every window
    sub = jac.select_samples(n_windows=50, window_tokens=T, n_samples=10, samples="last", seed=3)
    assert len(sub) == 10 and len(set(sub)) == 10 and np.all(sub % T == T - 1) and np.all(np.diff(sub) > 0)
    np.testing.assert_array_equal(sub, jac.select_samples(50, T, 10, "last", seed=3))
    assert not np.array_equal(sub, jac.select_samples(50, T, 10, "last", seed=4))
    # all: every non-BOS token of the same sample windows
    every = jac.select_samples(50, T, 10, "all", seed=3)
    assert len(every) == 10 * (T - 1) and not np.any(every % T == 0)
    np.testing.assert_array_equal(np.unique(every // T), sub // T)
    # N: a seeded subset of those tokens, all of them when N is larger
    some = jac.select_samples(50, T, 10, 20, seed=3)
    assert len(some) == 20 and np.all(np.isin(some, every)) and np.all(np.diff(some) > 0)
    np.testing.assert_array_equal(jac.select_samples(50, T, 10, 1000, seed=3), every)
    with pytest.raises(LayergeomError, match="at least 2 tokens"):
        jac.select_samples(5, 1, 3, "last", SEED)
    assert jac.resolve_samples(None, "isolated") == "all" and jac.resolve_samples(None, "in_context") == "last"
    with pytest.raises(LayergeomError, match="spectra.samples"):
        jac.resolve_samples(0, "isolated")

    windows = every // T
    groups, spans = jac.sample_groups(windows, 4)
    assert len(spans) == 4 and np.all(np.diff(groups) >= 0)  # contiguous blocks of sorted windows
    distinct = np.unique(windows)
    assert [s[0] for s in spans] == [int(b[0]) for b in np.array_split(distinct, 4)]
    for g, (first, last_w) in enumerate(spans):  # a window never straddles two groups
        assert set(np.unique(windows[groups == g])) == {w for w in distinct if first <= w <= last_w}
    assert len(jac.sample_groups(windows, 100)[1]) == 10  # at most one group per window


# ---- the structured mean against autodiff -------------------------------------------------------------
BASE = dict(vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=64, max_position_embeddings=128)  # fmt: skip
# model types beyond the tiny test models that exercise other parts: post-norms only (OLMo-2), q/k/v biases
# (Qwen2), a parameter-free LayerNorm (OLMo)
EXTRA = {"olmo2": BASE, "qwen2": BASE, "olmo": BASE}
# transformers' RMSNorms (and OLMo's LayerNorm) compute in float32 inside a float64 model, so those models'
# autodiff Jacobians carry float32 rounding; GPT-2 and GPT-NeoX run in float64 throughout
NORMS_IN_FLOAT32 = {"llama", "gemma3", "olmo2", "qwen2", "olmo"}
STRUCTURED = ["gpt2", "gpt_neox", "llama", "gemma3", *EXTRA]


def model64(name: str):
    if name in EXTRA:
        from transformers import AutoConfig

        model = random_from_config(AutoConfig.for_model(name, **EXTRA[name]), 0, torch.float64)
    else:
        model = tiny_model(name, dtype=torch.float64)
    g = torch.Generator().manual_seed(9)
    with torch.no_grad():  # every norm weight and bias away from its init (1, 0), so that each one matters
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def states(n: int, d: int, seed: int = 1) -> torch.Tensor:
    """Rows at three scales: at the smallest, mean(x²) is a few times a norm's eps, so that eps matters."""
    x = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return x * torch.tensor([3e-3, 1.0, 30.0], dtype=torch.float64).repeat(n)[:n, None]


def tolerance(name: str, sub) -> float:
    """Rounding of sums over the widest inner dimension m, at float32 or float64 precision."""
    eps = torch.finfo(torch.float32 if name in NORMS_IN_FLOAT32 else torch.float64).eps
    return 8 * math.sqrt(st._inner_width(sub)) * eps


@pytest.mark.parametrize("name", STRUCTURED)
def test_structured_equals_autodiff_float64(name):
    """Group sums and per-sample Jacobians from the parts equal torch.func autodiff at every boundary."""
    ad = get_adapter(model64(name))
    x = states(9, ad.d_model)
    groups = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    post = 0
    for b in ad.boundaries:
        sub = ad.structure(b)
        assert sub is not None, f"{name} {b}: no structure"
        post += any(br.post is not None for br in sub.branches)
        J = jac.isolated_jacobians(ad, b, x, mode=MODE)  # (9, d, d) autodiff
        ref = torch.stack([J[groups == g].sum(0) for g in range(3)])
        sums = st.structured_sums(sub, x, groups, 3)
        per = st.structured_sums(sub, x, torch.arange(len(x)), len(x))
        tol = tolerance(name, sub)
        for got, want in ((sums, ref), (per, J)):
            err = float((got - want).abs().max() / want.abs().max())
            assert err <= tol, f"{name} {b}: structured vs autodiff {err:.1e} > {tol:.1e}"
        with torch.no_grad():
            F = ad.update(b, x)
        err = float((st.structured_forward(sub, x) - F).abs().max() / F.abs().max())
        assert err <= tol, f"{name} {b}: update from the parts {err:.1e} > {tol:.1e}"
    assert post == (2 * ad.n_layers if name in ("gemma3", "olmo2") else 0)  # sandwich / post-norms were described


def test_structured_catches_a_wrong_description():
    """The check compares the parts with the model: a wrong weight convention fails it, and auto falls back."""
    ad = get_adapter(model64("gemma3"))
    b = ad.boundaries[1]
    good = ad.structure(b)
    br = good.branches[0]
    bad = P.Sublayer((P.Branch(br.core, pre=P.Norm("rms", br.pre.eps, br.pre.weight), post=br.post),))  # w, not 1+w
    x = states(4, ad.d_model)
    assert jac.check_structure(ad, b, good, x)[0]
    ok, report = jac.check_structure(ad, b, bad, x)
    assert not ok, report


def test_structured_float32_matches_naive_reference():
    """In the workflow's float32, the structured mean agrees with per-sample torch.autograd.functional.jacobian."""
    for family in ("llama", "gpt2"):
        ad = get_adapter(tiny_model(family))
        x = torch.randn(12, ad.d_model, generator=torch.Generator().manual_seed(7))
        for b in ad.boundaries:
            sub = ad.structure(b)
            ref = jac.naive_jacobians(ad, b, x).double().mean(0)
            got = st.structured_sums(sub, x, torch.zeros(12, dtype=torch.long), 1)[0] / 12
            tol = 8 * math.sqrt(st._inner_width(sub)) * torch.finfo(torch.float32).eps
            assert float((got - ref).abs().max() / ref.abs().max()) <= tol, (family, b)


def test_route_choice_and_fallback_logged(caplog):
    mamba = get_adapter(tiny_model("mamba"))
    llama = get_adapter(tiny_model("llama"))
    route, sub, reason = jac.choose_method(mamba, "L0.block", "isolated", SPECTRA["method"])
    assert (route, sub) == ("autodiff", None) and "describes no structure" in reason
    with pytest.raises(LayergeomError, match="method: structured"):
        jac.choose_method(mamba, "L0.block", "isolated", "structured")
    assert jac.choose_method(llama, "L0.attn", "isolated", SPECTRA["method"])[0] == "structured"
    assert (
        jac.choose_method(llama, "L0.mlp", "in_context", SPECTRA["method"])[0] == "structured"
    )  # tokenwise: same Jacobian
    assert jac.choose_method(llama, "L0.attn", "in_context", SPECTRA["method"])[0] == "autodiff"
    assert jac.choose_method(llama, "L0.attn", "isolated", "autodiff")[0] == "autodiff"
    x = torch.randn(6, mamba.d_model, generator=torch.Generator().manual_seed(8))
    with caplog.at_level(logging.INFO, logger="layergeom"):
        res = jac.boundary_jacobian(
            mamba, "L0.block", x, np.array([0, 0, 0, 1, 1, 1]), 2, summary_idx=np.arange(2), **boundary_kw()
        )
    assert res.method == "autodiff"
    assert any("autodiff" in r.getMessage() and "describes no structure" in r.getMessage() for r in caplog.records)
    ref = jac.isolated_jacobians(mamba, "L0.block", x, mode=MODE).double()
    np.testing.assert_allclose(res.mean, ref.mean(0).numpy(), atol=1e-12 * float(ref.abs().max()))
    np.testing.assert_allclose(res.group_means[1], ref[3:].mean(0).numpy(), atol=1e-12 * float(ref.abs().max()))


def test_failed_check_falls_back_or_raises(caplog, monkeypatch):
    ad = get_adapter(tiny_model("gemma3"))
    good = ad.structure
    monkeypatch.setattr(ad, "structure", lambda b: _without_offset(good(b)))
    x = torch.randn(4, ad.d_model, generator=torch.Generator().manual_seed(8))
    with caplog.at_level(logging.WARNING, logger="layergeom"):
        res = jac.boundary_jacobian(
            ad, "L0.mlp", x, np.zeros(4, dtype=np.int64), 1, summary_idx=np.arange(2), **boundary_kw()
        )
    assert res.method == "autodiff" and any("disagrees" in r.getMessage() for r in caplog.records)
    with pytest.raises(LayergeomError, match="disagrees"):
        jac.boundary_jacobian(
            ad,
            "L0.mlp",
            x,
            np.zeros(4, dtype=np.int64),
            1,
            summary_idx=np.arange(2),
            **boundary_kw(method="structured"),
        )


def _without_offset(sub):
    with torch.no_grad():  # make the weights matter, then drop Gemma's 1 + w
        sub.branches[0].pre.weight.normal_(generator=torch.Generator().manual_seed(3))
    br = sub.branches[0]
    return P.Sublayer((P.Branch(br.core, pre=P.Norm("rms", br.pre.eps, br.pre.weight), post=br.post),))


# ---- the store path ------------------------------------------------------------------------------------------
def outputs_for(names, folder: Path) -> dict:
    ext = {"npy": "npy", "groups": "groups.npy", "json": "json", "tsv": "tsv"}
    return {n: {k: folder / f"{n}.{e}" for k, e in ext.items()} for n in names}


@pytest.fixture(scope="module")
def llama_store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("store")
    ad = get_adapter(tiny_model("llama"))
    windows = torch.randint(0, 512, (5, 9), generator=torch.Generator().manual_seed(6)).numpy()
    dump_activations(ad, windows, tmp / "acts", batch_size=4)
    return ad, windows, ActivationStore(tmp / "acts")


@pytest.mark.parametrize(
    ("context", "samples", "method"),
    [("isolated", "all", "auto"), ("isolated", "all", "autodiff"), ("in_context", "last", "auto"),
     ("in_context", "all", "auto"), ("isolated", 13, "auto")],
)  # fmt: skip
def test_boundary_jacobians_from_store(tmp_path, llama_store, context, samples, method):
    ad, windows, store = llama_store
    names = [b.name for b in ad.boundaries]
    outs = outputs_for(names, tmp_path / "jac")
    cfg = {"n_samples": 8, "samples": samples, "context": context, "method": method, "n_groups": 2,
           "summary_samples": 6, "chunk_size": 3}  # fmt: skip
    res = boundary_jacobians(ad, store, names, outs, cfg, seed=SEED)
    assert not (tmp_path / "jac" / work_folder.PARTIAL).exists()
    T = windows.shape[1]
    rows = jac.select_samples(5, T, 8, samples, SEED)
    win, pos = rows // T, rows % T
    cap = ad.capture(torch.as_tensor(windows))
    for n in names:
        meta = json.loads(outs[n]["json"].read_text())
        J, G = np.load(outs[n]["npy"]), np.load(outs[n]["groups"])
        assert J.dtype == np.float64 and J.shape == (ad.d_model, ad.d_model) and G.dtype == np.float32
        assert res[n] == meta and meta["n_samples"] == len(rows) and meta["samples"] == samples
        blocks = np.array_split(np.unique(win), 2)
        in_second = win >= blocks[1][0]
        assert meta["group_windows"] == [[int(b[0]), int(b[-1])] for b in blocks] and len(G) == 2
        assert meta["group_counts"] == [int(np.sum(~in_second)), int(np.sum(in_second))]
        want_method = (
            "autodiff" if method == "autodiff" or (context == "in_context" and n.endswith("attn")) else ("structured")
        )
        assert meta["method"] == want_method
        # the total is the count-weighted mean of the group means
        np.testing.assert_allclose(
            J, np.tensordot(meta["group_counts"], G.astype(np.float64), 1) / meta["n_samples"],
            atol=1e-6 * np.abs(J).max(),
        )  # fmt: skip
        # independent recomputation: one autodiff Jacobian per sample from the captured stream
        ref = []
        for w, p in zip(win, pos):
            xs = cap[n][w : w + 1, p]
            if context == "isolated":
                ref.append(jac.naive_jacobians(ad, n, xs)[0])
            else:
                ref.append(jac.in_context_jacobians(ad, n, cap[n][w : w + 1, :p], xs, mode=MODE)[0])
        ref = torch.stack(ref).double()
        scale = float(ref.abs().max())
        np.testing.assert_allclose(J, ref.mean(0).numpy(), atol=2e-5 * scale)
        np.testing.assert_allclose(G[1], ref[in_second].mean(0).numpy(), atol=2e-5 * scale)
        tab = pd.read_csv(outs[n]["tsv"], sep="\t")
        assert list(tab.columns) == SUMMARY_COLUMNS and len(tab) == min(6, len(rows))
        np.testing.assert_array_equal(tab["window"], win[tab["sample"]])
        np.testing.assert_array_equal(tab["position"], pos[tab["sample"]])
        sel = ref[torch.as_tensor(np.array(tab["sample"]))]
        np.testing.assert_allclose(tab["fro_norm"], torch.linalg.matrix_norm(sel).numpy(), rtol=2e-5)
        np.testing.assert_allclose(tab["trace"], sel.diagonal(dim1=1, dim2=2).sum(-1).numpy(), atol=2e-5 * scale)
        np.testing.assert_allclose(tab["x_norm"], cap[n][win, pos][tab["sample"]].double().norm(dim=-1), rtol=1e-5)


# ---- resuming after a crash ---------------------------------------------------------------------------------
REAL_BOUNDARY_JACOBIAN = jac.boundary_jacobian


def _count_calls(monkeypatch, fail_after: int | None = None) -> list[str]:
    """Record the boundaries the job computes; raise after fail_after of them (a crash mid-job)."""
    calls, real = [], REAL_BOUNDARY_JACOBIAN

    def wrapped(adapter, b, *args, **kwargs):
        if fail_after is not None and len(calls) == fail_after:
            raise RuntimeError("injected crash")
        calls.append(str(b))
        return real(adapter, b, *args, **kwargs)

    monkeypatch.setattr(jac, "boundary_jacobian", wrapped)
    return calls


def _files(outs) -> dict[str, bytes]:
    return {Path(p).name: Path(p).read_bytes() for o in outs.values() for p in o.values()}


CFG = {"n_samples": 8, "n_groups": 2, "summary_samples": 4}


def test_resume_after_an_exception(tmp_path, llama_store, monkeypatch):
    ad, _, store = llama_store
    names = [b.name for b in ad.boundaries]
    whole = outputs_for(names, tmp_path / "whole")
    boundary_jacobians(ad, store, names, whole, CFG, seed=SEED)

    outs = outputs_for(names, tmp_path / "jac")
    calls = _count_calls(monkeypatch, fail_after=2)
    with pytest.raises(RuntimeError, match="injected"):
        boundary_jacobians(ad, store, names, outs, CFG, seed=SEED)
    assert calls == names[:2] and not any(Path(p).exists() for o in outs.values() for p in o.values())
    calls = _count_calls(monkeypatch)
    boundary_jacobians(ad, store, names, outs, CFG, seed=SEED)
    assert calls == names[2:]  # only the unfinished boundaries were computed
    assert _files(outs) == _files(whole)  # byte for byte what an uninterrupted run writes
    # finished boundaries of other settings are not reused
    _count_calls(monkeypatch, fail_after=1)
    with pytest.raises(RuntimeError, match="injected"):
        boundary_jacobians(ad, store, names, outs, CFG, seed=SEED)
    calls = _count_calls(monkeypatch)
    boundary_jacobians(ad, store, names, outs, {**CFG, "summary_samples": 3}, seed=SEED)
    assert calls == names


def test_the_job_holds_one_boundary_at_a_time(tmp_path, llama_store, monkeypatch):
    """A boundary's arrays (J̄ and its G group means in float64: 2.3 GB at d = 4096, G = 16) are released before
    the next boundary is computed, and none is returned: the job's peak is its largest boundary, as its memory
    request counts, not the sum over a checkpoint's boundaries (64 of them for an 8B model)."""
    ad, _, store = llama_store
    names = [b.name for b in ad.boundaries]
    alive, real = [], REAL_BOUNDARY_JACOBIAN
    held = []  # per computed boundary: how many earlier boundaries' arrays were still alive when it started

    def watched(adapter, b, *args, **kwargs):
        gc.collect()
        held.append(sum(r() is not None for r in alive))
        res = real(adapter, b, *args, **kwargs)
        alive.extend(weakref.ref(a) for a in (res.mean, res.group_means))
        return res

    monkeypatch.setattr(jac, "boundary_jacobian", watched)
    out = boundary_jacobians(ad, store, names, outputs_for(names, tmp_path / "jac"), CFG, seed=SEED)
    gc.collect()
    assert held == [0] * len(names) and len(names) > 1
    assert not any(r() is not None for r in alive), "the returned records hold a boundary's arrays"
    assert sorted(out) == sorted(names)


@pytest.mark.parametrize("damage", ["truncated", "swapped"])
def test_resume_redoes_a_boundary_whose_kept_files_do_not_match_their_marker(tmp_path, llama_store, monkeypatch,
                                                                             caplog, damage):  # fmt: skip
    """A kept file cut short (a crash mid-write, a full disk) or swapped with another boundary's is not promoted:
    its boundary is computed again (logged), and the outputs equal an uninterrupted run's."""
    ad, _, store = llama_store
    names = [b.name for b in ad.boundaries]
    whole = outputs_for(names, tmp_path / "whole")
    boundary_jacobians(ad, store, names, whole, CFG, seed=SEED)
    outs = outputs_for(names, tmp_path / "jac")
    _count_calls(monkeypatch, fail_after=3)
    with pytest.raises(RuntimeError, match="injected"):
        boundary_jacobians(ad, store, names, outs, CFG, seed=SEED)
    work = tmp_path / "jac" / work_folder.PARTIAL
    a, b = work / f"{names[0]}.npy", work / f"{names[1]}.npy"
    if damage == "truncated":
        a.write_bytes(a.read_bytes()[:-8])
        redone = names[:1]
    else:
        da, db = a.read_bytes(), b.read_bytes()
        a.write_bytes(db), b.write_bytes(da)
        redone = names[:2]
    calls = _count_calls(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="layergeom"):
        boundary_jacobians(ad, store, names, outs, CFG, seed=SEED)
    assert calls == redone + names[3:]
    assert f"{names[0]}.npy " in caplog.text and "redoing it" in caplog.text
    assert _files(outs) == _files(whole)


def test_jacobian_resume_key_names_the_machine(llama_store):
    """Work done on another device or with other thread counts is not reused (they change the rounding)."""
    from layergeom.resume.keys import machine_id

    ad, _, store = llama_store
    cfg = jac.JacobianSettings.from_config(CFG)
    key = resume_key(store, "L0.attn", cfg, 0, "w", machine_id("cpu", torch_threads=torch.get_num_threads()))
    assert key == resume_key(store, "L0.attn", cfg, 0, "w", machine_id("cpu", torch_threads=torch.get_num_threads()))
    assert key != resume_key(store, "L0.attn", cfg, 0, "w", machine_id("cuda:0", torch_threads=torch.get_num_threads()))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert key != resume_key(
            store, "L0.attn", cfg, 0, "w", machine_id("cpu", torch_threads=torch.get_num_threads())
        )
    finally:
        torch.set_num_threads(threads)


KILLED_JOB = """
import os, signal, sys
sys.path[:0] = [{src!r}, {tests!r}]
from conftest import tiny_model
from layergeom.adapters import get_adapter
from layergeom.spectral import jacobians as jac
from layergeom.spectral.jobs.jacobians import boundary_jacobians
from layergeom.store import ActivationStore
real, done = jac.boundary_jacobian, []
def wrapped(adapter, b, *args, **kwargs):
    if len(done) == {k}:
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup of any kind runs
    done.append(b)
    return real(adapter, b, *args, **kwargs)
jac.boundary_jacobian = wrapped
ad = get_adapter(tiny_model("llama"))
names = [b.name for b in ad.boundaries]
ext = {{"npy": "npy", "groups": "groups.npy", "json": "json", "tsv": "tsv"}}
outs = {{n: {{k: os.path.join({out!r}, n + "." + e) for k, e in ext.items()}} for n in names}}
boundary_jacobians(ad, ActivationStore({store!r}), names, outs, {cfg!r}, seed={seed!r})
"""


def test_resume_after_sigkill(tmp_path, llama_store, monkeypatch):
    ad, _, store = llama_store
    names = [b.name for b in ad.boundaries]
    k = 3
    out = tmp_path / "jac"
    script = KILLED_JOB.format(src=str(ROOT / "src"), tests=str(ROOT / "tests"), k=k, out=str(out), seed=SEED,
                               store=str(store.path), cfg=CFG)  # fmt: skip
    res = forked.run(script)
    assert res.returncode == -signal.SIGKILL, res.stderr[-2000:]
    partial = out / work_folder.PARTIAL
    kept = {p.name: p.read_bytes() for p in partial.glob("L*") if p.is_file() and not p.name.endswith(".done.json")}
    assert len(list(partial.glob("*.done.json"))) == k
    calls = _count_calls(monkeypatch)
    outs = outputs_for(names, out)
    boundary_jacobians(ad, store, names, outs, CFG, seed=SEED)
    assert calls == names[k:]  # only the unfinished boundaries were computed
    for name, data in kept.items():  # the finished ones were moved into place untouched
        if name.split(".")[0] + "." + name.split(".")[1] in names[:k]:
            assert (out / name).read_bytes() == data, name
    whole = outputs_for(names, tmp_path / "whole")
    boundary_jacobians(ad, store, names, whole, CFG, seed=SEED)
    for n in names:  # everything equals an uninterrupted run (up to another process's float32 rounding)
        a, b = np.load(outs[n]["npy"]), np.load(whole[n]["npy"])
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * np.abs(b).max())
        assert json.loads(outs[n]["json"].read_text()) == json.loads(whole[n]["json"].read_text())


@pytest.mark.parametrize("context", ["isolated", "in_context"])
def test_token_dependent_jacobians_from_store(tmp_path, context):
    """The store path passes each sample's token ids (Gemma-4: per-layer inputs, shared keys/values)."""
    ad = get_adapter(tiny_model("gemma4"))
    assert ad.uses_tokens
    windows = torch.randint(0, 512, (4, 7), generator=torch.Generator().manual_seed(7)).numpy()
    dump_activations(ad, windows, tmp_path / "acts", batch_size=4)
    names = [b.name for b in ad.boundaries]
    files = {"npy": "npy", "groups": "groups.npy", "json": "json", "tsv": "tsv"}
    outs = {n: {k: tmp_path / "jac" / f"{n}.{s}" for k, s in files.items()} for n in names}
    settings = {"n_samples": 4, "samples": "last", "context": context, "chunk_size": 3, "n_groups": 2}
    boundary_jacobians(ad, ActivationStore(tmp_path / "acts"), names, outs, settings, seed=SEED)
    ids = torch.as_tensor(windows)
    cap = ad.capture(ids)
    for n in names:
        J = np.load(outs[n]["npy"])
        if context == "isolated":  # independent recomputation, one sample at a time
            ref = jac.naive_jacobians(ad, n, cap[n][:, -1], tokens=ids[:, -1])
        else:
            ref = jac.in_context_jacobians(ad, n, cap[n][:, :-1], cap[n][:, -1], tokens=ids, mode=MODE)
        np.testing.assert_allclose(J, ref.double().mean(0).numpy(), atol=2e-5 * float(ref.abs().max()) + 1e-12)
