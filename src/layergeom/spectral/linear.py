"""Linearised spectra: the jackknife replicates of one J̄_b's spectra.tsv metrics to first order
(docs/methods.md §2.7; the scheme and its cost are described in ``intervals``).

θ_(−k) ≈ θ̂ + Dθ[Δ_k] from the full-sample decomposition: the SVD gives δσ_i = u_iᵀΔv_i (cond, erank,
participation ratio) and the first-order turns of the top-k singular subspaces (SR_k), the eigenvectors give
δλ_i = y_iᴴΔx_i / y_iᴴx_i (mode fractions, Henrici departure), with the 2×2 quasi-degenerate blocks of modes
near the real axis (:meth:`EigenTangents.perturbed`). :class:`LinearSpectra` holds what these need, built once
per boundary; :func:`metric_replicates` evaluates every replicate (``method="exact"``: from scratch instead),
:func:`spectra_intervals` turns them into spectra.tsv's interval columns.

Every d×d×d product of a replicate (ΔV, Δ·[Re x, Im x], the subspace turns, Rayleigh–Ritz) runs through torch on
the job's device (``device``, in the float32/float64 of each product); what is O(d) or O(d²) per replicate (the
first-order eigenvalues and their 2×2 blocks, the mode counts) runs in numpy on the results moved back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..linalg import torch_svd
from .intervals import metric_interval
from .spectra import (
    METRICS,
    Decomposition,
    as_tensor,
    complex_modes,
    decompose,
    entropy_gradient,
    mode_flags,
    mode_precision,
    numerical_rank,
    self_realignment,
    spectral_metrics,
    sr_dimension,
    to_numpy,
)

CI_METHODS = ("linear", "exact")
#: below this Henrici departure its replicates are exact (a norm-like quantity is not differentiable at 0)
HENRICI_EXACT_BELOW = 0.1


def subspace_turns(A_lo, A_up, s):
    """First-order turns of the top-k singular subspaces of a real J under J -> J + Δ, A = UᵀΔV.

    The left subspace turns by c^U_ji = (σ_i A_ji + σ_j A_ij)/(σ_i² − σ_j²) towards u_j (i ≤ k < j), the right
    one by c^V_ji = (σ_i A_ij + σ_j A_ji)/(σ_i² − σ_j²) (turns inside a subspace leave its projector alone).
    A_lo = A[k:, :k], A_up = A[:k, k:] and s: torch tensors (or all numpy arrays); returns (c^U, c^V), each
    (k, d−k) indexed [i, j].
    """
    k = A_up.shape[0]
    si, sj = s[:k, None], s[None, k:]  # (k, 1), (1, d-k)
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = si**2 - sj**2  # (k, d-k)
        a_ji = A_lo.T  # (k, d-k): A_ji with i ≤ k < j, indexed [i, j]
        return (si * a_ji + sj * A_up) / gap, (si * A_up + sj * a_ji) / gap


def top_subspaces(J1, JV, k: int):
    """Top-k left and right singular vectors of J1 from a starting subspace: JV = J1 V_m (d, m), m ≥ 2k (torch
    tensors, float64; returns tensors).

    With V_m the top-m right singular vectors of a nearby matrix, one power iteration and a Rayleigh–Ritz
    projection (randomised SVD with q = 1, Halko et al. 2011) recover the top-k pairs of J1 to a few per cent
    of a sampling-size perturbation, and stay valid when singular values near σ_k are close or tie, where a
    perturbation series divides by their gaps.
    """
    import torch

    Qy, _ = torch.linalg.qr(JV)  # (d, m)
    Z, _ = torch.linalg.qr(J1.T @ Qy)  # (d, m)
    Qy, _ = torch.linalg.qr(J1 @ Z)
    Ub, _, Vbh = torch_svd(Qy.T @ J1, full_matrices=False)  # (m, d) projected problem
    return Qy @ Ub[:, :k], Vbh[:k].T


@dataclass
class SingularTangents:
    """What the first-order cond, erank, participation ratio and SR_k of J + Δ need from J's SVD (the d×d
    factors as torch tensors on the device)."""

    s: np.ndarray  # (d,) σ, descending
    Ur: object  # (d, d) tensor: U rounded to float32, held in float64 (its products with ΔV are float64)
    V32: object  # (d, d) float32 tensor V
    rank: int  # numerical rank r
    k: int  # SR over k' = min(k, r), as spectral_metrics
    m: int  # width of the Rayleigh–Ritz subspace for SR_k (2k')
    US: object  # (d, m) tensor = J V_m
    MM: object | None  # (k, d-k) tensor (Uᵀ V_k)[:k] (Uᵀ V_k)[k:]ᵀ (None unless 0 < k < d)
    NN: object | None  # (k, d-k) the same of Vᵀ U_k
    sr: float  # SR_k of J
    H: float  # entropy of σ (erank = exp H)
    dH: np.ndarray  # (d,) ∂H/∂σ
    s_t: object = None  # (d,) σ as a float64 tensor

    @classmethod
    def of(cls, dec: Decomposition, tol: float, sr_k: int, *, device: str = "cpu") -> SingularTangents:
        import torch

        d = len(dec.s)
        rank = numerical_rank(dec.s, tol)
        k = sr_dimension(sr_k, rank)
        m = min(d, 2 * k)
        U, Vh = as_tensor(dec.U, device), as_tensor(dec.Vh, device)
        MM = NN = None
        if 0 < k < d:
            M = U.T @ Vh[:k].T  # (d, k) = Uᵀ V_k
            Mp = Vh @ U[:, :k]  # (d, k) = Vᵀ U_k
            MM, NN = M[:k] @ M[k:].T, Mp[:k] @ Mp[k:].T
        H, dH = entropy_gradient(dec.s, tol)
        s_t = as_tensor(dec.s, device)
        return cls(s=dec.s, Ur=U.to(torch.float32).to(torch.float64), V32=Vh.T.contiguous().to(torch.float32),
                   rank=rank, k=k, m=m, US=U[:, :m] * s_t[:m], MM=MM, NN=NN,
                   sr=self_realignment(dec.U, dec.Vh, k), H=H, dH=dH, s_t=s_t)  # fmt: skip

    def singular_shifts(self, d32) -> tuple[object, np.ndarray]:
        """(ΔV (d, d) float64 tensor, δσ_i = u_iᵀ Δ v_i as numpy) of a float32 deviation Δ (tensor or array)."""
        import torch

        DV = (as_tensor(d32, self.V32.device, torch.float32) @ self.V32).to(torch.float64)  # (d, d) ΔV
        return DV, to_numpy(torch.sum(self.Ur * DV, dim=0))

    def cond(self, ds: np.ndarray) -> float:
        s, r = self.s, self.rank
        return float(np.exp(np.log(s[0] / s[r - 1]) + ds[0] / s[0] - ds[r - 1] / s[r - 1])) if r else np.nan

    def erank(self, ds: np.ndarray) -> float:
        return float(np.exp(self.H + float(self.dH @ ds)))

    def part_ratio(self, ds: np.ndarray) -> float:
        s = self.s
        e, de = s**2, 2 * s * ds
        se, se2 = float(e.sum()), float(np.sum(e**2))
        return float(se**2 / se2 + np.sum((2 * se / se2 - 2 * se**2 * e / se2**2) * de)) if se2 else np.nan

    def self_realign(self, J1, DV) -> float:
        """SR_k of J1 = J + Δ: SR_k = tr(P_U P_V)/k, δSR = (2/k) Σ_{i≤k<j} [c^U_ji (UᵀP_V U)_ij + c^V_ji (VᵀP_U V)_ij]
        while the turns are small; close singular values at σ_k (turns ≳ 0.1): Rayleigh–Ritz instead. J1 and ΔV:
        float64 tensors on the device."""
        import torch

        k = self.k
        if k == 0:
            return np.nan
        if k >= len(self.s):
            return 1.0
        cu, cv = subspace_turns(self.Ur[:, k:].T @ DV[:, :k], self.Ur[:, :k].T @ DV[:, k:], self.s_t)
        if bool(torch.isfinite(cu).all()) and max(float(cu.abs().max()), float(cv.abs().max())) < 0.1:
            return self.sr + float(2.0 / k * torch.sum(cu * self.MM + cv * self.NN))
        Uk, Vk = top_subspaces(J1, self.US + DV[:, : self.m], k)
        return float(torch.sum((Uk.T @ Vk) ** 2) / k)


@dataclass
class EigenTangents:
    """What the first-order eigenvalues of J + Δ need: the non-zero modes and their left/right eigenvectors."""

    lam: np.ndarray  # (d,) J's eigenvalues
    nz: np.ndarray  # (d,) mask of the numerically non-zero modes (spectra.mode_flags)
    upper: np.ndarray  # (d,) nz and Im λ ≥ 0: one of each conjugate pair
    kappa: np.ndarray | None  # (d,) eigenvalue condition numbers
    eps: float  # the precision J carries (τ/d)
    x32: np.ndarray  # (d, 2r') float32 [Re x, Im x] of the upper modes' right eigenvectors
    yc: np.ndarray  # (d, r') conjugated left eigenvectors
    ydotx: np.ndarray  # (r',) y_iᴴ x_i
    pair: np.ndarray  # (pairs,) the upper modes that are the first of a complex pair (λ, conj λ adjacent)
    y_pair: np.ndarray  # (d, pairs) their left eigenvectors y (not conjugated), contiguous
    x32_t: object = None  # x32 as a tensor on the device (``tangent``'s product)

    @classmethod
    def of(cls, dec: Decomposition, tol: float, *, device: str = "cpu") -> EigenTangents:
        eps = mode_precision(tol, len(dec.eigvals))
        nz, _, _ = mode_flags(dec, tol, eps)
        lam = dec.eigvals
        upper = nz & (lam.imag >= 0)
        x, y = dec.vr[:, upper], dec.vl[:, upper]  # (d, r') right / left eigenvectors
        yc = y.conj()
        pos = np.flatnonzero(upper)  # position in lam of each upper mode
        pair = np.flatnonzero((lam[upper].imag > 0) & np.isin(pos + 1, np.flatnonzero(nz & (lam.imag < 0))))
        x32 = np.concatenate([x.real, x.imag], axis=1).astype(np.float32)
        return cls(lam=lam, nz=nz, upper=upper, kappa=dec.eig_condition, eps=eps, x32=x32, yc=yc,
                   ydotx=np.sum(yc * x, axis=0), pair=pair, y_pair=np.ascontiguousarray(y[:, pair]),
                   x32_t=as_tensor(x32, device))  # fmt: skip

    def tangent(self, delta32) -> np.ndarray:
        """Δ x_i (d, r') complex128 of the upper modes: one float32 product Δ·[Re x, Im x] (d × d × 2r', on the
        device; Δ a float32 tensor or array).

        The zero Im x columns of the real modes stay in: float32 GEMM rounding depends on the number of
        columns (OpenBLAS), and dropping them would move the replicates' eigenvalues by ~1e-7 relative."""
        import torch

        r = int(self.upper.sum())
        DX = to_numpy(as_tensor(delta32, self.x32_t.device, torch.float32) @ self.x32_t)  # (d, 2r') float32
        DXc = np.empty((DX.shape[0], r), dtype=np.complex128)
        DXc.real, DXc.imag = DX[:, :r], DX[:, r:]
        return DXc

    def coupling(self, DXc: np.ndarray, p: int, q: int) -> complex:
        """a_pq = y_pᴴ Δ x_q / y_pᴴ x_p, one entry of the projected Δ (upper-mode indices)."""
        return complex(self.yc[:, p] @ DXc[:, q] / self.ydotx[p])

    def perturbed(self, DXc: np.ndarray) -> np.ndarray:
        """The non-zero modes' eigenvalues of J + Δ (in the order of lam[nz]), to leading order.

        First order: δλ_i = y_iᴴ Δ x_i / y_iᴴ x_i. Where Δ can move a mode across the real axis, the first
        order is replaced by the eigenvalues of the 2×2 quasi-degenerate block [[λ_i + a_ii, a_ij],
        [a_ji, λ_j + a_jj]], a_pq = y_pᴴ Δ x_q / y_pᴴ x_p (Δ projected on the two modes in their biorthogonal
        basis): close real eigenvalues, paired with their nearest real neighbour (greedily, smallest gap first),
        may collide into a complex pair (``real_pair_collisions``); a complex pair near the axis, whose block is
        [[μ, a], [ā, μ̄]] for a real Δ, becomes two real eigenvalues Re μ ± √(|a|² − (Im μ)²) when |a| > |Im μ|.
        Only the diagonal a_ii, these 2×2 entries and a of the pairs are formed (from DXc = Δ x of the upper
        modes, ``tangent``), never the whole r'×r' matrix.
        """
        lam = self.lam
        new = lam[self.upper] + np.einsum("ji,ji->i", self.yc, DXc) / self.ydotx  # λ_i + a_ii
        full = np.zeros(len(lam), dtype=np.complex128)
        full[self.upper] = new
        lower = self.nz & (lam.imag < 0)  # the conjugates of complex pairs: LAPACK stores λ, conj(λ) adjacent
        idx = np.flatnonzero(lower)
        full[idx] = np.conj(full[idx - 1])
        pos = np.flatnonzero(self.upper)  # position in lam of each upper mode
        for i, j, e in self.real_pair_collisions(DXc, new):
            full[pos[i]], full[pos[j]] = e
        # complex pairs: a = y_iᴴ Δ x̄_i / y_iᴴ x_i (Δ x̄ = conj(Δ x) for a real Δ), = conj(Σ_j y_ji (Δ x_i)_j)
        pair = self.pair
        a = np.conj(np.einsum("ji,ji->i", self.y_pair, DXc[:, pair])) / self.ydotx[pair]  # (pairs,)
        disc = np.abs(a) ** 2 - new[pair].imag ** 2
        for p, dd in zip(pair[disc > 0], disc[disc > 0]):
            full[pos[p]], full[pos[p] + 1] = new[p].real + np.sqrt(dd), new[p].real - np.sqrt(dd)
        return full[self.nz]

    def real_pair_collisions(self, DXc: np.ndarray, new: np.ndarray):
        """(i, j, eigenvalues) for the pairs of neighbouring real modes whose 2×2 block has complex eigenvalues
        (a_ij, a_ji of each pair visited computed from DXc = Δ x)."""
        lam = self.lam[self.upper]
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
            block = [[new[i], self.coupling(DXc, i, j)], [self.coupling(DXc, j, i), new[j]]]
            e = np.linalg.eigvals(np.array(block))
            if np.iscomplexobj(e) and np.abs(e.imag).max() > 0:
                used[a] = used[b] = True
                yield i, j, e

    def mode_fractions(self, lam1: np.ndarray, tol: float, sigma_max: float) -> tuple[float, float]:
        """(frac_expansive, frac_complex) of the perturbed non-zero modes, with the point estimate's rules."""
        n = int(self.nz.sum())
        kap = None if self.kappa is None else self.kappa[self.nz]
        cplx = complex_modes(lam1, tol, sigma_max, kap, eps=self.eps)
        expa = float(np.sum(np.abs(lam1) > 1) / n) if n else np.nan
        return expa, (float(np.sum(cplx) / n) if n else np.nan)


