"""Confidence intervals on the Paper B numbers by resampling sample groups (docs/methods.md §2.7).

**Resampling unit.** The Jacobian job writes, per boundary, the mean Jacobian J̄_g of each sample group g
(contiguous blocks of windows: tokens of one window are correlated, so the window, not the token, is the
independent unit) and their sizes n_g; J̄ = Σ_g w_g J̄_g with w_g = n_g / N. The grouping is the same at
every boundary, so one replicate — one set of group weights — is one consistent draw of the whole network:
the cumulative products of a replicate compose that replicate's J̄_b.

**Scheme: the delete-one-group jackknife, linearised.** Replicate k deletes group (or block) k:
``J̄_(−k) = (J̄ − w_k J̄_k) / (1 − w_k)``, i.e. the deviation ``Δ_k = J̄_(−k) − J̄ = −w_k/(1−w_k) (J̄_k − J̄)``.
The variance of a statistic θ is

    v = K/(K−1) · Σ_k (1 − w_k)² (θ_(−k) − θ̂)²

(the textbook (K−1)/K Σ(θ_(−k) − θ̂)² for equal groups; for a linear statistic it equals the cluster-robust
sandwich variance of the weighted mean for any group sizes), and the interval is θ̂ ± t_{K−1, (1+level)/2} √v
(θ̂ the full-sample value; cond and erank on the log scale, so their intervals stay positive).

θ_(−k) is computed to first order, θ̂ + Dθ[Δ_k], from the full-sample decomposition: the SVD gives δσ_i =
u_iᵀΔv_i and the first-order rotation of the top-k singular subspaces, the eigenvectors give δλ_i =
y_iᴴΔx_i / y_iᴴx_i, and products carry a tangent Ċ_n = Δ_n C_{n−1} + M_n Ċ_{n−1}. This costs one or two
d×d matrix products per replicate instead of a new eigendecomposition and SVD per replicate and boundary
(G = 16 exact replicates of SmolLM2's 60 boundaries would cost ≈ 16·60·(0.2 s eig + 0.07 s SVD) ≈ 4.5 min
per checkpoint; linearised, the intervals add ≈ 20 s to spectra.tsv, ≈ 25 s to cumulative.tsv and ≈ 30 s to
schur.tsv on one core: bench/bench_intervals.py, bench/results/intervals.md). The jackknife of a smooth statistic is
its linearisation up to O(1/N) (Efron's infinitesimal jackknife), and the tests check the two against each
other and check coverage. Mode counts (complex and expansive fractions) are recounted on the first-order
eigenvalues λ_i + δλ_i with the point estimate's modes and rules (``spectra.mode_flags``; close real pairs
and pairs near the real axis through their 2×2 quasi-degenerate block, so that a collision into a complex
pair, or of a pair onto the axis, is seen), and SR over the point estimate's k' = min(k, r). A count is a discontinuous statistic:
when the sampling noise moves eigenvalues by as much as the gaps between real ones, it pushes them into
complex pairs and the complex fraction of J̄ is biased upwards — an interval around it does not correct that.
``method="exact"`` recomputes every replicate from scratch instead (the reference; affordable for small d).

Memory: one boundary's group means (G, d, d) float32 and K tangents (K, d, d) float32 per product, never
O(N·d²) (d = 4096, G = 16: 1.1 GB each).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ..linalg import svd, svdvals
from .spectra import (
    Decomposition,
    asymmetry,
    complex_modes,
    decompose,
    effective_rank,
    henrici_departure,
    mode_flags,
    mode_precision,
    numerical_rank,
    self_realignment,
    spectral_metrics,
    sr_dimension,
)

CI_METHODS = ("linear", "exact")


# ---- replicates: group weights and deviations ---------------------------------------------------------
@dataclass
class Replicates:
    """The K jackknife replicates of one grouping: which groups each deletes and its weight w_k = n_k / N."""

    members: list[np.ndarray]  # K arrays of group indices (a block of consecutive groups)
    weights: np.ndarray  # (K,) w_k

    @property
    def K(self) -> int:
        return len(self.members)


def replicates(counts, n_blocks: int | None = None) -> Replicates:
    """Delete-one-block replicates over groups with sizes `counts`: K = min(n_blocks, G) blocks of consecutive groups.

    n_blocks None (or ≥ G) deletes one group at a time (K = G).
    """
    counts = np.asarray(counts, dtype=np.float64)
    G = len(counts)
    if G < 2:
        raise ValueError(f"a jackknife needs at least 2 sample groups, got {G}")
    K = G if n_blocks is None else max(2, min(int(n_blocks), G))
    members = [np.asarray(m) for m in np.array_split(np.arange(G), K)]
    w = np.array([counts[m].sum() for m in members]) / counts.sum()
    return Replicates(members, w)


def deviations(mean: np.ndarray, groups: np.ndarray, counts, reps: Replicates) -> np.ndarray:
    """Δ_k = J̄_(−k) − J̄ = −w_k/(1−w_k) (J̄_k − J̄) for every replicate k -> (K, d, d) float32.

    ``groups`` (G, d, d) are the group means (float32, may be a memmap), ``mean`` J̄ (d, d) float64.
    """
    counts = np.asarray(counts, dtype=np.float64)
    out = np.empty((reps.K, *mean.shape), dtype=np.float32)
    for k, (m, w) in enumerate(zip(reps.members, reps.weights)):
        block = np.tensordot(counts[m] / counts[m].sum(), np.asarray(groups[m], dtype=np.float64), axes=1)
        out[k] = -(w / (1 - w)) * (block - mean)  # (d, d)
    return out


# ---- variance and interval --------------------------------------------------------------------------
def jackknife_interval(
    theta: float, reps: np.ndarray, weights: np.ndarray, level: float = 0.95, scale: str = "linear"
) -> tuple[float, float]:
    """(low, high): θ̂ ± t_{K−1} √v, v = K/(K−1) Σ_k (1−w_k)² (θ_k − θ̂)²; `scale` log works on log θ.

    Replicates that are not finite make the interval nan (an undefined metric has no interval). On the log
    scale an upper end past the largest float is ``inf``: the data do not bound θ from above (a condition number
    σ₁/σ_r whose replicates move σ_r by about σ_r itself: σ_r may be 0).
    """
    reps = np.asarray(reps, dtype=np.float64)
    K = len(reps)
    if K < 2 or not np.isfinite(theta) or not np.all(np.isfinite(reps)):
        return float("nan"), float("nan")
    if scale == "log":
        if theta <= 0 or np.any(reps <= 0):
            return float("nan"), float("nan")
        theta, reps = np.log(theta), np.log(reps)
    v = K / (K - 1) * float(np.sum((1 - np.asarray(weights)) ** 2 * (reps - theta) ** 2))
    half = float(stats.t.ppf((1 + level) / 2, K - 1)) * np.sqrt(v)
    lo, hi = theta - half, theta + half
    if scale == "log":
        with np.errstate(over="ignore"):  # exp(hi) = inf: unbounded above
            return float(np.exp(lo)), float(np.exp(hi))
    return float(lo), float(hi)


#: per metric: the scale of its interval and the range it is clipped to
METRIC_SCALE = {"cond": "log", "erank": "log"}
METRIC_RANGE = {
    "self_realign": (0.0, 1.0),
    "henrici": (0.0, 1.0),
    "frac_expansive": (0.0, 1.0),
    "frac_complex": (0.0, 1.0),
    "asymmetry": (0.0, 1.0),
    "part_ratio": (1.0, np.inf),
    "erank": (1.0, np.inf),
    "cond": (1.0, np.inf),
}


def metric_interval(name: str, theta: float, reps: np.ndarray, weights: np.ndarray, level: float):
    """``jackknife_interval`` on the metric's scale, clipped to its range (fractions stay in [0, 1])."""
    lo, hi = jackknife_interval(theta, reps, weights, level, METRIC_SCALE.get(name, "linear"))
    a, b = METRIC_RANGE.get(name, (-np.inf, np.inf))
    return (float(np.clip(lo, a, b)), float(np.clip(hi, a, b))) if np.isfinite(lo) else (lo, hi)


