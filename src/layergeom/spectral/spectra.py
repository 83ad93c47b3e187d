"""Spectral geometry of mean sublayer Jacobians (Paper B, docs/methods.md §2.3), in float64.

The decompositions (eigenvalues and eigenvectors, the SVD) run through torch on the device a job was given
(``device``: "cpu" or "cuda", one implementation for both; float64/complex128), the metrics on their small
results in numpy. Each metric is one small function of an eigen- or singular-value decomposition, so the Schur surgery
and the cumulative operators reuse exactly the same formulas. Complex matrices (the Schur-surgery
operators ``Q(Λ+αN)Q*``) are handled with conjugate transposes; for real matrices these are transposes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.linalg

from ..linalg import torch_svd
from ..names import parse_boundary

log = logging.getLogger(__name__)

#: the spectra.tsv metrics, each with a confidence interval ({metric}_ci_low, {metric}_ci_high)
METRICS = ["cond", "self_realign", "henrici", "frac_expansive", "frac_complex", "asymmetry", "erank", "part_ratio"]

#: machine epsilon of each Jacobian compute dtype (spectra.dtype)
EPS = {"float32": float(np.finfo(np.float32).eps), "float64": float(np.finfo(np.float64).eps)}

#: c of the mode rule: the rounding E that a J̄ carried at precision ε holds has ‖E‖₂ ≤ c·ε·σ₁ (docs/methods.md,
#: "Mode counts": measured 1.3–1.5 on float32 GQA products at d = 576, tests/test_modes.py)
MODE_C = 4.0


def rank_tolerance(d: int, dtype: str, rank_tol: float | None) -> float:
    """Relative numerical-rank threshold τ: σ_i counts as non-zero when σ_i > τ·σ₁ (`rank_tol` unless None).

    Derived: τ = d · ε with ε the machine epsilon of the Jacobian compute, floored at float32's: the rule of
    ``numpy.linalg.matrix_rank`` (a d-term inner product in precision ε carries an error up to about d·ε of the
    norm of its terms, so an exactly singular direction of J̄ comes out with σ up to ≈ d·ε·σ₁). The floor:
    the activation store holds float32 states and transformers computes RMS/LayerNorms in float32 even in a
    float64 model, so a float64 Jacobian still carries float32 rounding (the GQA attention Jacobians of such
    a model are of exact rank n_kv·d_head only up to ~ε_fp32). E.g. d=576, float32: τ ≈ 6.9e-5.
    """
    if rank_tol is not None:
        return float(rank_tol)
    if dtype not in EPS:
        raise ValueError(f"spectra.dtype '{dtype}' is not one of {', '.join(EPS)}")
    return float(d * max(EPS[dtype], EPS["float32"]))


@dataclass
class Decomposition:
    """Eigenvalues and the SVD J = U diag(s) Vh of one matrix (and unit left/right eigenvectors when computed)."""

    eigvals: np.ndarray  # (d,) complex
    U: np.ndarray  # (d, d)
    s: np.ndarray  # (d,) descending
    Vh: np.ndarray  # (d, d)
    vl: np.ndarray | None = None  # (d, d) left eigenvectors: vl[:, i]ᴴ J = λ_i vl[:, i]ᴴ
    vr: np.ndarray | None = None  # (d, d) right eigenvectors: J vr[:, i] = λ_i vr[:, i]

    @property
    def eig_condition(self) -> np.ndarray | None:
        """Eigenvalue condition numbers κ_i = ‖y_i‖‖x_i‖ / |y_iᴴ x_i| (None without eigenvectors)."""
        if self.vl is None or self.vr is None:
            return None
        return eigen_condition(self.vl, self.vr)


def eigen_condition(vl: np.ndarray, vr: np.ndarray) -> np.ndarray:
    """κ_i = ‖y_i‖‖x_i‖ / |y_iᴴ x_i| of left (y) and right (x) eigenvectors: |δλ_i| ≤ κ_i‖E‖₂ to first order."""
    dots = np.abs(np.sum(vl.conj() * vr, axis=0))  # (d,) |y_iᴴ x_i|
    norms = np.linalg.norm(vl, axis=0) * np.linalg.norm(vr, axis=0)
    with np.errstate(divide="ignore"):
        return np.where(dots > 0, norms / dots, np.inf)


#: left eigenvectors from the inverse of the right ones are kept while their residual ‖yᴴJ − λyᴴ‖/(‖y‖σ₁) is
#: within this many d·ε (a backward-stable geev's own bound is O(d·ε)); beyond it, LAPACK geev's (``eig_vectors``)
LEFT_RESIDUAL = 10.0


def as_tensor(x, device: str, dtype=None):
    """`x` (numpy array or tensor) as a torch tensor on `device` (in `dtype` when given)."""
    import torch

    t = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x))
    return t.to(device=device, dtype=dtype)


def to_numpy(t) -> np.ndarray:
    """A tensor's values as a numpy array on the CPU."""
    return t.detach().resolve_conj().resolve_neg().cpu().numpy()