@dataclass
class LinearSpectra:
    """The first-order replicates of one matrix's metrics, from its full-sample decomposition (with vectors)."""

    J: np.ndarray
    dec: Decomposition
    tol: float
    sr_k: int
    device: str = "cpu"

    def __post_init__(self):
        if self.dec.vl is None or self.dec.vr is None:
            raise ValueError("linearised intervals need the eigenvectors: decompose(J, vectors=True)")
        self.singular = SingularTangents.of(self.dec, self.tol, self.sr_k, device=self.device)
        self.eigen = EigenTangents.of(self.dec, self.tol, device=self.device)
        self.J_t = as_tensor(np.asarray(self.J, np.float64), self.device)
        self.fro2 = float(np.sum(self.J**2))
        lam = self.dec.eigvals
        self.henrici = float(np.sqrt(max(0.0, self.fro2 - float(np.sum(np.abs(lam) ** 2))) / self.fro2))

    def henrici_replicate(self, J1, lam1: np.ndarray) -> float:
        """Henrici H² = 1 − Σ|λ|²/‖J‖²: ‖J+Δ‖² exactly, Σ|λ|² from the first-order eigenvalues (exact below
        HENRICI_EXACT_BELOW; J1 a float64 tensor on the device)."""
        import torch

        fro2 = float(torch.sum(J1**2))
        if self.henrici < HENRICI_EXACT_BELOW:
            lam = to_numpy(torch.linalg.eigvals(J1))
            return float(np.sqrt(max(0.0, fro2 - float(np.sum(np.abs(lam) ** 2)))) / np.sqrt(fro2)) if fro2 else np.nan
        noise = float(np.sum(np.abs(self.dec.eigvals[~self.eigen.nz]) ** 2))
        return float(np.sqrt(max(0.0, fro2 - float(np.sum(np.abs(lam1) ** 2)) - noise) / fro2))

    def replicate(self, delta: np.ndarray) -> dict[str, float]:
        """Every spectra.tsv metric of J + Δ: singular values and eigenvalues to first order, SR_k by
        Rayleigh–Ritz, asymmetry exactly (O(d²))."""
        import torch

        sv = self.singular
        delta = np.asarray(delta)
        d32 = as_tensor(delta.astype(np.float32, copy=False), self.device)
        D64 = d32.to(torch.float64) if delta.dtype == np.float32 else as_tensor(delta, self.device, torch.float64)
        DV, ds = sv.singular_shifts(d32)
        J1 = self.J_t + D64
        lam1 = self.eigen.perturbed(self.eigen.tangent(d32))
        expa, cplx = self.eigen.mode_fractions(lam1, self.tol, sv.s[0])
        fro = float(torch.linalg.matrix_norm(J1))
        return {
            "cond": sv.cond(ds),
            "erank": sv.erank(ds),
            "part_ratio": sv.part_ratio(ds),
            "self_realign": sv.self_realign(J1, DV),
            "frac_expansive": expa,
            "frac_complex": cplx,
            "henrici": self.henrici_replicate(J1, lam1),
            "asymmetry": float(torch.linalg.matrix_norm(J1 - J1.T) / (2 * fro)) if fro > 0 else np.nan,
        }


