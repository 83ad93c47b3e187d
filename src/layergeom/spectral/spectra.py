"""Spectral geometry of mean sublayer Jacobians (Paper B, METHODS.md §2.3), in float64.

Each metric is one small function of an eigen- or singular-value decomposition, so the Schur surgery
and the cumulative operators reuse exactly the same formulas. Complex matrices (the Schur-surgery
operators ``Q(Λ+αN)Q*``) are handled with conjugate transposes; for real matrices these are transposes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..names import parse_boundary

METRICS = ["cond", "self_realign", "henrici", "frac_expansive", "frac_complex", "asymmetry", "erank", "part_ratio"]


@dataclass
class Decomposition:
    """Eigenvalues and the SVD J = U diag(s) Vh of one matrix."""

    eigvals: np.ndarray  # (d,) complex
    U: np.ndarray  # (d, d)
    s: np.ndarray  # (d,) descending
    Vh: np.ndarray  # (d, d)


def decompose(J: np.ndarray, eigvals: np.ndarray | None = None) -> Decomposition:
    """Eigenvalues (unless given, e.g. from a Schur form) and the full SVD of J, in float64/complex128."""
    J = np.asarray(J)
    J = J.astype(np.complex128 if np.iscomplexobj(J) else np.float64, copy=False)
    lam = np.linalg.eigvals(J) if eigvals is None else np.asarray(eigvals)
    U, s, Vh = np.linalg.svd(J)
    return Decomposition(lam.astype(np.complex128), U, s, Vh)


def condition_number(s: np.ndarray) -> float:
    """Condition number σ1/σd (inf for a singular matrix)."""
    return float(s[0] / s[-1]) if s[-1] > 0 else float("inf")


def self_realignment(U: np.ndarray, Vh: np.ndarray, k: int) -> float:
    """Self-realignment SR_k = ‖U_kᴴ V_k‖_F² / k of the top-k left and right singular subspaces (k capped at d)."""
    k = min(int(k), U.shape[1])
    overlap = U[:, :k].conj().T @ Vh[:k].conj().T  # (k, k): U_kᴴ V_k
    return float(np.sum(np.abs(overlap) ** 2) / k)


def henrici_departure(J: np.ndarray, eigvals: np.ndarray) -> float:
    """Henrici departure from normality, normalised: sqrt(max(0, ‖J‖_F² − Σ|λ_i|²)) / ‖J‖_F."""
    fro2 = float(np.sum(np.abs(J) ** 2))
    if fro2 == 0:
        return float("nan")
    return float(np.sqrt(max(0.0, fro2 - float(np.sum(np.abs(eigvals) ** 2)))) / np.sqrt(fro2))


def frac_expansive(eigvals: np.ndarray) -> float:
    """Fraction of expansive modes #{|λ| > 1} / d."""
    return float(np.mean(np.abs(eigvals) > 1))


def frac_complex(eigvals: np.ndarray, tol: float = 1e-9) -> float:
    """Fraction of complex eigenvalues #{|Im λ| > tol · max|λ|} / d."""
    scale = float(np.max(np.abs(eigvals))) if len(eigvals) else 0.0
    return float(np.mean(np.abs(eigvals.imag) > tol * scale))


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


def participation_ratio(s: np.ndarray) -> float:
    """Participation ratio (Σσ_i²)² / Σσ_i⁴ of the singular-value energies (eigenvalues of JᴴJ)."""
    e = np.asarray(s, dtype=np.float64) ** 2
    den = float(np.sum(e**2))
    return float(np.sum(e) ** 2 / den) if den > 0 else float("nan")


def spectral_metrics(
    J: np.ndarray, *, sr_k: int = 64, complex_tol: float = 1e-9, dec: Decomposition | None = None
) -> dict[str, float]:
    """Every METHODS §2.3 metric of one matrix (from its decomposition, computed unless given), plus extras."""
    dec = decompose(J) if dec is None else dec
    d = J.shape[0]
    k = min(int(sr_k), d)
    rho = np.abs(dec.eigvals)
    return {
        "cond": condition_number(dec.s),
        "self_realign": self_realignment(dec.U, dec.Vh, k),
        "henrici": henrici_departure(J, dec.eigvals),
        "frac_expansive": frac_expansive(dec.eigvals),
        "frac_complex": frac_complex(dec.eigvals, complex_tol),
        "asymmetry": asymmetry(J),
        "erank": effective_rank(dec.s),
        "part_ratio": participation_ratio(dec.s),
        "sr_k": k,
        "sr_baseline": k / d,
        "fro_norm": float(np.linalg.norm(J)),
        "sigma_max": float(dec.s[0]),
        "sigma_min": float(dec.s[-1]),
        "spectral_radius": float(rho.max()),
        "trace": float(np.real(np.trace(J))),
    }


def spectra_table(
    jacobians: dict[str, np.ndarray],
    n_samples: dict[str, int],
    *,
    sr_k: int = 64,
    complex_tol: float = 1e-9,
    decompositions: dict[str, Decomposition] | None = None,
) -> pd.DataFrame:
    """spectra.tsv: one row per boundary (in the given depth order) with its layer, kind and metrics."""
    decompositions = {} if decompositions is None else decompositions
    rows = []
    for name, J in jacobians.items():
        layer, kind = parse_boundary(name)
        dec = decompositions.get(name) or decompose(J)
        decompositions[name] = dec
        rows.append(
            {
                "boundary": name,
                "layer": layer,
                "kind": kind,
                "n_samples": int(n_samples[name]),
                **spectral_metrics(J, sr_k=sr_k, complex_tol=complex_tol, dec=dec),
            }
        )
    return pd.DataFrame(rows)


def eigenvalue_table(decompositions: dict[str, Decomposition]) -> pd.DataFrame:
    """Long table of the eigenvalues of each J̄_b (boundary, index, real, imag, abs) for the complex-plane figure."""
    frames = []
    for name, dec in decompositions.items():
        lam = dec.eigvals
        order = np.argsort(-np.abs(lam), kind="stable")
        lam = lam[order]
        frames.append(
            pd.DataFrame(
                {"boundary": name, "index": np.arange(len(lam)), "real": lam.real, "imag": lam.imag, "abs": np.abs(lam)}
            )
        )
    return pd.concat(frames, ignore_index=True)
