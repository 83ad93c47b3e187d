"""Cumulative operators through depth (Paper B, docs/methods.md §2.4): the bottleneck of the composed dynamics.

``C_n = M_{b_n} ⋯ M_{b_1}`` with ``M_b = J̄_b`` (variant ``update``) or ``M_b = I + J̄_b`` (variant ``full``,
the residual map), composed in depth order in float64 (complex128 for Schur-surgery operators) and
renormalised by ‖C_n‖_F after every step, so deep products neither overflow nor underflow; the effective
rank is scale-free, and the log of the dropped norms is kept as ``log_norm``.

A product carries the first-order tangents of the jackknife replicates (:class:`ProductChain`, ``intervals``):
the cumulative table, the Schur surgery and the convergence table compose their products with it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from ..linalg import svd, svdvals
from ..resume import NO_SNAPSHOTS, Snapshots
from .intervals import jackknife_interval
from .spectra import effective_rank, entropy_gradient

VARIANTS = ("update", "full")


def step_operator(J: np.ndarray, variant: str) -> np.ndarray:
    """The one-boundary map composed at each step: J̄_b (`update`) or I + J̄_b (`full`)."""
    if variant == "update":
        return J
    if variant == "full":
        return J + np.eye(J.shape[0], dtype=J.dtype)
    raise ValueError(f"unknown cumulative variant '{variant}'; known: {', '.join(VARIANTS)}")


def tangent_floor(d: int) -> float:
    """Singular values of C_n below this fraction of σ₁ are held fixed in the erank tangent (float32 tangents)."""
    return d * float(np.finfo(np.float32).eps)


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


def cumulative_rows(
    steps: Iterable[tuple[str, np.ndarray, np.ndarray | None]],
    variants: Iterable[str] = VARIANTS,
    *,
    weights: np.ndarray | None = None,
    ci_level: float,
    snapshots: Snapshots = NO_SNAPSHOTS,
) -> pd.DataFrame:
    """cumulative.tsv from boundaries streamed in depth order: (name, J̄_b, Δ_b) with Δ_b (K, d, d) the
    replicates' deviations of J̄_b (None: no intervals); every variant composed in one pass.

    Each replicate is the same delete-one-group draw at every boundary, so its product is a consistent
    replicate of C_n; erank_ci_low/high are jackknife intervals (``intervals``) on the log scale.
    ``snapshots`` (``layergeom.resume.Snapshots``; default none) resumes after its last snapshot (the steps
    it covers are skipped unread: they may be (name, None, None)) and saves the products as it goes.
    """
    variants = list(variants)
    for v in variants:
        step_operator(np.zeros((1, 1)), v)  # validates the name
    chains = {v: None for v in variants}
    rows = []
    last = snapshots.load()
    if last is not None:
        rows = last["state"]["rows"]
        chains = {v: None if s is None else ProductChain.from_state(s) for v, s in last["state"]["chains"].items()}
    for depth, (name, J, D) in enumerate(steps, start=1):
        if last is not None and depth <= last["done"]:
            continue
        J = np.asarray(J, dtype=np.float64)
        for v in variants:
            if chains[v] is None:
                chains[v] = ProductChain(tangent_floor(J.shape[0]))
            erank, log_norm, reps = chains[v].step(step_operator(J, v), D)
            row = {"variant": v, "depth": depth, "boundary": name, "erank": erank}
            if D is not None:
                row["erank_ci_low"], row["erank_ci_high"] = jackknife_interval(erank, reps, weights, ci_level, "log")
            row["log_norm"] = log_norm
            rows.append(row)
        snapshots.save(depth, lambda: {"rows": rows, "chains": {v: c and c.state() for v, c in chains.items()}})
    table = pd.DataFrame(rows)
    order = {v: i for i, v in enumerate(variants)}
    return table.sort_values(["variant", "depth"], key=lambda c: c.map(order) if c.name == "variant" else c,
                             kind="stable").reset_index(drop=True)  # fmt: skip