def metric_replicates(
    J: np.ndarray,
    deltas: np.ndarray,
    *,
    tol: float,
    sr_k: int,
    method: str,
    dec: Decomposition | None = None,
    device: str = "cpu",
) -> dict[str, np.ndarray]:
    """Replicate values of every spectra.tsv metric at J + Δ_k for each deviation Δ_k (K, d, d) -> metric: (K,),
    computed through torch on `device` (the decomposition too, unless given)."""
    if method not in CI_METHODS:
        raise ValueError(f"spectra.ci_method '{method}' is not one of {', '.join(CI_METHODS)}")
    if not np.any(J):  # J̄ = 0 exactly (Gemma-4's shared-KV attention on one token): no spectrum to perturb
        zero = spectral_metrics(np.asarray(J, np.float64), sr_k=sr_k, tol=tol)
        return {m: np.full(len(deltas), np.nan) for m in zero}
    dec = decompose(J, device=device) if dec is None else dec
    sr_k = sr_dimension(sr_k, numerical_rank(dec.s, tol))  # every replicate measures SR over the same k'
    if method == "exact":
        eps = mode_precision(tol, J.shape[0])
        rows = [spectral_metrics(J + np.asarray(D, np.float64), sr_k=sr_k, tol=tol, eps=eps, device=device)
                for D in deltas]  # fmt: skip
    else:
        lin = LinearSpectra(np.asarray(J, np.float64), dec, tol, sr_k, device)
        rows = [lin.replicate(D) for D in deltas]
    return {m: np.array([r[m] for r in rows], dtype=np.float64) for m in rows[0]} if rows else {}


def spectra_intervals(
    J: np.ndarray, dec: Decomposition, point: dict, deltas: np.ndarray, weights: np.ndarray, *, tol: float,
    ci_level: float, ci_method: str, device: str = "cpu",
) -> dict:  # fmt: skip
    """spectra.tsv's interval columns of one boundary: ``{metric}_ci_low``/``_ci_high`` of every metric of
    ``point`` (its ``spectral_metrics``) from the replicates' deviations Δ_k (K, d, d) and weights, and
    ``ci_replicates``. The replicates measure the same statistic: SR over the point estimate's k' = min(k, r).
    The replicates' products run on `device` (``metric_replicates``)."""
    reps = metric_replicates(J, deltas, tol=tol, sr_k=point["sr_k"], dec=dec, method=ci_method, device=device)
    out = {}
    for metric in METRICS:
        out[f"{metric}_ci_low"], out[f"{metric}_ci_high"] = metric_interval(
            metric, point[metric], reps[metric], weights, ci_level
        )
    out["ci_replicates"] = len(deltas)
    return out
