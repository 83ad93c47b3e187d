"""Schur surgery's eigenvalue order: the canonical order, the spread over random orders, the shared mode counts.

Every erank at a reordered Schur form is recomputed by an independent route: LAPACK's own reordering inside
``scipy.linalg.schur(..., sort=...)`` (one call per leading subspace) and plain cumulative products.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import scipy.linalg
from conftest import ROOT
from schema_defaults import schur_surgery, spectral_metrics, tol
from test_spectral import product_eranks

from layergeom.spectral import cumulative, schur_basis, spectra

EPS = np.finfo(np.float64).eps


def rng(seed=0):
    return np.random.default_rng(seed)


def nonnormal(d, seed, scale=1.0):
    """A real, strongly non-normal matrix (a Gaussian plus a strictly upper part), scaled."""
    g = rng(seed)
    return scale * (g.standard_normal((d, d)) / np.sqrt(d) + np.triu(g.standard_normal((d, d)), 1))


def low_rank(d, r, seed, scale=1.0):
    """A real, non-normal matrix of exact rank r (a product A B, like grouped-query attention)."""
    g = rng(seed)
    return scale * (g.standard_normal((d, r)) @ g.standard_normal((r, d))) / np.sqrt(d * r)


def schur_vectors_by_sorting(J: np.ndarray, order_lam: np.ndarray) -> np.ndarray:
    """Independent route: the Schur vectors of J for the eigenvalue order `order_lam` (d, complex), one LAPACK
    ``schur(sort=...)`` per leading subspace: q_k is the direction that the invariant subspace of the first k
    eigenvalues adds to that of the first k − 1."""
    d = len(order_lam)
    Jc = J.astype(np.complex128)
    gap = min(np.abs(a - b) for i, a in enumerate(order_lam) for b in order_lam[i + 1 :])
    W = np.zeros((d, 0), dtype=np.complex128)
    for k in range(1, d + 1):
        lead = order_lam[:k]
        _, Q, sdim = scipy.linalg.schur(
            Jc, output="complex", sort=lambda x, lead=lead: np.abs(x - lead).min() < gap / 3
        )
        assert sdim == k
        B = Q[:, :k]
        R = B - W @ (W.conj().T @ B)  # (d, k): rank one, the new direction
        u = np.linalg.svd(R)[0][:, :1]
        W = np.concatenate([W, u], axis=1)
    return W


def stated_order(lam: np.ndarray, n_modes: int) -> np.ndarray:
    """The documented order written out for a real matrix's eigenvalues: |λ| descending with a conjugate pair
    adjacent (Im > 0 first), the n_modes largest first (no ties in these test spectra)."""
    key = np.round(np.abs(lam), 12)  # a pair's two moduli agree to rounding
    idx = sorted(range(len(lam)), key=lambda i: (-key[i], -np.sign(lam[i].imag)))
    return np.array(idx[:n_modes] + sorted(idx[n_modes:]))


# ---- the canonical order -------------------------------------------------------------------------------
def test_canonical_order_rule_on_given_eigenvalues():
    """|λ| descending; equal moduli by |arg λ| ascending; a pair adjacent, Im > 0 first; zero modes keep order."""
    w = np.exp(1j * np.pi / 3)
    lam = np.array([-2.0, 2 * np.conj(w), 2.0, 2 * w, 0.5, 1e-9, 3e-10j, -3e-10j])
    order = schur_basis.canonical_order(lam, 5)
    np.testing.assert_array_equal(order, [2, 3, 1, 0, 4, 5, 6, 7])
    # a pair whose moduli differ in the last bits stays together, even around a real eigenvalue between them
    a = complex(0.6, 0.8) * (1 + 4 * EPS)
    b = np.conj(a) * (1 - 4 * EPS)
    mid = (abs(a) + abs(b)) / 2
    np.testing.assert_array_equal(schur_basis.canonical_order(np.array([b, mid, a]), 3), [2, 0, 1])
    # a complex matrix has no pairs: every eigenvalue is its own unit (equal |λ| and |arg λ|: Im > 0 first)
    np.testing.assert_array_equal(schur_basis.canonical_order(np.array([-1j, 2.0, 1j]), 3, real=False), [1, 2, 0])


@pytest.mark.parametrize("kind", ["full", "low_rank"])
def test_schur_form_is_in_the_canonical_order_and_still_j(kind):
    d = 24
    J = nonnormal(d, 3) if kind == "full" else low_rank(d, 8, 4)
    eig = spectral_metrics(J, tol=tol(d))
    form = schur_basis.schur_form(J, tol(d), n_modes=eig["n_modes"])
    r = form.n_nonzero
    assert r == (d if kind == "full" else 8)
    T = np.diag(form.lam) + form.N
    tolJ = d * EPS * np.linalg.norm(J)  # LAPACK's backward error, a small multiple of ε‖J‖
    np.testing.assert_allclose(form.Q @ T @ form.Q.conj().T, J, atol=tolJ)
    np.testing.assert_allclose(form.Q.conj().T @ form.Q, np.eye(d), atol=d * EPS)
    # the eigenvalues are J's (numpy's eig, another LAPACK path), in the stated order
    lam_np = np.linalg.eigvals(J)
    lead = lam_np[stated_order(lam_np, r)][:r]
    np.testing.assert_allclose(form.lam[:r], lead, atol=1e-10 * np.abs(lam_np).max())
    assert np.all(np.abs(form.lam[r:]) < 1e-12 * np.abs(form.lam).max())  # the zero block last
    # the normal part equals the one built from Schur vectors found by LAPACK's own sorted Schur forms
    if kind == "full":
        W = schur_vectors_by_sorting(J, form.lam)
        J0 = (W * form.lam) @ W.conj().T
        np.testing.assert_allclose(form.normal_part, J0, atol=1e-9 * np.linalg.norm(J))


def test_reorder_schur_moves_the_diagonal_and_keeps_the_matrix():
    g = rng(5)
    d = 9
    J = g.standard_normal((d, d)) + 1j * g.standard_normal((d, d))
    T, Q = scipy.linalg.schur(J, output="complex")
    perm = g.permutation(d)
    T2, Q2 = schur_basis.reorder_schur(T.copy(), Q.copy(), perm)
    np.testing.assert_array_equal(np.diag(T2), np.diag(T)[perm])  # swaps move eigenvalues bit for bit
    assert not np.tril(T2, -1).any()
    np.testing.assert_allclose(Q2 @ T2 @ Q2.conj().T, J, atol=d * EPS * np.linalg.norm(J) * 4)


# ---- random orders -----------------------------------------------------------------------------------
def test_permuted_basis_and_its_lapack_fallback():
    d = 12
    J = nonnormal(d, 8)
    form = schur_basis.schur_form(J, tol(d))
    sampler = schur_basis.OrderSampler(form)
    T11 = sampler.T11
    for perm in schur_basis.random_orders(d, 3, seed=1, index=0):
        Z = sampler.basis(perm)
        U = Z.conj().T @ T11 @ Z
        assert np.linalg.norm(np.tril(U, -1)) <= d * EPS * np.linalg.norm(T11)
        np.testing.assert_allclose(np.diag(U), form.lam[perm], atol=1e-10 * np.abs(form.lam).max())
    assert sampler.fallbacks == 0
    # eigenvectors off by more than rounding (as those of nearly defective eigenvalues are): the Q factor
    # fails its backward-error check, and LAPACK's swaps take over
    Ybad = sampler.Y + 1e-7 * (rng(2).standard_normal((d, d)) + 1j * rng(3).standard_normal((d, d)))
    perm = schur_basis.random_orders(d, 1, seed=4, index=0)[0]
    assert schur_basis.permuted_basis(T11, Ybad, perm) is None
    sampler.Y = Ybad
    Z = sampler.basis(perm)
    U = Z.conj().T @ T11 @ Z
    assert sampler.fallbacks == 1 and np.linalg.norm(np.tril(U, -1)) <= d * EPS * np.linalg.norm(T11)
    np.testing.assert_allclose(np.diag(U), form.lam[perm], atol=1e-10 * np.abs(form.lam).max())


def table_spread(t, v, a):
    part = t[(t["variant"] == v) & (t["alpha"] == a) & (t["control"] == "none")].sort_values("depth")
    return part["erank"].to_numpy(), part["erank_order_min"].to_numpy(), part["erank_order_max"].to_numpy()


def test_erank_at_random_orders_matches_lapack_sorted_schur_forms():
    """erank_order_min/max against products of J(α) = J₀^π + α(J̄ − J₀^π) built from LAPACK-sorted Schur forms."""
    d, K, seed = 6, 3, 11
    mats = {f"L{i}.{k}": nonnormal(d, 20 + 2 * i + j, 0.5) for i in range(2) for j, k in enumerate(("attn", "mlp"))}
    alphas = [0.0, 0.5]
    t = schur_surgery(mats, alphas=alphas + [1.0], seed=seed, sr_k=2, orders=K, boundary_metrics="none",
                      order_alphas=alphas)  # fmt: skip
    ops = {(a, k): [] for a in alphas for k in range(K)}
    for bi, J in enumerate(mats.values()):
        lam_np = np.linalg.eigvals(J)
        canon = lam_np[stated_order(lam_np, d)]
        g = np.random.default_rng([seed, bi, schur_basis.ORDER_STREAM])
        for k in range(K):
            lam_k = canon[g.permutation(d)]
            W = schur_vectors_by_sorting(J, lam_k)
            J0 = (W * lam_k) @ W.conj().T
            for a in alphas:
                ops[a, k].append(J0 + a * (J - J0))
    for v in cumulative.VARIANTS:
        for a in alphas:
            ref = np.array([product_eranks(ops[a, k], v) for k in range(K)])  # (K, depth)
            _, lo, hi = table_spread(t, v, a)
            np.testing.assert_allclose(lo, ref.min(axis=0), rtol=1e-8)
            np.testing.assert_allclose(hi, ref.max(axis=0), rtol=1e-8)
        erank, lo, hi = table_spread(t, v, 1.0)
        np.testing.assert_array_equal(lo, erank)  # α = 1 is J̄: no order
        np.testing.assert_array_equal(hi, erank)
    rand = t[(t["control"] == "random") & (t["alpha"] > 0)]
    assert rand["erank_order_min"].isna().all() and rand["erank_order_max"].isna().all()
    zero = t[t["alpha"] == 0]
    for c in ("erank_order_min", "erank_order_max"):  # α = 0 is one operator for both controls
        np.testing.assert_array_equal(zero[zero["control"] == "none"][c], zero[zero["control"] == "random"][c])
    # the default (spectra.schur_order_alphas null): the spread at α = 0 alone, the same numbers; nan at 0.5
    only0 = schur_surgery(mats, alphas=alphas + [1.0], seed=seed, sr_k=2, orders=K, boundary_metrics="none")
    for v in cumulative.VARIANTS:
        np.testing.assert_array_equal(table_spread(only0, v, 0.0)[1], table_spread(t, v, 0.0)[1])
        np.testing.assert_array_equal(table_spread(only0, v, 0.0)[2], table_spread(t, v, 0.0)[2])
        assert np.isnan(table_spread(only0, v, 0.5)[1]).all() and np.isnan(table_spread(only0, v, 0.5)[2]).all()
        np.testing.assert_array_equal(table_spread(only0, v, 1.0)[1], table_spread(t, v, 1.0)[1])
    cols = [c for c in t.columns if c not in ("erank_order_min", "erank_order_max")]
    pd.testing.assert_frame_equal(only0[cols], t[cols])  # the orders change nothing else
    with pytest.raises(ValueError, match="schur_order_alphas: 0.25 is not one of spectra.alphas"):
        schur_surgery(mats, alphas=alphas, seed=seed, sr_k=2, orders=K, boundary_metrics="none", order_alphas=[0.25])


def test_spread_brackets_the_canonical_order_when_every_order_is_drawn():
    """Three non-zero modes (3! = 6 orders) and a zero block: 40 draws hold every order, so the canonical one."""
    d, r, K, seed = 5, 3, 40, 2
    mats = {f"L{i}.attn": low_rank(d, r, 30 + i, 0.8) for i in range(3)}
    for bi in range(len(mats)):
        drawn = {tuple(p) for p in schur_basis.random_orders(r, K, seed, bi)}
        assert len(drawn) == 6  # every order of the three modes (the test's premise, checked)
    t = schur_surgery(mats, alphas=[0, 0.5, 1], seed=seed, sr_k=2, orders=K, boundary_metrics="none",
                      order_alphas=[0, 0.5])  # fmt: skip
    for v in cumulative.VARIANTS:
        for a in (0.0, 0.5):
            erank, lo, hi = table_spread(t, v, a)
            assert np.all(lo <= erank * (1 + 1e-9)) and np.all(erank <= hi * (1 + 1e-9)), (v, a)
            assert np.all(hi - lo > 0) or a == 0  # the order matters where N ≠ 0
    # α = 0 at one boundary: J₀ is normal, its erank (|λ| alone) does not depend on the order
    erank, lo, hi = table_spread(t, "update", 0.0)
    assert lo[0] == pytest.approx(erank[0], rel=1e-12) and hi[0] == pytest.approx(erank[0], rel=1e-12)


def test_no_orders_gives_nan_and_the_draw_is_reproducible():
    mats = {f"L{i}.{k}": nonnormal(7, 40 + 2 * i + j, 0.4) for i in range(2) for j, k in enumerate(("attn", "mlp"))}
    kw = dict(alphas=[0, 0.5, 1], sr_k=2, boundary_metrics="none")
    none = schur_surgery(mats, seed=1, orders=0, **kw)
    assert none["erank_order_min"].isna().all() and none["erank_order_max"].isna().all()
    a, b = (schur_surgery(mats, seed=1, orders=4, **kw) for _ in range(2))
    pd.testing.assert_frame_equal(a, b)  # bit for bit
    np.testing.assert_array_equal(a["erank"], none["erank"])  # the orders change nothing else
    other = schur_surgery(mats, seed=2, orders=4, **kw)
    own = (a["control"] == "none") & (a["alpha"] < 1) & (a["depth"] > 1)
    assert not np.allclose(a.loc[own, "erank_order_min"], other.loc[own, "erank_order_min"])
    np.testing.assert_array_equal(a.loc[a["control"] == "none", "erank"], other.loc[a["control"] == "none", "erank"])
    with pytest.raises(ValueError, match="orders"):
        schur_surgery(mats, seed=1, orders=-1, **kw)


# ---- the same mode counts as spectra.tsv ----------------------------------------------------------------
def split_pair(d=8, seed=60):
    """Q B Qᵀ with B block-diagonal: a pair a ± i·y whose |Im| y = 3τσ₁ is beyond a κ = 1 floor but far inside
    its own precision (κ ≈ 1/(2y) ≈ 1e5: two real eigenvalues split by a tiny coupling), a clear pair, reals."""
    tau = tol(d)
    y = 3 * tau * 1.0  # σ₁ ≈ 1 (checked below)
    B = np.zeros((d, d))
    B[:2, :2] = [[0.5, 1.0], [-(y**2), 0.5]]  # eigenvalues 0.5 ± i·y
    B[2:4, 2:4] = [[0.3, 0.4], [-0.4, 0.3]]
    B[np.arange(4, d), np.arange(4, d)] = np.linspace(-0.6, 0.8, d - 4)
    Q = scipy.linalg.qr(rng(seed).standard_normal((d, d)))[0]
    return Q @ B @ Q.T


def test_eigenvalue_metrics_are_spectra_tsv_values_at_every_alpha():
    d = 16
    mats = {"L0.attn": low_rank(d, 6, 50, 2.0), "L0.mlp": nonnormal(d, 51, 0.7), "L1.attn": low_rank(d, 4, 52),
            "L1.mlp": split_pair()}  # fmt: skip
    mats["L1.mlp"] = np.pad(mats["L1.mlp"], (0, d - 8))  # the same width as the others (a zero block)
    # the test's power: from the triangular Λ + αN alone (κ = 1) the split pair would count as complex
    J = mats["L1.mlp"]
    row, _ = spectra.spectra_row("L1.mlp", J, 1, sr_k=4, tol=tol(d))
    assert 0.9 < row["sigma_max"] < 1.5
    form = schur_basis.schur_form(J, tol(d), n_modes=row["n_modes"])
    tri = np.diag(form.lam) + 0.5 * form.N
    alone = spectral_metrics(tri, sr_k=4, dec=spectra.decompose(tri, eigvals=form.lam))
    assert alone["frac_complex"] != row["frac_complex"]
    t = schur_surgery(mats, alphas=[0, 0.5, 1], seed=3, sr_k=4, orders=2, boundary_metrics="all")
    for name, J in mats.items():
        row, _ = spectra.spectra_row(name, J, 1, sr_k=4, tol=tol(d))
        part = t[(t["boundary"] == name) & (t["variant"] == "update")]
        assert len(part) == 6  # α ∈ {0, 0.5, 1} × both controls (α = 0: one operator, written for both)
        part = t[t["boundary"] == name]
        for key in ("n_modes", "frac_complex", "frac_expansive", "frac_complex_d", "frac_expansive_d",
                    "spectral_radius"):  # fmt: skip
            assert (part[f"b_{key}"] == row[key]).all(), key
        one = part[(part["alpha"] == 1) & (part["control"] == "none")]
        for key in row:
            if f"b_{key}" in one:
                np.testing.assert_array_equal(one[f"b_{key}"], row[key], err_msg=key)


# ---- configuration ------------------------------------------------------------------------------------
@pytest.mark.dag
def test_schur_orders_key_and_the_test_configs_dry_run(tmp_path):
    from conftest import TEST_CONFIG

    from layergeom.config import LayergeomError, validate

    cfg = validate(copy.deepcopy(TEST_CONFIG))
    assert cfg["spectra"]["schur_orders"] == 8
    ok = copy.deepcopy(TEST_CONFIG)
    ok.setdefault("spectra", {})["schur_orders"] = 0
    assert validate(ok)["spectra"]["schur_orders"] == 0
    bad = copy.deepcopy(TEST_CONFIG)
    bad.setdefault("spectra", {})["schur_orders"] = -1
    with pytest.raises(LayergeomError, match="schur_orders"):
        validate(bad)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path),
           "--configfile", str(ROOT / "config" / "test.yaml"), "-n", "--cores", "2", "--quiet", "rules"]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "spectra_schur" in res.stdout + res.stderr