def _unit_largest_real(X):
    """LAPACK geev's normalisation of eigenvectors (columns): unit 2-norm, the largest component real.

    torch's CPU geev (LAPACK) returns them so already, and they are left bit for bit as they are (the float32
    rounding of the replicates' Δ·[Re x, Im x] depends on them); a column of another norm or whose largest
    component is not real (another solver) is scaled and turned by its phase."""
    import torch

    norm = torch.linalg.vector_norm(X, dim=0)
    X = X / torch.where((norm - 1).abs() <= 64 * EPS["float64"], torch.ones_like(norm), norm)  # unit: as is
    big = X.gather(0, torch.argmax(X.real**2 + X.imag**2, dim=0)[None])[0]  # (d,) the largest components
    turn = big.imag != 0
    if bool(turn.any()):
        phase = torch.where(turn, big.conj() / big.abs(), torch.ones_like(big))
        X = X * phase
    return X


def _real_form(lam, X):
    """(X_r, (upper, lower)) of the eigenvectors X of a real matrix: X_r is LAPACK's real storage of X (a real
    eigenvalue's vector x as is, a complex pair λ, λ̄ at adjacent positions upper, lower = upper + 1 as the
    columns Re x, Im x of λ's x); None unless X is so (real vectors of the real eigenvalues, pairs adjacent
    with conjugate vectors), as real geev gives it."""
    import torch

    up, low = torch.nonzero(lam.imag > 0)[:, 0], torch.nonzero(lam.imag < 0)[:, 0]
    real = lam.imag == 0
    if len(up) != len(low) or not bool(torch.equal(up + 1, low)):
        return None
    if not (bool(torch.equal(lam[low], lam[up].conj())) and bool(torch.equal(X[:, low], X[:, up].conj()))):
        return None
    if not bool((X.imag[:, real] == 0).all()):
        return None
    Xr = X.real.clone()
    Xr[:, low] = X.imag[:, up]
    return Xr, (up, low)


