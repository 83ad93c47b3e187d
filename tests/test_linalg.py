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
