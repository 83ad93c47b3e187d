"""Singular value decompositions that do not give up: LAPACK gesdd first, gesvd where gesdd fails.

numpy's SVD is LAPACK's divide-and-conquer ``gesdd``: fast, but on some valid matrices (finite, graded
singular values down to ~1e-20, e.g. a cumulative Jacobian product deep in a trained model) its iteration
fails to converge and numpy raises ``LinAlgError``. The QR-iteration driver ``gesvd`` is slower and
converges on those. Every SVD of the library goes through these helpers (numpy arrays and torch tensors),
so a rare matrix costs a slower decomposition, never a failed job.
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.linalg

log = logging.getLogger(__name__)


def _gesvd(a: np.ndarray, full_matrices: bool, compute_uv: bool):
    """scipy's gesvd on one matrix or a stack of matrices (..., m, n), numpy's return layout."""
    if a.ndim == 2:
        return scipy.linalg.svd(
            a, full_matrices=full_matrices, compute_uv=compute_uv, lapack_driver="gesvd", check_finite=False
        )
    parts = [_gesvd(x, full_matrices, compute_uv) for x in a.reshape(-1, *a.shape[-2:])]
    if not compute_uv:
        return np.stack(parts).reshape(*a.shape[:-2], -1)
    return tuple(np.stack(p).reshape(*a.shape[:-2], *p[0].shape) for p in zip(*parts, strict=True))


def svd(a: np.ndarray, full_matrices: bool = True, compute_uv: bool = True):
    """``numpy.linalg.svd`` (gesdd), falling back to LAPACK gesvd when gesdd does not converge."""
    try:
        return np.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)
    except np.linalg.LinAlgError:
        a = np.asarray(a)
        if not np.isfinite(a).all():
            raise
        log.info("SVD: gesdd did not converge on a %s matrix; using gesvd", "x".join(map(str, a.shape)))
        return _gesvd(a, full_matrices, compute_uv)


def svdvals(a: np.ndarray) -> np.ndarray:
    """Singular values alone, descending (``svd(..., compute_uv=False)``)."""
    return svd(a, compute_uv=False)


def torch_svd(A, full_matrices: bool = False):
    """``torch.linalg.svd`` (U, S, Vh), falling back to LAPACK gesvd in float64 (complex128) on the CPU when it
    fails."""
    import torch

    try:
        return torch.linalg.svd(A, full_matrices=full_matrices)
    except torch.linalg.LinAlgError:
        if not bool(torch.isfinite(A).all()):
            raise
        log.info("SVD: torch's SVD did not converge on a %s batch; using gesvd", tuple(A.shape))
        a = A.detach().cpu()
        U, s, Vh = _gesvd((a.cdouble() if a.is_complex() else a.double()).numpy(), full_matrices, True)
        real = A.real.dtype if A.is_complex() else A.dtype  # the singular values are real
        return tuple(
            torch.from_numpy(x).to(device=A.device, dtype=t) for x, t in ((U, A.dtype), (s, real), (Vh, A.dtype))
        )


def torch_svdvals(A):
    """``torch.linalg.svdvals`` (descending), falling back to LAPACK gesvd in float64 (complex128) on the CPU when
    it fails."""
    import torch

    try:
        return torch.linalg.svdvals(A)
    except torch.linalg.LinAlgError:
        if not bool(torch.isfinite(A).all()):
            raise
        log.info("SVD: torch's SVD did not converge on a %s batch; using gesvd", tuple(A.shape))
        a = A.detach().cpu()
        s = _gesvd((a.cdouble() if a.is_complex() else a.double()).numpy(), False, False)
        return torch.from_numpy(s).to(device=A.device, dtype=A.real.dtype if A.is_complex() else A.dtype)
