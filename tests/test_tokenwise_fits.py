"""Paper A fits against independent references (numpy / scipy, one anchor at a time, in R^d).

The ``ref_*`` functions are the straightforward per-anchor implementations; bench/bench_tokenwise.py
times the batched library against them.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

from layergeom.tokenwise import fits
from layergeom.tokenwise.neighbours import knn, sample_anchors

CFG = dict(
    rank=3, lowrank_form="identity_plus", ridge=1e-3, mlp_width=8, mlp_steps=40, mlp_lr=1e-2, mlp_patience=5,
    mlp_val_frac=0.2,
)  # fmt: skip


# ---- references: one anchor, numpy / scipy, explicit d x d matrices ------------------------------
def ref_diag(X, Y, xa):
    a = np.maximum(0.0, (X * Y).sum(0) / (X * X).sum(0))
    return a * xa, np.diag(a)


def ref_lowrank(X, Y, xa, rank, form="identity_plus", ridge=1e-3):
    """Rank-constrained ridge regression in the primal (d x d) form: B_r = B V_r V_rᵀ."""
    d = X.shape[1]
    D = Y - X if form == "identity_plus" else Y
    lam = ridge * np.trace(X.T @ X) / d
    B = np.linalg.solve(X.T @ X + lam * np.eye(d), X.T @ D)
    aug = np.vstack([X @ B, np.sqrt(lam) * B])  # [X B; sqrt(lam) B]
    Vr = np.linalg.svd(aug)[2][:rank].T
    W = (B @ Vr @ Vr.T).T  # column convention
    A = np.eye(d) + W if form == "identity_plus" else W
    return A @ xa, A


def ref_orthogonal(X, Y, xa):
    """Procrustes with the nearest-to-identity completion, from full d x d SVDs (a different algorithm)."""
    d = X.shape[1]
    U, S, Vt = np.linalg.svd(Y.T @ X)
    r = int((S > 1e-9 * S[0]).sum())
    U1, V1 = U[:, :r], Vt[:r].T
    N = (np.eye(d) - U1 @ U1.T) @ (np.eye(d) - V1 @ V1.T)
    Un, Sn, Vnt = np.linalg.svd(N)
    keep = Sn > 1e-6
    A = U1 @ V1.T + Un[:, keep] @ Vnt[keep]
    return A @ xa, A


def ref_global(H0, H1, ridge=1e-3):
    d = H0.shape[1]
    lam = ridge * np.trace(H0.T @ H0) / d
    # ridge as an augmented least-squares problem, solved by lstsq
    B = np.linalg.lstsq(np.vstack([H0, np.sqrt(lam) * np.eye(d)]), np.vstack([H1 - H0, np.zeros((d, d))]), rcond=None)[
        0
    ]
    return np.eye(d) + B.T


def ref_energy(M, v, k, tie=1e-6):
    """pi_k(v) on the top-k left singular vectors of M; a cut through tied singular values counts the tied
    block's energy pro rata (the mean over the choices of directions inside it)."""
    U, S, _ = np.linalg.svd(M)
    c2 = (U.T @ v) ** 2
    tied = np.abs(S - S[k - 1]) <= tie * S[0]  # the block of singular values equal to the k-th
    inside = np.arange(len(S)) < k
    share = (tied & inside).sum() / tied.sum()
    return float((c2[inside & ~tied].sum() + share * c2[tied].sum()) / (v @ v))


def _data(m=5, k=12, d=40, seed=0, noise=0.3):
    g = np.random.default_rng(seed)
    W = g.standard_normal((d, d)) / np.sqrt(d)
    X = g.standard_normal((m, k, d)) + 3 * g.standard_normal((m, 1, d))
    Y = X + 0.5 * X @ W.T + noise * g.standard_normal((m, k, d))
    xa = X.mean(1) + 0.5 * g.standard_normal((m, d))
    return X, Y, xa


def _fit(name, X, Y, xa, cfg=CFG, q=8, **kw):
    out, loc = fits.fit_classes([name], torch.as_tensor(X), torch.as_tensor(Y), torch.as_tensor(xa), cfg, q=q, **kw)
    return out[name], loc


