"""Exact sublayer Jacobians: finite differences, a closed form, the naive per-sample reference, the store path."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import tiny_model

from layergeom.adapters import FAMILIES, adapter_class, get_adapter
from layergeom.spectral import jacobians as jac
from layergeom.spectral import pipeline
from layergeom.store import ActivationStore, dump_activations

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


def central_differences(fn, x: torch.Tensor, h: float) -> torch.Tensor:
    """(N, d_out, d_in) Jacobians of a row-wise map fn((M, d)) -> (M, d): 4th-order central differences, batched."""
    N, d = x.shape
    eye = torch.eye(d, dtype=x.dtype)
    steps = (2 * h, h, -h, -2 * h)
    X = torch.cat([x[:, None] + s * eye for s in steps], dim=1).reshape(-1, d)  # (N*4d, d)
    Y = fn(X).reshape(N, 4, d, -1)  # (N, step, d_in, d_out)
    return ((-Y[:, 0] + 8 * Y[:, 1] - 8 * Y[:, 2] + Y[:, 3]) / (12 * h)).transpose(1, 2)


@pytest.fixture
def adapter64(family):
    return get_adapter(tiny_model(family, dtype=torch.float64))


def test_isolated_matches_finite_differences(adapter64, family):
    ad = adapter64
    h, tol = fd_setting(family)
    x = torch.randn(3, ad.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for b in ad.boundaries:
        J = jac.isolated_jacobians(ad, b, x)
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
        J = jac.in_context_jacobians(ad, b, prefix, x)
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
        iso = jac.isolated_jacobians(ad, b, x)
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
        mean, summ = jac.mean_jacobian(ad, b, x, prefix, chunk_size=2, dtype=torch.float64)
        ref = jac.in_context_jacobians(ad, b, prefix, x)  # the full path for every kind
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
        J = jac.isolated_jacobians(ad, f"L{layer}.attn", x)
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


def test_sample_rows():
    rows = jac.sample_rows(n_windows=5, window_tokens=8, n_samples=10)
    np.testing.assert_array_equal(rows, [7, 15, 23, 31, 39])  # last position of every window
    sub = jac.sample_rows(n_windows=50, window_tokens=8, n_samples=10, seed=3)
    assert len(sub) == 10 and len(set(sub)) == 10 and np.all(sub % 8 == 7) and np.all(np.diff(sub) > 0)
    np.testing.assert_array_equal(sub, jac.sample_rows(50, 8, 10, seed=3))
    assert not np.array_equal(sub, jac.sample_rows(50, 8, 10, seed=4))
    with pytest.raises(Exception, match="at least 2 tokens"):
        jac.sample_rows(5, 1, 3)


@pytest.mark.parametrize("context", ["isolated", "in_context"])
def test_boundary_jacobians_from_store(tmp_path, context):
    ad = get_adapter(tiny_model("llama"))
    windows = torch.randint(0, 512, (5, 9), generator=torch.Generator().manual_seed(6)).numpy()
    store = dump_activations(ad, windows, tmp_path / "acts", batch_size=4)
    names = [b.name for b in ad.boundaries]
    outs = {n: (tmp_path / "jac" / f"{n}.npy", tmp_path / "jac" / f"{n}.tsv") for n in names}
    res = pipeline.boundary_jacobians(
        ad, ActivationStore(tmp_path / "acts"), names, outs, n_samples=8, context=context, chunk_size=2
    )
    for n in names:
        J = np.load(outs[n][0])
        assert J.dtype == np.float64 and J.shape == (ad.d_model, ad.d_model)
        tab = pd.read_csv(outs[n][1], sep="\t")
        assert list(tab.columns) == pipeline.SUMMARY_COLUMNS
        assert len(tab) == 5 and res[n].n_samples == 5  # fewer windows than n_samples: all of them
        assert (tab["position"] == 8).all() and list(tab["window"]) == [0, 1, 2, 3, 4]
        # independent recomputation from the captured stream of each window
        cap = ad.capture(torch.as_tensor(windows))[n]  # (5, 9, d)
        if context == "isolated":
            ref = jac.naive_jacobians(ad, n, cap[:, -1])
        else:
            ref = jac.in_context_jacobians(ad, n, cap[:, :-1], cap[:, -1])
        np.testing.assert_allclose(J, ref.double().mean(0).numpy(), atol=2e-5 * float(ref.abs().max()))
        np.testing.assert_allclose(tab["x_norm"], cap[:, -1].double().norm(dim=-1).numpy(), rtol=1e-5)
    assert store.n_windows == 5


@pytest.mark.parametrize("context", ["isolated", "in_context"])
def test_token_dependent_jacobians_from_store(tmp_path, context):
    """The store path passes each sample's token ids (Gemma-4: per-layer inputs, shared keys/values)."""
    ad = get_adapter(tiny_model("gemma4"))
    assert ad.uses_tokens
    windows = torch.randint(0, 512, (4, 7), generator=torch.Generator().manual_seed(7)).numpy()
    dump_activations(ad, windows, tmp_path / "acts", batch_size=4)
    names = [b.name for b in ad.boundaries]
    outs = {n: (tmp_path / "jac" / f"{n}.npy", tmp_path / "jac" / f"{n}.tsv") for n in names}
    pipeline.boundary_jacobians(
        ad, ActivationStore(tmp_path / "acts"), names, outs, n_samples=4, context=context, chunk_size=3
    )
    ids = torch.as_tensor(windows)
    cap = ad.capture(ids)
    for n in names:
        J = np.load(outs[n][0])
        if context == "isolated":  # independent recomputation, one sample at a time
            ref = jac.naive_jacobians(ad, n, cap[n][:, -1], tokens=ids[:, -1])
        else:
            ref = jac.in_context_jacobians(ad, n, cap[n][:, :-1], cap[n][:, -1], tokens=ids)
        np.testing.assert_allclose(J, ref.double().mean(0).numpy(), atol=2e-5 * float(ref.abs().max()) + 1e-12)