# ---- first-order perturbations of one matrix --------------------------------------------------------
def entropy_gradient(s: np.ndarray, floor: float) -> tuple[float, np.ndarray]:
    """H = −Σ p log p (p_i = σ_i/Σσ) and ∂H/∂σ_i = −(log p_i + H)/Σσ on σ_i > floor·σ₁ (0 elsewhere).

    Entropy is not differentiable at σ = 0, and singular values at rounding level carry no signal: they are
    held fixed.
    """
    S = float(np.sum(s))
    p = s / S
    keep = s > floor * s[0]
    H = float(-np.sum(p[p > 0] * np.log(p[p > 0])))
    grad = np.zeros_like(s)
    grad[keep] = -(np.log(p[keep]) + H) / S
    return H, grad


def subspace_turns(A_lo: np.ndarray, A_up: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First-order turns of the top-k singular subspaces of a real J under J -> J + Δ, A = UᵀΔV.

    The left subspace turns by c^U_ji = (σ_i A_ji + σ_j A_ij)/(σ_i² − σ_j²) towards u_j (i ≤ k < j), the right
    one by c^V_ji = (σ_i A_ij + σ_j A_ji)/(σ_i² − σ_j²) (turns inside a subspace leave its projector alone).
    A_lo = A[k:, :k], A_up = A[:k, k:]; returns (c^U, c^V), each (k, d−k) indexed [i, j].
    """
    k = A_up.shape[0]
    si, sj = s[:k, None], s[None, k:]  # (k, 1), (1, d-k)
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = si**2 - sj**2  # (k, d-k)
        a_ji = A_lo.T  # (k, d-k): A_ji with i ≤ k < j, indexed [i, j]
        return (si * a_ji + sj * A_up) / gap, (si * A_up + sj * a_ji) / gap


def top_subspaces(J1: np.ndarray, JV: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k left and right singular vectors of J1 from a starting subspace: JV = J1 V_m (d, m), m ≥ 2k.

    With V_m the top-m right singular vectors of a nearby matrix, one power iteration and a Rayleigh–Ritz
    projection (randomised SVD with q = 1, Halko et al. 2011) recover the top-k pairs of J1 to a few per cent
    of a sampling-size perturbation, and stay valid when singular values near σ_k are close or tie, where a
    perturbation series divides by their gaps.
    """
    Qy, _ = np.linalg.qr(JV)  # (d, m)
    Z, _ = np.linalg.qr(J1.T @ Qy)  # (d, m)
    Qy, _ = np.linalg.qr(J1 @ Z)
    Ub, _, Vbh = svd(Qy.T @ J1, full_matrices=False)  # (m, d) projected problem
    return Qy @ Ub[:, :k], Vbh[:k].T


@dataclass
class LinearSpectra:
    """What the first-order replicates of one matrix's metrics need from its full-sample decomposition."""

    J: np.ndarray
    dec: Decomposition
    tol: float
    sr_k: int
    #: below this Henrici departure its replicates are exact (a norm-like quantity is not differentiable at 0)
    henrici_exact_below: float = 0.1

    def __post_init__(self):
        dec, d = self.dec, self.J.shape[0]
        if dec.vl is None or dec.vr is None:
            raise ValueError("linearised intervals need the eigenvectors: decompose(J, vectors=True)")
        self.rank = numerical_rank(dec.s, self.tol)
        self.k = sr_dimension(self.sr_k, self.rank)  # SR over k' = min(k, r), as spectral_metrics
        self.m = min(d, 2 * self.k)  # Rayleigh–Ritz subspace for SR_k
        self.V32 = np.ascontiguousarray(dec.Vh.T, dtype=np.float32)  # (d, d)
        self.U32 = dec.U.astype(np.float32)
        self.US = dec.U[:, : self.m] * dec.s[: self.m]  # (d, m) = J V_m
        if 0 < self.k < d:
            M = dec.U.T @ dec.Vh[: self.k].T  # (d, k) = Uᵀ V_k
            Mp = dec.Vh @ dec.U[:, : self.k]  # (d, k) = Vᵀ U_k
            self.MM = M[: self.k] @ M[self.k :].T  # (k, d-k)
            self.NN = Mp[: self.k] @ Mp[self.k :].T  # (k, d-k)
        self.sr = self_realignment(dec.U, dec.Vh, self.k)
        self.eps = mode_precision(self.tol, d)
        self.nz, _, _ = mode_flags(dec, self.tol, self.eps)
        self.kappa = dec.eig_condition
        self.H, self.dH = entropy_gradient(dec.s, self.tol)
        # eigenvalue perturbations: one of each conjugate pair (the other is its conjugate for real Δ)
        lam = dec.eigvals
        self.upper = self.nz & (lam.imag >= 0)
        x, y = dec.vr[:, self.upper], dec.vl[:, self.upper]  # (d, r') right / left eigenvectors
        self.x32 = np.concatenate([x.real, x.imag], axis=1).astype(np.float32)  # (d, 2r')
        self.yc = y.conj()
        self.ydotx = np.sum(self.yc * x, axis=0)  # (r',) y_iᴴ x_i
        self.fro2 = float(np.sum(self.J**2))
        self.henrici = float(np.sqrt(max(0.0, self.fro2 - float(np.sum(np.abs(lam) ** 2))) / self.fro2))

    def eigen_perturbation(self, delta32: np.ndarray) -> np.ndarray:
        """The non-zero modes' eigenvalues of J + Δ (in the order of dec.eigvals[nz]), to leading order.

        First order: δλ_i = y_iᴴ Δ x_i / y_iᴴ x_i. Where Δ can move a mode across the real axis, the first
        order is replaced by the eigenvalues of the 2×2 quasi-degenerate block [[λ_i + a_ii, a_ij],
        [a_ji, λ_j + a_jj]], a_pq = y_pᴴ Δ x_q / y_pᴴ x_p (Δ projected on the two modes in their biorthogonal
        basis): close real eigenvalues, paired with their nearest real neighbour (greedily, smallest gap first),
        may collide into a complex pair (``real_pair_collisions``); a complex pair near the axis, whose block is
        [[μ, a], [ā, μ̄]] for a real Δ, becomes two real eigenvalues Re μ ± √(|a|² − (Im μ)²) when |a| > |Im μ|.
        """
        lam = self.dec.eigvals
        r = int(self.upper.sum())
        DX = (delta32 @ self.x32).astype(np.float64)  # (d, 2r')
        DXc = DX[:, :r] + 1j * DX[:, r:]  # (d, r') Δ x_i
        A = (self.yc.T @ DXc) / self.ydotx[:, None]  # (r', r') a_pq
        new = lam[self.upper] + np.diagonal(A)
        full = np.zeros(len(lam), dtype=np.complex128)
        full[self.upper] = new
        lower = self.nz & (lam.imag < 0)  # the conjugates of complex pairs: LAPACK stores λ, conj(λ) adjacent
        idx = np.flatnonzero(lower)
        full[idx] = np.conj(full[idx - 1])
        pos = np.flatnonzero(self.upper)  # position in dec.eigvals of each upper mode
        for i, j, e in self.real_pair_collisions(A, new):
            full[pos[i]], full[pos[j]] = e
        # complex pairs: a = y_iᴴ Δ x̄_i / y_iᴴ x_i (Δ x̄ = conj(Δ x) for a real Δ)
        pair = np.flatnonzero((lam[self.upper].imag > 0) & np.isin(pos + 1, idx))
        a = np.sum(self.yc[:, pair] * np.conj(DXc[:, pair]), axis=0) / self.ydotx[pair]  # (pairs,)
        disc = np.abs(a) ** 2 - new[pair].imag ** 2
        for p, dd in zip(pair[disc > 0], disc[disc > 0]):
            full[pos[p]], full[pos[p] + 1] = new[p].real + np.sqrt(dd), new[p].real - np.sqrt(dd)
        return full[self.nz]

    def real_pair_collisions(self, A: np.ndarray, new: np.ndarray):
        """(i, j, eigenvalues) for the pairs of neighbouring real modes whose 2×2 block has complex eigenvalues."""
        lam = self.dec.eigvals[self.upper]
        real = np.flatnonzero(np.abs(lam.imag) == 0)
        if len(real) < 2:
            return
        order = np.argsort(lam.real[real])
        gaps = np.diff(lam.real[real][order])
        used = np.zeros(len(real), bool)
        for g in np.argsort(gaps):
            a, b = order[g], order[g + 1]
            if used[a] or used[b]:
                continue
            i, j = real[a], real[b]
            e = np.linalg.eigvals(np.array([[new[i], A[i, j]], [A[j, i], new[j]]]))
            if np.iscomplexobj(e) and np.abs(e.imag).max() > 0:
                used[a] = used[b] = True
                yield i, j, e

    def replicate(self, delta: np.ndarray) -> dict[str, float]:
        """Every spectra.tsv metric of J + Δ: singular values and eigenvalues to first order, SR_k by
        Rayleigh–Ritz, asymmetry exactly (O(d²))."""
        dec, s, k, r = self.dec, self.dec.s, self.k, self.rank
        d32 = np.asarray(delta, dtype=np.float32)
        DV = (d32 @ self.V32).astype(np.float64)  # (d, d) ΔV
        ds = np.einsum("ij,ij->j", self.U32, DV)  # δσ_i = u_iᵀ Δ v_i
        out = {}
        out["cond"] = float(np.exp(np.log(s[0] / s[r - 1]) + ds[0] / s[0] - ds[r - 1] / s[r - 1])) if r else np.nan
        out["erank"] = float(np.exp(self.H + float(self.dH @ ds)))
        e, de = s**2, 2 * s * ds
        se, se2 = float(e.sum()), float(np.sum(e**2))
        out["part_ratio"] = float(se**2 / se2 + np.sum((2 * se / se2 - 2 * se**2 * e / se2**2) * de)) if se2 else np.nan
        J1 = self.J + np.asarray(delta, dtype=np.float64)
        if k == 0:
            out["self_realign"] = np.nan
        elif k >= len(s):
            out["self_realign"] = 1.0
        else:
            # SR_k = tr(P_U P_V)/k: δSR = (2/k) Σ_{i≤k<j} [c^U_ji (UᵀP_V U)_ij + c^V_ji (VᵀP_U V)_ij] while the
            # turns are small; close singular values at σ_k (turns ≳ 0.1): Rayleigh–Ritz instead
            cu, cv = subspace_turns(self.U32[:, k:].T @ DV[:, :k], self.U32[:, :k].T @ DV[:, k:], s)
            if np.all(np.isfinite(cu)) and max(np.abs(cu).max(), np.abs(cv).max()) < 0.1:
                out["self_realign"] = self.sr + float(2.0 / k * np.sum(cu * self.MM + cv * self.NN))
            else:
                Uk, Vk = top_subspaces(J1, self.US + DV[:, : self.m], k)
                out["self_realign"] = float(np.sum((Uk.T @ Vk) ** 2) / k)
        lam = dec.eigvals[self.nz]
        lam1 = self.eigen_perturbation(d32)
        n = len(lam)
        out["frac_expansive"] = float(np.sum(np.abs(lam1) > 1) / n) if n else np.nan
        kap = None if self.kappa is None else self.kappa[self.nz]
        cplx = complex_modes(lam1, self.tol, s[0], kap, eps=self.eps)
        out["frac_complex"] = float(np.sum(cplx) / n) if n else np.nan
        # Henrici H² = 1 − Σ|λ|²/‖J‖²: ‖J+Δ‖² exactly, Σ|λ|² from the first-order eigenvalues
        if self.henrici < self.henrici_exact_below:
            lam_all = np.linalg.eigvals(J1)
            out["henrici"] = henrici_departure(J1, lam_all)
        else:
            fro2 = float(np.sum(J1**2))
            noise = float(np.sum(np.abs(dec.eigvals[~self.nz]) ** 2))
            out["henrici"] = float(np.sqrt(max(0.0, fro2 - float(np.sum(np.abs(lam1) ** 2)) - noise) / fro2))
        out["asymmetry"] = asymmetry(J1)
        return out


def metric_replicates(
    J: np.ndarray,
    deltas: np.ndarray,
    *,
    tol: float,
    sr_k: int = 64,
    dec: Decomposition | None = None,
    method: str = "linear",
) -> dict[str, np.ndarray]:
    """Replicate values of every spectra.tsv metric at J + Δ_k for each deviation Δ_k (K, d, d) -> metric: (K,)."""
    if method not in CI_METHODS:
        raise ValueError(f"spectra.ci_method '{method}' is not one of {', '.join(CI_METHODS)}")
    if not np.any(J):  # J̄ = 0 exactly (Gemma-4's shared-KV attention on one token): no spectrum to perturb
        return {m: np.full(len(deltas), np.nan) for m in spectral_metrics(np.asarray(J, np.float64), tol=tol)}
    dec = decompose(J) if dec is None else dec
    sr_k = sr_dimension(sr_k, numerical_rank(dec.s, tol))  # every replicate measures SR over the same k'
    if method == "exact":
        eps = mode_precision(tol, J.shape[0])
        rows = [spectral_metrics(J + np.asarray(D, np.float64), sr_k=sr_k, tol=tol, eps=eps) for D in deltas]
    else:
        lin = LinearSpectra(np.asarray(J, np.float64), dec, tol, sr_k)
        rows = [lin.replicate(D) for D in deltas]
    return {m: np.array([r[m] for r in rows], dtype=np.float64) for m in rows[0]} if rows else {}


# ---- products: cumulative operators with tangents ----------------------------------------------------
def erank_with_tangents(C: np.ndarray, tangents: np.ndarray | None, floor: float) -> tuple[float, np.ndarray]:
    """erank(C) and its first-order replicate values erank(C + Ċ_k) = exp(H + ⟨Γ, Ċ_k⟩), Γ = U diag(∂H/∂σ) Vᴴ.

    δσ_i = Re u_iᴴ Ċ v_i, so δH = Σ_i ∂H/∂σ_i δσ_i = Re⟨Γ, Ċ⟩: one product for Γ, then O(d²) per replicate.
    """
    if tangents is None or not len(tangents):
        return effective_rank(svdvals(C)), np.empty(0)
    U, s, Vh = svd(C)
    H, grad = entropy_gradient(s, floor)
    keep = grad != 0
    Gam = (U[:, keep] * grad[keep]) @ Vh[keep]  # (d, d)
    dH = np.real(np.einsum("ij,kij->k", Gam.conj(), tangents))  # (K,)
    return float(np.exp(H)), np.exp(H + dH)


class ProductChain:
    """C_n = M_n C_{n−1} composed one step at a time, with tangents Ċ_n = Δ_n C_{n−1} + M_n Ċ_{n−1}.

    ``step(M, Δ)`` (Δ: (K, d, d) deviations of M, one per replicate; None without intervals) returns
    (erank(C_n), log‖C_n‖_F, the K first-order replicate values of erank(C_n)). C is kept in float64 (complex128)
    and renormalised by ‖C_n‖_F every step; the tangents — the size of the sampling perturbation, ≈1e-2 of C —
    in float32 (complex64: rounding ≈1e-7 of them), scaled alike. Memory: C and K tangents, (K+1)·d².
    """

    def __init__(self, floor: float):
        self.floor = floor
        self.C = self.T = None
        self.log_norm = 0.0

    def advance(self, M: np.ndarray, D: np.ndarray | None = None) -> bool:
        """C_n = M C_{n−1} (and the tangents), renormalised; False once C_n vanished or overflowed."""
        M = np.asarray(M)
        M = M.astype(np.result_type(M, np.float64), copy=False)
        if self.C is not None and not np.isfinite(self.log_norm):
            return False
        cplx = np.iscomplexobj(M) or (D is not None and np.iscomplexobj(D)) or np.iscomplexobj(self.C)
        low = np.complex64 if cplx else np.float32
        if self.C is None:
            self.C = M.copy()
            self.T = None if D is None else np.array(D, dtype=low)
        else:
            if D is not None and self.T is not None:
                self.T = np.matmul(np.asarray(D, dtype=low), self.C.astype(low)) + np.matmul(M.astype(low), self.T)
            self.C = M @ self.C  # (d, d)
        nrm = float(np.linalg.norm(self.C))
        if not np.isfinite(nrm) or nrm == 0:
            self.log_norm = float("-inf") if nrm == 0 else float("nan")
            return False
        self.C /= nrm
        if self.T is not None:
            self.T /= nrm
        self.log_norm += float(np.log(nrm))
        return True

    def state(self) -> dict:
        """What a snapshot keeps (``layergeom.resume``): C, the tangents, log‖C‖ and the floor, exactly."""
        return {"floor": self.floor, "C": self.C, "T": self.T, "log_norm": self.log_norm}

    @classmethod
    def from_state(cls, state: dict) -> ProductChain:
        chain = cls(state["floor"])
        chain.C, chain.T, chain.log_norm = state["C"], state["T"], state["log_norm"]
        return chain

    def step(self, M: np.ndarray, D: np.ndarray | None = None) -> tuple[float, float, np.ndarray]:
        """``advance``, then erank(C_n), log‖C_n‖_F and the replicate values of erank(C_n)."""
        if not self.advance(M, D):
            return float("nan"), self.log_norm, np.full(0 if self.T is None else len(self.T), np.nan)
        erank, reps = erank_with_tangents(self.C, self.T, self.floor)
        return erank, self.log_norm, reps


def product_replicates_exact(
    mats: list[np.ndarray], deltas: list[np.ndarray], step: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """Reference: erank of every exact replicate product Π step(J_b + Δ_{b,k}) against depth -> (K, n)."""
    from .cumulative import cumulative_erank

    K = len(deltas[0])
    return np.array([cumulative_erank([step(J + D[k]) for J, D in zip(mats, deltas)], "update")[0] for k in range(K)])
