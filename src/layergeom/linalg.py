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


# ---- certified low-rank singular values of a product (the cumulative `update` products) -----------------------
#: the largest |Δ log erank| that ``certified_svd`` may leave (its bound, not its error): ε₃₂/1000 ≈ 1.2e-10.
#: J̄ is averaged from float32 Jacobians, so storing it in float32 is the precision it carries; that moves the log
#: erank of the products of the default run's J̄ by 3e-9 to 2e-7 (docs/precision.md, "Precision budget"), and
#: the budget allows a method a tenth of it. The bound stays below that with room (the error it bounds is
#: typically 10–100× smaller still); the raw attention J̄ themselves, whose float32 tail carries ~1e-6 of the
#: norm, are refused and take the full SVD.
LOWRANK_TOL = float(np.finfo(np.float32).eps) / 1000
#: the test matrix's seed: fixed, so that the route is a function of C alone (a fanned-out job, a resumed one
#: and the single job take the same columns and the same bits)
LOWRANK_SEED = 20261206


def entropy_bound(s_hat: np.ndarray, rho: float, d: int) -> float:
    """An upper bound on |H(σ(C)) − H(σ̂)| (H the entropy of p = σ/Σσ: erank = exp H) when σ̂ (k, descending)
    are the singular values of QᴴC for an orthonormal Q (d, k) and ρ = ‖(I − QQᴴ)C‖_F.

    With R = (I − QQᴴ)C, CᴴC = (QᴴC)ᴴ(QᴴC) + RᴴR, so (Weyl) σ̂_i ≤ σ_i ≤ sqrt(σ̂_i² + ρ²) for i ≤ k and the d − k
    others sum to at most sqrt(d − k)·ρ (Cauchy–Schwarz on Σσ_i² ≤ ρ²). Head: first order in
    δσ_i ≤ min(ρ, ρ²/(2σ̂_i)), |∂H/∂σ_i| = |log p_i + H|/Σσ. Tail: by the grouping rule of entropy, a share
    x = Σ_tail/Σσ moves H by at most x·log d + h(x) ≤ x(log d + 1 − log x)."""
    s_hat = np.asarray(s_hat, dtype=np.float64)
    S = float(s_hat.sum())
    if S <= 0 or not np.isfinite(S):
        return float("inf")
    p = s_hat / S
    pos = p > 0
    H = float(-np.sum(p[pos] * np.log(p[pos])))
    grad = np.zeros_like(p)
    grad[pos] = np.abs(np.log(p[pos]) + H) / S
    grad[~pos] = np.inf if rho > 0 else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        shift = np.minimum(rho, np.where(s_hat > 0, rho * rho / (2 * s_hat), rho))
    head = float(np.sum(np.where(shift > 0, grad * shift, 0.0)))
    x = min(1.0, np.sqrt(max(d - len(s_hat), 0)) * rho / S)
    tail = 0.0 if x == 0 else x * (np.log(d) + 1.0 - np.log(x))
    return head + tail


def certified_svd(C, vectors: bool, *, tol: float = LOWRANK_TOL, block: int | None = None, max_frac: float = 0.5):
    """The leading singular values (and vectors) of a square tensor C (d, d) by an adaptive randomized range
    finder, certified: (U (d, k) or None, s (k,), Vh (k, d) or None, bound), or None where the certificate
    fails within k ≤ `max_frac`·d columns (the caller takes the full SVD).

    Blocks of b = max(2, ⌈d/32⌉) columns of a fixed seeded Gaussian test matrix (``LOWRANK_SEED``: the same
    columns on every call, so the result is a function of C) are pushed through the residual R = (I − QQᴴ)C
    (exact, updated block by block: R ← R − q(qᴴR)), orthonormalised against Q twice, until the cheap form of
    ``entropy_bound`` (Σσ̂ ≥ ‖QᴴC‖_F) is below `tol`/2; then the SVD of the k×d matrix QᴴC gives σ̂ and the
    full ``entropy_bound`` must be below `tol`. A product of low rank (the `update` chains after a grouped-query
    attention boundary: rank ≤ n_kv·d_head) costs a few d²k products instead of a full SVD (O(d³) with a large
    constant); the singular values it leaves out carry less than `tol` of the entropy, and those it keeps are
    those of C up to ρ²/(2σ̂_i). Torch, on C's device."""
    import torch

    d = int(C.shape[-1])
    if C.ndim != 2 or C.shape[0] != d:
        return None
    b = block or max(2, -(-d // 32))
    kmax = int(max_frac * d)
    dtype = C.dtype
    gen = torch.Generator(device="cpu").manual_seed(LOWRANK_SEED)
    real = C.real.dtype if C.is_complex() else dtype
    R = C.clone()
    fro = float(torch.linalg.vector_norm(C))
    if not np.isfinite(fro) or fro == 0:
        return None
    Qs, Bs, k, f2 = [], [], 0, 0.0
    while k + b <= kmax:
        omega = torch.randn(d, b, generator=gen, dtype=torch.float64).to(device=C.device, dtype=real).to(dtype)
        Y = R @ omega  # (d, b): in the residual's range, ⟂ Q up to rounding
        for _ in range(2):  # classical Gram–Schmidt twice against the basis so far
            for Qj in Qs:
                Y = Y - Qj @ (Qj.conj().T @ Y)
        q, _ = torch.linalg.qr(Y)  # (d, b)
        Bq = q.conj().T @ R  # (b, d) = qᴴC (q ⟂ Q)
        R = R - q @ Bq
        Qs.append(q)
        Bs.append(Bq)
        k += b
        f2 += float(torch.linalg.vector_norm(Bq)) ** 2
        rho = float(torch.linalg.vector_norm(R))
        # cheap bound: Σσ̂ ≥ ‖QᴴC‖_F, and the head term is second order in ρ
        x = min(1.0, np.sqrt(d - k) * rho / max(np.sqrt(f2), 1e-300))
        if x == 0 or x * (np.log(d) + 1.0 - np.log(x)) <= tol / 2:
            break
    else:
        return None
    B = torch.cat(Bs, dim=0)  # (k, d) = QᴴC
    if vectors:
        Ub, s, Vh = torch_svd(B)  # (k, k), (k,), (k, d)
    else:
        s, Ub, Vh = torch_svdvals(B), None, None
    bound = entropy_bound(s.detach().cpu().numpy(), rho, d)
    if not bound <= tol:
        return None
    U = torch.cat(Qs, dim=1) @ Ub if vectors else None  # (d, k)
    return U, s, Vh, bound
