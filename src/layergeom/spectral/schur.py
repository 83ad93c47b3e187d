"""Schur surgery (Paper B, docs/methods.md §2.5): dial the non-normal part of each J̄_b and watch the bottleneck.

Complex Schur ``J̄ = Q (Λ + N) Qᴴ``: Λ the eigenvalues, N strictly upper triangular, the non-normal part.
``J(α) = Q (Λ + αN) Qᴴ`` keeps the eigenvalues for every α; α=0 is a normal matrix (Henrici departure 0),
α=1 is J̄. Control: a random strictly upper-triangular N' with the same Frobenius norm as N (complex
Gaussian, seeded per boundary). J(α) is generally complex; the metrics use conjugate transposes.
Per-boundary metrics are unitarily invariant, so they are computed on the triangular ``Λ + αN`` directly;
the cumulative operators need ``J(α) = J₀ + α·Q N Qᴴ`` in the common basis, composed as the update
(``J(α)``) or the residual map (``I + J(α)``): both variants, like cumulative.tsv.

**Order of the Schur form.** The normal part J₀ = QΛQᴴ depends on the order of the eigenvalues along the
diagonal of T (Q's leading columns span the invariant subspace of the leading eigenvalues). LAPACK's order
is whatever its QR iteration deflates first, and the numerically zero eigenvalues of a rank-deficient J̄
(grouped-query attention: d − n_kv·d_head of them, at float32 rounding level) fall anywhere in it, so J₀
would depend on rounding. The Schur form here is reordered (LAPACK trsen) so that the numerically non-zero
eigenvalues (|λ| > τ·max|λ|, τ the rank tolerance) come first: J₀ then maps onto the invariant subspace of
the modes J̄ resolves, which for a semisimple zero eigenvalue is the range of J̄. Within the non-zero modes
LAPACK's order stands (the paper's definition leaves it open).

**Intervals** (``intervals``): the cumulative J(α) products carry first-order tangents for K jackknife
replicates, like cumulative.tsv. The tangent of J(α) = αJ̄ + (1−α)J₀ needs that of J₀: with Q' = Q(I + W),
W skew-Hermitian, the rotated T stays triangular when the strictly lower part of E + TW − WT vanishes
(E = QᴴΔQ), a triangular Sylvester system solved blockwise (LAPACK trsyl, recursive, level-3 updates);
then δJ₀ = Q(WΛ − ΛW + diag(E + TW − WT))Qᴴ. Rotations inside the numerically zero block are frozen (its
eigenvalues are rounding, its J₀ is 0). The tangent holds the eigenvalue order fixed: it is the sampling
variability of the surgery at this order. The random control Q N' Qᴴ (a fixed draw N') also depends on the
phases of the Schur vectors, which LAPACK fixes arbitrarily; its tangent carries them along (W_ii = 0).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.linalg
from scipy.linalg.lapack import ztrsen, ztrsyl

from ..linalg import svd
from .cumulative import VARIANTS, step_operator, tangent_floor
from .spectra import Decomposition, nonzero_modes, rank_tolerance, spectral_metrics

CONTROLS = ("none", "random")


@dataclass
class SchurForm:
    """J = Q (diag(lam) + N) Qᴴ with N strictly upper triangular; the first `n_nonzero` modes are non-zero."""

    Q: np.ndarray  # (d, d) unitary
    lam: np.ndarray  # (d,) eigenvalues
    N: np.ndarray  # (d, d) strictly upper triangular
    n_nonzero: int | None = None

    @property
    def normal_part(self) -> np.ndarray:
        """J₀ = Q diag(λ) Qᴴ: the normal matrix with the same eigenvalues and Schur vectors."""
        return (self.Q * self.lam) @ self.Q.conj().T


def schur_form(J: np.ndarray, tol: float | None = None) -> SchurForm:
    """Complex Schur decomposition J = Q (Λ + N) Qᴴ in complex128, numerically non-zero eigenvalues first.

    A real J goes through the real Schur form and scipy.linalg.rsf2csf (a complex Schur form of J, about
    twice as fast as the complex QR iteration that ``schur(output='complex')`` runs on a real input). `tol`
    is the relative rank tolerance τ (default ``rank_tolerance(d)``); modes |λ| ≤ τ·max|λ| are moved last.
    """
    J = np.asarray(J)
    if np.iscomplexobj(J):
        T, Q = scipy.linalg.schur(J.astype(np.complex128), output="complex")
    else:
        T, Q = scipy.linalg.rsf2csf(*scipy.linalg.schur(J.astype(np.float64), output="real"))
    T, Q, r = nonzero_first(T, Q, rank_tolerance(J.shape[0]) if tol is None else tol)
    return SchurForm(Q=Q, lam=np.diag(T).copy(), N=np.triu(T, 1), n_nonzero=r)


def nonzero_first(T: np.ndarray, Q: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray, int]:
    """Reorder a complex Schur form (T, Q) so the numerically non-zero eigenvalues lead (LAPACK ztrsen, a
    unitary reordering: Q T Qᴴ is unchanged); returns (T, Q, their number r). LAPACK's QR iteration usually
    deflates the small eigenvalues last already; this makes it a rule."""
    nz = nonzero_modes(np.diag(T), tol)
    r = int(nz.sum())
    if 0 < r < len(nz) and not nz[:r].all():
        T, Q, _, _, _, _, info = ztrsen(nz.astype(np.int32), T, Q, job="N")
        if info != 0:
            raise RuntimeError(f"LAPACK ztrsen failed to reorder the Schur form (info={info})")
    return T, Q, r


def random_strict_upper(d: int, fro: float, rng: np.random.Generator) -> np.ndarray:
    """Control: a complex Gaussian strictly upper-triangular d×d matrix rescaled to Frobenius norm `fro`."""
    N = np.triu(rng.standard_normal((d, d)) + 1j * rng.standard_normal((d, d)), 1)
    nrm = np.linalg.norm(N)
    return N * (fro / nrm) if nrm > 0 else N


# ---- first-order perturbation of the Schur form ------------------------------------------------------
def triangular_sylvester(A: np.ndarray, B: np.ndarray, C: np.ndarray, block: int = 48) -> np.ndarray:
    """X with A X − X B = C for upper-triangular A (m, m), B (n, n) and C (K, m, n): recursive halving (Jonsson &
    Kågström's RECSY) with LAPACK ztrsyl on blocks of at most `block`, matrix products for the couplings."""
    K, m, n = C.shape
    if m <= block and n <= block:
        out = np.empty_like(C)
        for k in range(K):
            X, scale, info = ztrsyl(A, B, C[k], isgn=-1)
            if info < 0:
                raise RuntimeError(f"LAPACK ztrsyl failed (info={info})")
            out[k] = X / scale
        return out
    if m >= n:  # split the rows: A22 X2 − X2 B = C2, then A11 X1 − X1 B = C1 − A12 X2
        h = m // 2
        X2 = triangular_sylvester(A[h:, h:], B, C[:, h:], block)
        X1 = triangular_sylvester(A[:h, :h], B, C[:, :h] - A[:h, h:] @ X2, block)
        return np.concatenate([X1, X2], axis=1)
    h = n // 2  # split the columns: A X1 − X1 B11 = C1, then A X2 − X2 B22 = C2 + X1 B12
    X1 = triangular_sylvester(A, B[:h, :h], C[:, :, :h], block)
    X2 = triangular_sylvester(A, B[h:, h:], C[:, :, h:] + X1 @ B[:h, h:], block)
    return np.concatenate([X1, X2], axis=2)


def schur_rotation(T: np.ndarray, E: np.ndarray, block: int = 48) -> np.ndarray:
    """Strictly lower W (K, n, n) with tril(T W − W T + E, −1) = 0 for upper-triangular T (n, n), E (K, n, n).

    Blockwise: T22 W21 − W21 T11 = −E21 (a triangular Sylvester equation), then the diagonal blocks with
    E11 + T12 W21 and E22 − W21 T12 (the strictly lower equations involve only strictly lower W).
    """
    K, n, _ = E.shape
    W = np.zeros_like(E)
    if n <= 1:
        return W
    if n <= block:
        lam = np.diag(T)
        for j in range(n - 1):  # column j from the columns before it
            rhs = -E[:, j + 1 :, j] + W[:, j + 1 :, :j] @ T[:j, j]  # (K, n-j-1)
            A = T[j + 1 :, j + 1 :] - lam[j] * np.eye(n - j - 1)
            W[:, j + 1 :, j] = scipy.linalg.solve_triangular(A, rhs.T).T
        return W
    h = n // 2
    T11, T12, T22 = T[:h, :h], T[:h, h:], T[h:, h:]
    W21 = triangular_sylvester(T22, T11, -E[:, h:, :h], block)
    W[:, h:, :h] = W21
    W[:, :h, :h] = schur_rotation(T11, E[:, :h, :h] + T12 @ W21, block)
    W[:, h:, h:] = schur_rotation(T22, E[:, h:, h:] - W21 @ T12, block)
    return W


@dataclass
class SchurTangent:
    """First-order change of the Schur form under J -> J + Δ_k, K directions (fixed eigenvalue order)."""

    W: np.ndarray | None  # (K, d, d) complex64 skew-Hermitian: Q' = Q (I + W) (kept only when asked)
    dlam: np.ndarray  # (K, d)
    dJ0: np.ndarray  # (K, d, d) complex64: δ(Q Λ Qᴴ)
    dnorm_rel: np.ndarray  # (K,) δ‖N‖_F / ‖N‖_F


def schur_tangent(form: SchurForm, J: np.ndarray, deltas: np.ndarray, keep_rotation: bool = True) -> SchurTangent:
    """δJ₀ = Q(WΛ − ΛW + diag(E + TW − WT))Qᴴ for each deviation Δ_k (K, d, d), E = QᴴΔQ.

    W solves the triangular Sylvester system of ``schur_rotation`` in the leading (non-zero) block and its
    coupling to the zero block; rotations inside the numerically zero block are frozen (W22 = 0, δλ = 0 there).
    One direction at a time (memory: a few complex d×d matrices besides the K results); the basis changes in
    complex64, the precision of a tangent.
    """
    Q, lam = form.Q, form.lam
    d = len(lam)
    r = d if form.n_nonzero is None else form.n_nonzero
    T = np.diag(lam) + form.N
    Q64 = Q.astype(np.complex64)
    Qh64 = Q64.conj().T
    K = len(deltas)
    dJ0 = np.empty((K, d, d), dtype=np.complex64)
    Ws = np.empty((K, d, d), dtype=np.complex64) if keep_rotation else None
    dlam = np.zeros((K, d), dtype=np.complex128)
    for k in range(K):
        D32 = np.asarray(deltas[k], dtype=np.float32)
        E = (Qh64 @ (D32 @ Q64)).astype(np.complex128)[None]  # (1, d, d) QᴴΔQ
        W = np.zeros_like(E)
        if 0 < r < d:
            W21 = triangular_sylvester(T[r:, r:], T[:r, :r], -E[:, r:, :r])
            W[:, r:, :r] = W21
            W[:, :r, :r] = schur_rotation(T[:r, :r], E[:, :r, :r] + T[:r, r:] @ W21)
        elif r == d:
            W = schur_rotation(T, E)
        W = W[0] - W[0].conj().T  # skew-Hermitian, zero diagonal
        # δλ_i = (E + TW − WT)_ii = E_ii + Σ_j (T_ij W_ji − W_ij T_ji): O(d²)
        dl = np.diagonal(E[0]) + np.einsum("ij,ji->i", T, W) - np.einsum("ij,ji->i", W, T)
        dl[r:] = 0
        dlam[k] = dl
        inner = W * lam[None, :] - lam[:, None] * W
        inner[np.arange(d), np.arange(d)] += dl
        dJ0[k] = Q64 @ inner.astype(np.complex64) @ Qh64
        if Ws is not None:
            Ws[k] = W
    nn2 = float(np.sum(np.abs(form.N) ** 2))
    Jr = np.asarray(J, dtype=np.float64).real
    dfro2 = np.array([2 * float(np.sum(Jr * np.asarray(deltas[k], dtype=np.float64))) for k in range(K)])
    dn2 = dfro2 - 2 * np.real(np.sum(np.conj(lam)[None] * dlam, axis=1))
    return SchurTangent(W=Ws, dlam=dlam, dJ0=dJ0, dnorm_rel=dn2 / (2 * nn2) if nn2 > 0 else np.zeros(K))


# ---- the surgery table -------------------------------------------------------------------------------
def boundary_metrics_at(
    form: SchurForm, N: np.ndarray, alpha: float, sr_k: int, tol: float, J: np.ndarray | None = None
) -> dict:
    """Every per-boundary metric of J_b(α) = Q(Λ + αN)Qᴴ, from the unitarily similar triangular Λ + αN.

    α = 0 needs no SVD: a diagonal matrix has σ = |λ| sorted and U_kᴴV_k a diagonal of phases (SR = 1);
    α = 1 with the own N is J̄ itself (`J`: a real SVD, the eigenvalues from the Schur form).
    """
    if alpha == 1 and J is not None:
        U, s, Vh = svd(J)
        dec = Decomposition(eigvals=form.lam, U=U, s=s, Vh=Vh)
        T = J
    elif alpha == 0:
        lam = form.lam
        order = np.argsort(-np.abs(lam), kind="stable")
        d = len(lam)
        U = np.eye(d, dtype=np.complex128)[:, order] * np.exp(1j * np.angle(lam[order]))[None]
        Vh = np.eye(d, dtype=np.complex128)[order]
        dec = Decomposition(eigvals=lam, U=U, s=np.abs(lam[order]), Vh=Vh)
        T = np.diag(lam)
    else:
        T = np.diag(form.lam) + alpha * N
        U, s, Vh = svd(T)
        dec = Decomposition(eigvals=form.lam, U=U, s=s, Vh=Vh)
    m = spectral_metrics(T, sr_k=sr_k, tol=tol, dec=dec)
    return {f"b_{k}": v for k, v in m.items()}


def schur_surgery(
    jacobians,
    *,
    alphas: Iterable[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
    seed: int = 0,
    variants: Iterable[str] = VARIANTS,
    sr_k: int = 64,
    tol: float | None = None,
    boundary_metrics: str = "own",
    deviations=None,
    weights: np.ndarray | None = None,
    ci_level: float = 0.95,
    ci_controls: Iterable[str] = CONTROLS,
    snapshots=None,
) -> pd.DataFrame:
    """schur.tsv: one row per (variant, alpha, control, depth) with erank of the cumulative J(α) product.

    ``jacobians`` maps boundary -> J̄_b (depth order; a lazy mapping is read once per boundary).
    ``deviations`` (optional) maps boundary -> (K, d, d) replicate deviations of J̄_b, with their jackknife
    ``weights``: then erank_ci_low/high for the controls in ``ci_controls`` (nan for the others).
    Extra columns: the boundary at that depth, log ‖C_n‖_F, the ‖N‖_F of the boundary and every per-boundary
    metric of J_b(α), prefixed ``b_`` — for the matrix's own N (boundary_metrics ``own``), for the random
    control too (``all``) or never (``none``; nan). α = 0 is the same operator for both controls (computed
    once); α = 1 with the own N is J̄_b itself (composed in real arithmetic, like cumulative.tsv).
    ``snapshots`` (``layergeom.resume.Snapshots``, optional) resumes after its last snapshot (the boundaries
    it covers are not read) and saves the products as it goes; each boundary's control N' is seeded by its
    depth, so a resumed run draws the same.
    """
    from .intervals import ProductChain, jackknife_interval

    if boundary_metrics not in ("own", "all", "none"):
        raise ValueError(f"boundary_metrics must be own, all or none, not '{boundary_metrics}'")
    names = list(jacobians)
    alphas = list(dict.fromkeys(float(a) for a in alphas))  # a repeated α would step its chains twice
    variants = list(variants)
    ci_controls = set(ci_controls)
    runs = [(a, c) for c in CONTROLS for a in alphas if not (a == 0 and c == "random")]
    chains = {(v, a, c): None for v in variants for a, c in runs}
    rows = []
    last = snapshots.load() if snapshots is not None else None
    if last is not None:
        rows = last["state"]["rows"]
        chains = {k: None if c is None else ProductChain.from_state(c) for k, c in last["state"]["chains"].items()}
    for bi, name in enumerate(names):
        if last is not None and bi < last["done"]:
            continue
        J = np.asarray(jacobians[name], dtype=np.float64)
        d = J.shape[0]
        tau = rank_tolerance(d) if tol is None else tol
        form = schur_form(J, tau)
        J0 = form.normal_part  # (d, d)
        R_own = J - J0  # = Q N Qᴴ up to rounding
        Nr = random_strict_upper(d, float(np.linalg.norm(form.N)), np.random.default_rng([seed, bi]))
        R_rand = form.Q @ Nr @ form.Q.conj().T
        D = None if deviations is None else np.asarray(deviations[name])
        need = D is not None and any((a != 1 or c != "none") and (c in ci_controls or a == 0) for a, c in runs)
        tan = schur_tangent(form, J, D, keep_rotation="random" in ci_controls) if need else None
        for alpha, control in runs:
            want_ci = D is not None and (control in ci_controls or alpha == 0)
            if alpha == 1 and control == "none":
                M, dM = J, (D if want_ci else None)
            elif control == "none":
                M = J0 + alpha * R_own
                dM = (tan.dJ0 * (1 - alpha) + alpha * D) if want_ci else None
            else:
                M = J0 + alpha * R_rand
                if want_ci:  # δR' = Q(W N' − N' W)Qᴴ + (δ‖N‖/‖N‖) R'
                    Q64, Nr64 = form.Q.astype(np.complex64), Nr.astype(np.complex64)
                    rot = np.matmul(np.matmul(Q64, tan.W @ Nr64 - Nr64 @ tan.W), Q64.conj().T)
                    dM = (tan.dJ0 + alpha * (rot + tan.dnorm_rel[:, None, None] * R_rand)).astype(np.complex64)
                else:
                    dM = None
            nrm = form.N if control == "none" else Nr
            bm = None
            if boundary_metrics == "all" or (boundary_metrics == "own" and control == "none"):
                bm = boundary_metrics_at(form, nrm, alpha, sr_k, tau, J if control == "none" else None)
            for v in variants:
                key = (v, alpha, control)
                if chains[key] is None:
                    chains[key] = ProductChain(tangent_floor(d))
                erank, log_norm, reps = chains[key].step(step_operator(M, v), dM)
                row = {"variant": v, "alpha": alpha, "control": control, "depth": bi + 1, "erank": erank}
                lo, hi = (np.nan, np.nan)
                if dM is not None:
                    lo, hi = jackknife_interval(erank, reps, weights, ci_level, "log")
                row |= {"erank_ci_low": lo, "erank_ci_high": hi, "boundary": name, "log_norm": log_norm}
                row["nonnormal_fro"] = float(np.linalg.norm(nrm))
                if bm is not None:
                    row |= bm
                rows.append(row)
        if snapshots is not None:
            snapshots.save(bi + 1, lambda: {"rows": rows, "chains": {k: c and c.state() for k, c in chains.items()}})
    table = pd.DataFrame(rows)
    zero = table[(table["alpha"] == 0) & (table["control"] == "none")]
    table = pd.concat([table, zero.assign(control="random")], ignore_index=True)  # α = 0: one operator
    first = ["alpha", "control", "depth", "erank", "erank_ci_low", "erank_ci_high", "variant"]
    table = table[first + [c for c in table.columns if c not in first]]
    vorder = {v: i for i, v in enumerate(variants)}
    corder = {c: i for i, c in enumerate(CONTROLS)}
    table = table.sort_values(
        ["variant", "control", "alpha", "depth"],
        key=lambda s: s.map(vorder) if s.name == "variant" else (s.map(corder) if s.name == "control" else s),
        kind="stable",
    )
    return table.reset_index(drop=True)  # rows without per-boundary metrics get nan there
