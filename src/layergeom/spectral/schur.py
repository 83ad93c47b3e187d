"""Schur surgery (Paper B, METHODS.md §2.5): dial the non-normal part of each J̄_b and watch the bottleneck.

Complex Schur ``J̄ = Q (Λ + N) Qᴴ`` (scipy.linalg.schur, ``output='complex'``): Λ the eigenvalues, N strictly
upper triangular, the non-normal part. ``J(α) = Q (Λ + αN) Qᴴ`` keeps the eigenvalues for every α; α=0 is a
normal matrix (Henrici departure 0), α=1 is J̄. Control: a random strictly upper-triangular N' with the same
Frobenius norm as N (complex Gaussian, seeded per boundary). J(α) is generally complex; the metrics use
conjugate transposes. Per-boundary metrics are unitarily invariant, so they are computed on the triangular
``Λ + αN`` directly; the cumulative operators need ``J(α) = J₀ + α·Q N Qᴴ`` in the common basis.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.linalg

from .cumulative import cumulative_erank
from .spectra import Decomposition, spectral_metrics

CONTROLS = ("none", "random")


@dataclass
class SchurForm:
    """J = Q (diag(lam) + N) Qᴴ with N strictly upper triangular."""

    Q: np.ndarray  # (d, d) unitary
    lam: np.ndarray  # (d,) eigenvalues
    N: np.ndarray  # (d, d) strictly upper triangular

    @property
    def normal_part(self) -> np.ndarray:
        """J₀ = Q diag(λ) Qᴴ: the normal matrix with the same eigenvalues and Schur vectors."""
        return (self.Q * self.lam) @ self.Q.conj().T


def schur_form(J: np.ndarray) -> SchurForm:
    """Complex Schur decomposition J = Q (Λ + N) Qᴴ in complex128 (scipy.linalg.schur).

    A real J goes through the real Schur form and scipy.linalg.rsf2csf (a complex Schur form of J, about
    twice as fast as the complex QR iteration that ``schur(output='complex')`` runs on a real input).
    """
    J = np.asarray(J)
    if np.iscomplexobj(J):
        T, Q = scipy.linalg.schur(J.astype(np.complex128), output="complex")
    else:
        T, Q = scipy.linalg.rsf2csf(*scipy.linalg.schur(J.astype(np.float64), output="real"))
    return SchurForm(Q=Q, lam=np.diag(T).copy(), N=np.triu(T, 1))


def random_strict_upper(d: int, fro: float, rng: np.random.Generator) -> np.ndarray:
    """Control: a complex Gaussian strictly upper-triangular d×d matrix rescaled to Frobenius norm `fro`."""
    N = np.triu(rng.standard_normal((d, d)) + 1j * rng.standard_normal((d, d)), 1)
    nrm = np.linalg.norm(N)
    return N * (fro / nrm) if nrm > 0 else N


def schur_interpolate(form: SchurForm, alpha: float, N: np.ndarray | None = None) -> np.ndarray:
    """J(α) = Q (Λ + αN) Qᴴ (N defaults to the matrix's own non-normal part)."""
    N = form.N if N is None else N
    return (form.Q * form.lam) @ form.Q.conj().T + alpha * (form.Q @ N @ form.Q.conj().T)


def schur_surgery(
    jacobians: dict[str, np.ndarray],
    *,
    alphas: Iterable[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
    seed: int = 0,
    variant: str = "update",
    sr_k: int = 64,
    complex_tol: float = 1e-9,
    boundary_metrics: str = "own",
) -> pd.DataFrame:
    """schur.tsv: one row per (alpha, control, depth) with erank of the cumulative J(α) product.

    Extra columns: the variant composed, the boundary at that depth, log ‖C_n‖_F, the ‖N‖_F of the
    boundary and every per-boundary metric of J_b(α), prefixed ``b_`` — for the matrix's own N
    (boundary_metrics ``own``), for the random control too (``all``) or never (``none``; nan).
    """
    if boundary_metrics not in ("own", "all", "none"):
        raise ValueError(f"boundary_metrics must be own, all or none, not '{boundary_metrics}'")
    names = list(jacobians)
    alphas = [float(a) for a in alphas]
    forms = [schur_form(jacobians[n]) for n in names]
    J0 = [f.normal_part for f in forms]  # (d, d) each

    def control_parts(control):
        """Per boundary: the N used and Q N Qᴴ (built one control at a time: d x d complex each)."""
        if control == "none":
            nonnormal = [f.N for f in forms]
            rotated = [np.asarray(jacobians[n], dtype=np.complex128) - J0[i] for i, n in enumerate(names)]
            return nonnormal, rotated  # J - J₀ = Q N Qᴴ up to rounding
        rngs = [np.random.default_rng([seed, i]) for i in range(len(names))]
        nonnormal = [random_strict_upper(len(f.lam), float(np.linalg.norm(f.N)), r) for f, r in zip(forms, rngs)]
        return nonnormal, [f.Q @ N @ f.Q.conj().T for f, N in zip(forms, nonnormal)]

    frames = []
    done: dict[float, pd.DataFrame] = {}
    for control in CONTROLS:
        nonnormal, rotated = control_parts(control)
        for alpha in alphas:
            if alpha == 0 and alpha in done:  # α=0 removes N whichever N it is: the control equals `none`
                frames.append(done[alpha].assign(control=control))
                continue
            mats = (J0[i] + alpha * rotated[i] for i in range(len(names)))  # J_b(α), composed one at a time
            erank, log_norm = cumulative_erank(mats, variant)
            table = pd.DataFrame(
                {
                    "alpha": alpha,
                    "control": control,
                    "depth": np.arange(1, len(names) + 1),
                    "erank": erank,
                    "variant": variant,
                    "boundary": names,
                    "log_norm": log_norm,
                    "nonnormal_fro": [float(np.linalg.norm(N)) for N in nonnormal],
                }
            )
            if boundary_metrics == "all" or (boundary_metrics == "own" and control == "none"):
                rows = []
                for f, N in zip(forms, nonnormal):
                    T = np.diag(f.lam) + alpha * N  # unitarily similar to J_b(α): same metrics
                    U, s, Vh = np.linalg.svd(T)
                    dec = Decomposition(eigvals=f.lam, U=U, s=s, Vh=Vh)
                    m = spectral_metrics(T, sr_k=sr_k, complex_tol=complex_tol, dec=dec)
                    rows.append({f"b_{k}": v for k, v in m.items()})
                table = pd.concat([table, pd.DataFrame(rows)], axis=1)
            if alpha == 0:
                done[alpha] = table
            frames.append(table)
        del nonnormal, rotated
    return pd.concat(frames, ignore_index=True)  # rows without per-boundary metrics get nan there
