"""The SVD helpers: gesdd where it converges, gesvd where it does not (numpy arrays, stacks, torch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layergeom import linalg


def graded(d=40, seed=0, lo=-20):
    """A finite matrix with singular values from 1 down to 10**lo (like a deep cumulative product)."""
    g = np.random.default_rng(seed)
    U, _ = np.linalg.qr(g.standard_normal((d, d)))
    V, _ = np.linalg.qr(g.standard_normal((d, d)))
    return (U * np.logspace(0, lo, d)) @ V.T


@pytest.fixture
def gesdd_fails(monkeypatch):
    """numpy's SVD raises as gesdd does on the matrices it cannot converge on; torch's likewise."""

    def fail(*a, **k):
        raise np.linalg.LinAlgError("SVD did not converge")

    def tfail(*a, **k):
        raise torch.linalg.LinAlgError("linalg.svd: The algorithm failed to converge")

    monkeypatch.setattr(np.linalg, "svd", fail)
    monkeypatch.setattr(torch.linalg, "svd", tfail)


def test_helpers_agree_with_numpy_where_gesdd_converges():
    A = graded()
    U, s, Vh = linalg.svd(A)
    np.testing.assert_allclose((U * s) @ Vh, A, atol=1e-14)
    np.testing.assert_array_equal(s, np.linalg.svd(A)[1])
    np.testing.assert_array_equal(linalg.svdvals(A), np.linalg.svd(A, compute_uv=False))


def test_fallback_is_gesvd_when_gesdd_fails(gesdd_fails):
    A = graded()
    U, s, Vh = linalg.svd(A)
    np.testing.assert_allclose((U * s) @ Vh, A, atol=1e-14)
    np.testing.assert_allclose(U.T @ U, np.eye(len(A)), atol=1e-13)
    np.testing.assert_allclose(s[:5], np.logspace(0, -20, 40)[:5], rtol=1e-12)
    np.testing.assert_allclose(linalg.svdvals(A), s, rtol=1e-12)
    stack = np.stack([A, 2 * A, A.T])  # stacked input keeps numpy's layout
    Us, ss, Vhs = linalg.svd(stack, full_matrices=False)
    assert Us.shape == (3, 40, 40) and ss.shape == (3, 40) and Vhs.shape == (3, 40, 40)
    np.testing.assert_allclose(ss[1], 2 * s, rtol=1e-12)
    np.testing.assert_allclose(Us[2] * ss[2] @ Vhs[2], A.T, atol=1e-14)


def test_fallback_refuses_non_finite_input(gesdd_fails):
    A = graded()
    A[0, 0] = np.nan
    with pytest.raises(np.linalg.LinAlgError):
        linalg.svd(A)


def test_torch_fallback_keeps_dtype_and_device(gesdd_fails):
    A = torch.from_numpy(np.stack([graded(12, s, -6) for s in range(3)])).float()
    U, S, Vh = linalg.torch_svd(A)
    assert U.dtype == S.dtype == Vh.dtype == torch.float32 and U.shape == (3, 12, 12)
    torch.testing.assert_close(U * S[:, None, :] @ Vh, A, atol=1e-5, rtol=1e-5)


# ---- certified low-rank singular values (the `update` products) -------------------------------------------------
def with_spectrum(s, seed=0, complex_=False):
    """A d×d matrix with singular values `s` (random orthonormal/unitary factors)."""
    g = np.random.default_rng(seed)
    d = len(s)
    A, B = g.standard_normal((d, d)), g.standard_normal((d, d))
    if complex_:
        A, B = A + 1j * g.standard_normal((d, d)), B + 1j * g.standard_normal((d, d))
    U, V = np.linalg.qr(A)[0], np.linalg.qr(B)[0]
    return (U * np.asarray(s)) @ V.conj().T


def entropy(s):
    p = np.asarray(s, dtype=np.float64)
    p = p[p > 0] / p.sum()
    return float(-np.sum(p * np.log(p)))


@pytest.mark.parametrize("complex_", [False, True])
def test_certified_svd_on_a_low_rank_product_matches_the_full_svd(complex_):
    d, r = 96, 20
    s = np.r_[np.logspace(0, -3, r), np.zeros(d - r)]
    C = torch.from_numpy(with_spectrum(s, 1, complex_))
    out = linalg.certified_svd(C, vectors=True)
    assert out is not None
    U, sh, Vh, bound = out
    k = len(sh)
    assert r <= k <= d // 2 and bound <= linalg.LOWRANK_TOL
    full = torch.linalg.svdvals(C).numpy()
    np.testing.assert_allclose(sh.numpy()[:r], full[:r], rtol=1e-12)
    assert abs(entropy(sh.numpy()) - entropy(full)) <= bound  # the bound bounds
    # the triplets reproduce C (its rank-r part is all of it)
    np.testing.assert_allclose((U * sh) @ Vh, C, atol=1e-12 * float(full[0]))
    # a function of C alone: the same bits twice (a fanned-out job and the single job take the same route)
    again = linalg.certified_svd(C, vectors=False)
    np.testing.assert_array_equal(linalg.certified_svd(C, False)[1].numpy(), again[1].numpy())
    np.testing.assert_array_equal(linalg.certified_svd(C, True)[1].numpy(), sh.numpy())


def test_certified_svd_refuses_what_it_cannot_certify():
    d = 64
    # full rank: no certificate within d/2 columns
    assert linalg.certified_svd(torch.from_numpy(with_spectrum(np.linspace(1, 0.5, d))), vectors=False) is None
    # a tail just above the certificate's reach: refused (a tail the entropy feels)
    s = np.r_[np.ones(8), np.full(d - 8, 1e-6)]
    assert linalg.certified_svd(torch.from_numpy(with_spectrum(s, 2)), vectors=False) is None


@pytest.mark.parametrize("tail", [1e-17, 1e-14, 1e-12, 1e-11])
def test_the_entropy_bound_holds_for_rounding_tails(tail):
    """Wherever the route certifies, the true entropy change (full SVD) is within the bound it reports."""
    d, r = 128, 24
    g = np.random.default_rng(int(-np.log10(tail)))
    s = np.r_[np.sort(g.uniform(1e-3, 1, r))[::-1], tail * g.uniform(0.1, 1, d - r)]
    C = torch.from_numpy(with_spectrum(s, 3))
    out = linalg.certified_svd(C, vectors=False)
    full = torch.linalg.svdvals(C).numpy()
    if out is None:  # refused: the bound was above the tolerance
        assert linalg.entropy_bound(full[:r], float(np.linalg.norm(full[r:])), d) > linalg.LOWRANK_TOL / 2
        return
    assert abs(entropy(out[1].numpy()) - entropy(full)) <= out[3] <= linalg.LOWRANK_TOL