def eig_vectors(Jt, sigma_max: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigenvalues, left and right eigenvectors (λ, vl, vr: unit columns, vl[:, i]ᴴ J = λ_i vl[:, i]ᴴ) of the
    tensor `Jt`, as numpy arrays.

    torch.linalg.eig (LAPACK/cuSOLVER geev) gives the eigenvalues and right eigenvectors X on Jt's device;
    torch has no left eigenvectors, which LAPACK computes from the same Schur form (trevc). Here they are the
    rows of X⁻¹ (Yᴴ X = I; of a real J in real arithmetic from LAPACK's real form of X, so a real eigenvalue's
    left vector is real and a pair's are conjugate, as geev's), exact for exact X but accurate only to about
    cond(X)·ε: they are kept while each one's residual ‖yᴴJ − λyᴴ‖ / (‖y‖σ₁) is within LEFT_RESIDUAL·d·ε
    (LAPACK's own vectors: a few ε). Otherwise (strongly non-normal J, cond(X) ≳ 1/(d·ε)), or when the
    eigenvectors of a real J are not in geev's real form, the whole decomposition is LAPACK geev's (left and
    right) through scipy on the CPU.
    """
    import torch

    d = Jt.shape[0]
    lam, X = torch.linalg.eig(Jt)
    X = _unit_largest_real(X)
    tiny = np.finfo(np.float64).tiny
    if Jt.is_complex():
        Yh, info = torch.linalg.inv_ex(X)  # rows yᵢᴴ
        ok = int(info) == 0 and bool(torch.isfinite(Yh).all())
        if ok:
            Yh = Yh / torch.linalg.vector_norm(Yh, dim=1, keepdim=True)
            eta = float(torch.linalg.vector_norm(Yh @ Jt - lam[:, None] * Yh, dim=1).max())  # ‖yᵢᴴJ − λᵢyᵢᴴ‖
            ok = eta / max(float(sigma_max), tiny) <= LEFT_RESIDUAL * d * EPS["float64"]
    else:
        form = _real_form(lam, X)
        ok = form is not None
        if ok:  # in real arithmetic: yᴴ = A + iB (rows), from the real rows p of X_r⁻¹: x = a ± ib -> (p_a ∓ i p_b)/2
            Xr, (up, low) = form
            P, info = torch.linalg.inv_ex(Xr)
            A, B = P.clone(), torch.zeros_like(P)
            A[up], A[low] = P[up] / 2, P[up] / 2
            B[up], B[low] = -P[low] / 2, P[low] / 2
            ok = int(info) == 0 and bool(torch.isfinite(P).all())
        if ok:
            norm = torch.sqrt(torch.sum(A**2 + B**2, dim=1, keepdim=True))
            A, B = A / norm, B / norm
            lr, li = lam.real[:, None], lam.imag[:, None]
            RA = A @ Jt - lr * A + li * B  # Re and Im of yᵢᴴJ − λᵢyᵢᴴ
            RB = B @ Jt - lr * B - li * A
            eta = float(torch.sqrt(torch.sum(RA**2 + RB**2, dim=1)).max())
            ok = eta / max(float(sigma_max), tiny) <= LEFT_RESIDUAL * d * EPS["float64"]
            Yh = torch.complex(A, B)
    if not ok:
        log.info("eigenvectors of a %dx%d matrix: the left ones from LAPACK geev on the CPU", d, d)
        lam, vl, vr = scipy.linalg.eig(to_numpy(Jt), left=True, right=True, check_finite=False)
        return lam.astype(np.complex128), vl, vr
    return to_numpy(lam), to_numpy(Yh.conj().T), to_numpy(X)


def decompose(
    J: np.ndarray, eigvals: np.ndarray | None = None, vectors: bool = True, *, device: str = "cpu"
) -> Decomposition:
    """Eigenvalues (unless given, e.g. from a Schur form) and the full SVD of J, in float64/complex128, computed
    through torch on `device` (returned as numpy arrays).

    ``vectors`` also keeps the left and right eigenvectors (``eig_vectors``), which give each eigenvalue's
    precision κ_i and the first-order eigenvalue perturbations.
    """
    import torch

    J = np.asarray(J)
    J = J.astype(np.complex128 if np.iscomplexobj(J) else np.float64, copy=False)
    Jt = as_tensor(J, device)
    U, s, Vh = (to_numpy(t) for t in torch_svd(Jt, full_matrices=True))
    vl = vr = None
    if eigvals is not None:
        lam = np.asarray(eigvals)
    elif vectors:
        lam, vl, vr = eig_vectors(Jt, float(s[0]) if len(s) else 0.0)
    else:
        lam = to_numpy(torch.linalg.eigvals(Jt))
    return Decomposition(lam.astype(np.complex128), U, s, Vh, vl, vr)


def numerical_rank(s: np.ndarray, tol: float) -> int:
    """Numerical rank r = #{σ_i > τ·σ₁} (0 for the zero matrix)."""
    s = np.asarray(s)
    return int(np.sum(s > tol * s[0])) if len(s) and s[0] > 0 else 0


def condition_number(s: np.ndarray, rank: int | None = None) -> float:
    """Condition number σ₁/σ_r over the first `rank` singular values (all d by default; inf when σ_r = 0)."""
    r = len(s) if rank is None else int(rank)
    if r < 1:
        return float("nan")
    return float(s[0] / s[r - 1]) if s[r - 1] > 0 else float("inf")


def mode_precision(tol: float, d: int) -> float:
    """The precision ε a J̄ carries, from its rank tolerance τ = d·ε (``rank_tolerance``): ε = τ / d."""
    return float(tol) / max(int(d), 1)


def nonzero_modes(
    eigvals: np.ndarray, tol: float, *, sigma_max: float | None = None, rank: int | None = None
) -> np.ndarray:
    """Mask of the numerically non-zero eigenvalues: the `rank` largest |λ_i| (> 0), else |λ_i| > τ·σ₁.

    A matrix of numerical rank r has d − r eigenvalues that are zero up to rounding and r that are those of
    its compression to its range (``rank`` = r: the r largest |λ|, ties in stored order, LAPACK putting λ
    before its conjugate). Without a rank, relative to σ₁ = `sigma_max` (default max|λ| ≤ σ₁, when only the
    eigenvalues are known). Not relative to max|λ|: where J̄ is strongly non-normal, max|λ| ≪ σ₁ and rounding
    spreads its zero eigenvalues to about κ·εσ₁, far above τ·max|λ|.
    """
    rho = np.abs(np.asarray(eigvals))
    if rank is None:
        ref = (float(rho.max()) if len(rho) else 0.0) if sigma_max is None else float(sigma_max)
        return rho > tol * ref
    keep = np.zeros(len(rho), dtype=bool)
    keep[np.argsort(-rho, kind="stable")[: max(int(rank), 0)]] = True
    return keep & (rho > 0)


def complex_modes(
    eigvals: np.ndarray, tol: float, sigma_max: float, kappa: np.ndarray | None = None, *, eps: float | None = None
) -> np.ndarray:
    """Mask of the eigenvalues that are complex beyond their precision: |Im λ_i| > c · κ_i · ε · σ₁ (c = MODE_C).

    ε is the precision J̄ carries (`eps`; default τ/d from the rank tolerance τ = `tol`, d = len(eigvals)).
    Its rounding E has ‖E‖₂ ≤ c·ε·σ₁ and moves λ_i by at most κ_i‖E‖₂ to first order (κ_i its condition
    number; Wilkinson). A simple real eigenvalue stays exactly real under a real E (LAPACK returns Im = 0);
    only two real eigenvalues closer than their precision can be split into a pair, and for that 2×2 block
    |Im λ|·κ is half the sum of its couplings, so the rule counts the pair complex when its weaker coupling
    exceeds the rounding. Without eigenvectors (κ unknown, e.g. a triangular Schur form) κ_i = 1.
    """
    eigvals = np.asarray(eigvals)
    eps = mode_precision(tol, len(eigvals)) if eps is None else float(eps)
    kappa = 1.0 if kappa is None else np.maximum(np.asarray(kappa), 1.0)
    return np.abs(np.imag(eigvals)) > MODE_C * kappa * eps * float(sigma_max)


def mode_flags(dec: Decomposition, tol: float, eps: float | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """(non-zero mask, complex mask ∧ non-zero, numerical rank r) of one decomposition: the spectra.tsv modes.

    Non-zero: ``nonzero_modes``, the r largest |λ|; complex: ``complex_modes`` with the eigenvalue condition
    numbers; ε = `eps` (default τ/d).
    """
    d = len(dec.eigvals)
    eps = mode_precision(tol, d) if eps is None else float(eps)
    s1 = float(dec.s[0]) if len(dec.s) else 0.0
    r = numerical_rank(dec.s, tol)
    nz = nonzero_modes(dec.eigvals, tol, sigma_max=s1, rank=r)
    cplx = complex_modes(dec.eigvals, tol, s1, dec.eig_condition, eps=eps) & nz
    return nz, cplx, r


def frac_expansive(eigvals: np.ndarray, mask: np.ndarray | None = None) -> float:
    """Fraction of expansive modes #{|λ| > 1} over the eigenvalues in `mask` (all by default)."""
    lam = eigvals if mask is None else eigvals[mask]
    return float(np.mean(np.abs(lam) > 1)) if len(lam) else float("nan")


def frac_complex(
    eigvals: np.ndarray,
    tol: float,
    sigma_max: float | None = None,
    kappa: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    *,
    eps: float | None = None,
) -> float:
    """Fraction of complex eigenvalues (``complex_modes``) among those in `mask` (all by default).

    ``tol`` is the rank tolerance τ (``rank_tolerance``), ``sigma_max`` defaults to max|λ| (when only the
    eigenvalues are known).
    """
    eigvals = np.asarray(eigvals)
    if not len(eigvals):
        return float("nan")
    tol = float(tol)
    smax = float(np.max(np.abs(eigvals))) if sigma_max is None else sigma_max
    cplx = complex_modes(eigvals, tol, smax, kappa, eps=eps)
    if mask is not None:
        cplx = cplx[mask]
    return float(np.mean(cplx)) if len(cplx) else float("nan")


def self_realignment(U: np.ndarray, Vh: np.ndarray, k: int) -> float:
    """Self-realignment SR_k = ‖U_kᴴ V_k‖_F² / k of the top-k left and right singular subspaces (k capped at d;
    nan for k = 0)."""
    k = min(int(k), U.shape[1])
    if k < 1:
        return float("nan")
    overlap = U[:, :k].conj().T @ Vh[:k].conj().T  # (k, k): U_kᴴ V_k
    return float(np.sum(np.abs(overlap) ** 2) / k)


def sr_dimension(sr_k: int, rank: int) -> int:
    """k' = min(k, r): SR_k over the numerically non-zero singular directions only (0 at rank 0: SR is nan)."""
    return max(0, min(int(sr_k), int(rank)))


def henrici_departure(J: np.ndarray, eigvals: np.ndarray) -> float:
    """Henrici departure from normality, normalised: sqrt(max(0, ‖J‖_F² − Σ|λ_i|²)) / ‖J‖_F."""
    fro2 = float(np.sum(np.abs(J) ** 2))
    if fro2 == 0:
        return float("nan")
    return float(np.sqrt(max(0.0, fro2 - float(np.sum(np.abs(eigvals) ** 2)))) / np.sqrt(fro2))


def asymmetry(J: np.ndarray) -> float:
    """Asymmetry ‖J − Jᴴ‖_F / (2‖J‖_F): 0 for symmetric (Hermitian), 1 for antisymmetric matrices."""
    fro = np.linalg.norm(J)
    return float(np.linalg.norm(J - J.conj().T) / (2 * fro)) if fro > 0 else float("nan")


def effective_rank(s: np.ndarray) -> float:
    """Effective rank exp(H(p)), p_i = σ_i / Σσ (Roy & Vetterli 2007)."""
    total = float(np.sum(s))
    if total <= 0:
        return float("nan")
    p = s[s > 0] / total
    return float(np.exp(-np.sum(p * np.log(p))))


def entropy_gradient(s: np.ndarray, floor: float) -> tuple[float, np.ndarray]:
    """H = −Σ p log p (p_i = σ_i/Σσ; erank = exp H) and ∂H/∂σ_i = −(log p_i + H)/Σσ on σ_i > floor·σ₁ (0
    elsewhere).

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


def participation_ratio(s: np.ndarray) -> float:
    """Participation ratio (Σσ_i²)² / Σσ_i⁴ of the singular-value energies (eigenvalues of JᴴJ)."""
    e = np.asarray(s, dtype=np.float64) ** 2
    den = float(np.sum(e**2))
    return float(np.sum(e) ** 2 / den) if den > 0 else float("nan")


def spectral_metrics(
    J: np.ndarray,
    *,
    sr_k: int,
    tol: float,
    dec: Decomposition | None = None,
    eps: float | None = None,
    device: str = "cpu",
) -> dict[str, float]:
    """Every METHODS §2.3 metric of one matrix (from its decomposition, computed unless given), plus extras.

    τ = `tol` (``rank_tolerance``) sets the numerical rank r = #{σ_i > τσ₁} and the numerically
    non-zero eigenvalues (``mode_flags``: the r largest |λ_i|); cond = σ₁/σ_r and the complex and
    expansive fractions count over those modes (``cond_full``, ``frac_complex_d``, ``frac_expansive_d``: the
    same over all d, σ₁/σ_d (∞ where r < d: σ_d is rounding) and counts / d). A complex eigenvalue is one
    with |Im λ| beyond its precision (``complex_modes``, ε = `eps`, default τ/d). SR_k uses k' = min(k, r) (``sr_dimension``; nan at r = 0).
    The decomposition (unless given) is computed on `device` (``decompose``).
    """
    dec = decompose(J, device=device) if dec is None else dec
    d = J.shape[0]
    tol = float(tol)
    rho = np.abs(dec.eigvals)
    nz, cplx, r = mode_flags(dec, tol, eps)
    k = sr_dimension(sr_k, r)
    n_modes = int(nz.sum())
    expa = (rho > 1) & nz
    per_mode = (lambda c: float(c.sum() / n_modes)) if n_modes else (lambda c: float("nan"))
    return {
        "numerical_rank": r,
        "cond": condition_number(dec.s, r),
        "self_realign": self_realignment(dec.U, dec.Vh, k),
        "henrici": henrici_departure(J, dec.eigvals),
        "frac_expansive": per_mode(expa),
        "frac_complex": per_mode(cplx),
        "asymmetry": asymmetry(J),
        "erank": effective_rank(dec.s),
        "part_ratio": participation_ratio(dec.s),
        "n_modes": n_modes,
        # σ₁/σ_d where σ_d is numerically non-zero (r = d: then it is cond); a numerically singular J̄'s σ_d is
        # rounding, which float32 storage of J̄ alone moves by orders of magnitude: ∞, a function of J̄
        "cond_full": condition_number(dec.s) if r == d else float("inf"),
        "frac_expansive_d": float(expa.sum() / d),
        "frac_complex_d": float(cplx.sum() / d),
        "frac_complex_max": per_mode(nz & (np.imag(dec.eigvals) != 0)),
        "rank_tol": tol,
        "sr_k": k,
        "sr_baseline": k / d if k else float("nan"),
        "fro_norm": float(np.linalg.norm(J)),
        "sigma_max": float(dec.s[0]),
        "sigma_min": float(dec.s[-1]),
        "spectral_radius": float(rho.max()),
        "trace": float(np.real(np.trace(J))),
    }


def spectra_row(
    name: str,
    J: np.ndarray,
    n_samples: int,
    *,
    sr_k: int,
    tol: float,
    dec: Decomposition | None = None,
    device: str = "cpu",
) -> tuple[dict, Decomposition]:
    """One spectra.tsv row without its intervals: boundary, layer, kind, n_samples and the metrics, and the
    decomposition (with eigenvectors: the intervals' ``linear.spectra_intervals`` reuses it), computed on
    `device`."""
    layer, kind = parse_boundary(name)
    J = np.asarray(J, dtype=np.float64)
    dec = decompose(J, device=device) if dec is None else dec
    m = spectral_metrics(J, sr_k=sr_k, tol=float(tol), dec=dec)
    return {"boundary": name, "layer": layer, "kind": kind, "n_samples": int(n_samples), **m}, dec


def order_columns(table: pd.DataFrame) -> pd.DataFrame:
    """spectra.tsv column order: keys, numerical rank, the metrics, their intervals, then the extras."""
    first = ["boundary", "layer", "kind", "n_samples", "numerical_rank", *METRICS]
    cis = [f"{m}_ci_{s}" for m in METRICS for s in ("low", "high") if f"{m}_ci_{s}" in table]
    rest = [c for c in table.columns if c not in first and c not in cis]
    return table[first + cis + rest]


def eigenvalue_frame(name: str, item, tol: float) -> pd.DataFrame:
    """The eigenvalues of one J̄_b by decreasing |λ| (boundary, index, real, imag, abs; from a Decomposition
    also ``nonzero`` and ``complex``, the mode flags of the spectra table, with threshold `tol`)."""
    lam = item.eigvals if isinstance(item, Decomposition) else np.asarray(item)
    order = np.argsort(-np.abs(lam), kind="stable")
    cols = {"boundary": name, "index": np.arange(len(lam)), "real": lam.real[order], "imag": lam.imag[order]}
    cols["abs"] = np.abs(lam)[order]
    if isinstance(item, Decomposition):
        nz, cplx, _ = mode_flags(item, float(tol))
        cols["nonzero"] = nz[order]
        cols["complex"] = cplx[order]
    return pd.DataFrame(cols)