def _matrix(name, X, Y, cfg=CFG):
    """The d x d matrix of a linear class, read off by applying it to the basis vectors as anchors."""
    d = X.shape[1]
    f, _ = _fit(name, np.repeat(X[None], d, 0), np.repeat(Y[None], d, 0), np.eye(d), cfg)
    return f.t.numpy().T


# ---- fits vs references -----------------------------------------------------------------------------
def test_diag_matches_closed_form():
    X, Y, xa = _data()
    f, _ = _fit("diag", X, Y, xa)
    for i in range(len(X)):
        t, _ = ref_diag(X[i], Y[i], xa[i])
        np.testing.assert_allclose(f.t[i].numpy(), t, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("form", ["identity_plus", "pure"])
def test_lowrank_matches_primal_reduced_rank_ridge(form):
    X, Y, xa = _data()
    cfg = dict(CFG, lowrank_form=form)
    f, _ = _fit("lowrank", X, Y, xa, cfg)
    for i in range(len(X)):
        t, _ = ref_lowrank(X[i], Y[i], xa[i], CFG["rank"], form)
        np.testing.assert_allclose(f.t[i].numpy(), t, rtol=1e-8, atol=1e-9)


def test_lowrank_full_rank_without_ridge_is_least_squares():
    X, Y, xa = _data(m=3, k=30, d=10)  # k > d: ordinary least squares is unique
    cfg = dict(CFG, rank=10, ridge=0.0)
    f, _ = _fit("lowrank", X, Y, xa, cfg)
    for i in range(3):
        B = np.linalg.lstsq(X[i], Y[i] - X[i], rcond=None)[0]
        np.testing.assert_allclose(f.t[i].numpy(), xa[i] + xa[i] @ B, rtol=1e-8)


def test_orthogonal_matches_scipy_when_unique():
    X, Y, xa = _data(m=3, k=20, d=6)  # k >= d: Procrustes has one solution
    f, _ = _fit("orthogonal", X, Y, xa)
    for i in range(3):
        R, _ = scipy.linalg.orthogonal_procrustes(X[i], Y[i])  # X R ~ Y, so A = Rᵀ
        np.testing.assert_allclose(f.t[i].numpy(), xa[i] @ R, rtol=1e-8, atol=1e-10)


def test_orthogonal_rank_deficient_is_the_nearest_procrustes_solution():
    X, Y, xa = _data(m=4, k=7, d=20)
    f, _ = _fit("orthogonal", X, Y, xa)
    for i in range(4):
        t, A_ref = ref_orthogonal(X[i], Y[i], xa[i])
        np.testing.assert_allclose(f.t[i].numpy(), t, rtol=1e-7, atol=1e-9)
    A = _matrix("orthogonal", X[0], Y[0])
    np.testing.assert_allclose(A.T @ A, np.eye(20), atol=1e-8)  # orthogonal
    R, _ = scipy.linalg.orthogonal_procrustes(X[0], Y[0])
    assert np.linalg.norm(Y[0] - X[0] @ A.T) == pytest.approx(np.linalg.norm(Y[0] - X[0] @ R), rel=1e-9)  # optimal
    assert np.linalg.norm(A - np.eye(20)) <= np.linalg.norm(R - np.eye(20)) + 1e-9  # nearest to I
    off = scipy.linalg.null_space(np.vstack([X[0], Y[0]]))  # complement of the neighbourhood's span
    np.testing.assert_allclose(A @ off, off, atol=1e-8)


def test_global_matches_lstsq():
    g = np.random.default_rng(1)
    H0 = g.standard_normal((200, 12))
    H1 = H0 @ g.standard_normal((12, 12)) + 0.1 * g.standard_normal((200, 12))
    A = fits.fit_global(torch.as_tensor(H0), torch.as_tensor(H1), ridge=1e-3).numpy()
    np.testing.assert_allclose(A, ref_global(H0, H1), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", ["diag", "lowrank", "orthogonal"])
def test_dominant_directions_match_explicit_svd(name):
    X, Y, xa = _data(m=3, k=10, d=30)
    ref = {"diag": ref_diag, "lowrank": lambda *a: ref_lowrank(*a, CFG["rank"]), "orthogonal": ref_orthogonal}[name]
    f, loc = _fit(name, X, Y, xa)
    g = np.random.default_rng(2)
    v = g.standard_normal((3, 30))
    vp = loc.to_coords(torch.as_tensor(v)) if loc is not None else None
    for k in (1, 2, 3):
        e = f.delta.energy(torch.as_tensor(v), vp, [k]).numpy()[:, 0]
        for i in range(3):
            _, A = ref(X[i], Y[i], xa[i])
            assert e[i] == pytest.approx(ref_energy(A - np.eye(30), v[i], k), rel=1e-7)


def test_energy_saturates_beyond_the_rank_and_is_undefined_on_ties():
    X, Y, xa = _data(m=2, k=10, d=30)
    f, loc = _fit("lowrank", X, Y, xa, q=16)  # rank 3
    v = torch.as_tensor(np.random.default_rng(3).standard_normal((2, 30)))
    e = f.delta.energy(v, loc.to_coords(v), [3, 8, 16]).numpy()
    np.testing.assert_allclose(e[:, 1], e[:, 0])  # no direction beyond the rank
    np.testing.assert_allclose(e[:, 2], e[:, 0])
    fo, loco = _fit("orthogonal", X, Y, xa)
    assert np.isnan(fo.absolute.energy(v, loco.to_coords(v), [1]).numpy()).all()  # A orthogonal: all sv tie


# ---- batched == per-anchor loop ------------------------------------------------------------------
@pytest.mark.parametrize("name", ["diag", "lowrank", "orthogonal", "mlp"])
def test_batched_equals_per_anchor_loop(name):
    X, Y, xa = _data(m=4, k=15, d=24)
    seeds = np.array([11, 12, 13, 14])
    batched, _ = _fit(name, X, Y, xa, seeds=seeds)
    for i in range(4):
        single, _ = _fit(name, X[i : i + 1], Y[i : i + 1], xa[i : i + 1], seeds=seeds[i : i + 1])
        tol = 1e-4 if name == "mlp" else 1e-10  # mlp trains in float32
        np.testing.assert_allclose(batched.t[i].numpy(), single.t[0].numpy(), rtol=tol, atol=tol)


def test_mlp_improves_on_its_start_and_fits_a_nonlinear_map():
    g = np.random.default_rng(4)
    d, k, m = 16, 60, 6
    X = g.standard_normal((m, k, d))
    W = g.standard_normal((d, d)) / np.sqrt(d)
    Y = X + np.tanh(X @ W.T)
    xa = g.standard_normal((m, d))
    ya = xa + np.tanh(xa @ W.T)
    cfg = dict(CFG, mlp_width=16, mlp_steps=300, mlp_patience=30)
    f, _ = _fit("mlp", X, Y, xa, cfg)
    start = xa + (Y - X).mean(1)  # the network's initial prediction (mean update)
    err = np.linalg.norm(f.t.numpy() - ya, axis=1)
    assert (err < np.linalg.norm(start - ya, axis=1)).mean() >= 5 / 6


# ---- neighbours -----------------------------------------------------------------------------------
def test_knn_leave_one_out_matches_brute_force():
    g = np.random.default_rng(5)
    P = g.standard_normal((300, 7)).astype(np.float32) + 50  # offset: GEMM distances lose precision
    rows = sample_anchors(np.arange(300), 20, seed=0)
    idx = knn(torch.as_tensor(P), torch.as_tensor(rows), 5, leave_one_out=True, max_elements=1000).numpy()
    D = ((P[rows, None, :].astype(np.float64) - P[None].astype(np.float64)) ** 2).sum(-1)
    D[np.arange(20), rows] = np.inf
    np.testing.assert_array_equal(np.sort(idx, 1), np.sort(np.argsort(D, 1)[:, :5], 1))
    own = knn(torch.as_tensor(P), torch.as_tensor(rows), 5, leave_one_out=False).numpy()
    np.testing.assert_array_equal(own[:, 0], rows)


def test_anchors_are_seeded_distinct_and_from_the_pool():
    pool = np.arange(1, 1000, 3)
    a = sample_anchors(pool, 50, seed=7)
    np.testing.assert_array_equal(a, sample_anchors(pool, 50, seed=7))
    assert len(set(a)) == 50 and set(a) <= set(pool)
    assert not np.array_equal(a, sample_anchors(pool, 50, seed=8))
