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
import torch

from ..linalg import certified_svd, torch_svd, torch_svdvals
from ..resume.snapshots import NO_SNAPSHOTS, Snapshots
from .intervals import jackknife_interval
from .spectra import effective_rank, entropy_gradient

VARIANTS = ("update", "full")


def as_tensor(x, device: str = "cpu", dtype: torch.dtype | None = None) -> torch.Tensor:
    """A numpy array (a memmap too) or a tensor as a tensor on `device` (in `dtype`, else its own).

    A writable numpy array already in `dtype` is shared on the CPU, not copied: callers that change the result
    in place copy it first."""
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=dtype)
    a = np.asarray(x)
    if dtype is not None:
        a = a.astype(torch.empty(0, dtype=dtype).numpy().dtype, copy=False)
    if not a.flags.writeable:  # a read-only memmap: torch shares no read-only memory
        a = np.array(a)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def step_operator(J, variant: str):
    """The one-boundary map composed at each step: J̄_b (`update`) or I + J̄_b (`full`); numpy or torch."""
    if variant == "update":
        return J
    if variant == "full":
        if isinstance(J, torch.Tensor):
            return J + torch.eye(J.shape[0], dtype=J.dtype, device=J.device)
        return J + np.eye(J.shape[0], dtype=J.dtype)
    raise ValueError(f"unknown cumulative variant '{variant}'; known: {', '.join(VARIANTS)}")


def tangent_floor(d: int) -> float:
    """Singular values of C_n below this fraction of σ₁ are held fixed in the erank tangent (float32 tangents)."""
    return d * float(np.finfo(np.float32).eps)


def _wide(dtype: torch.dtype) -> torch.dtype:
    """float64 or complex128: the precision C is kept in."""
    return torch.complex128 if dtype.is_complex else torch.float64


def erank_with_tangents(
    C, tangents, floor: float, device: str | None = None, lowrank: bool = False
) -> tuple[float, np.ndarray, str]:
    """erank(C) and its first-order replicate values erank(C + Ċ_k) = exp(H + ⟨Γ, Ċ_k⟩), Γ = U diag(∂H/∂σ) Vᴴ,
    and the route taken (``full`` or ``lowrank``).

    δσ_i = Re u_iᴴ Ċ v_i, so δH = Σ_i ∂H/∂σ_i δσ_i = Re⟨Γ, Ċ⟩: one product for Γ, then O(d²) per replicate.
    C and the tangents: numpy arrays or tensors, computed on `device` (None: C's own; numpy: the CPU); the
    entropy and its gradient from the singular values, on the CPU in float64 (``spectra``). ``lowrank``: the
    singular triplets by ``linalg.certified_svd`` where its certificate holds (|Δ log erank| ≤ LOWRANK_TOL; the
    σ below it, rounding in a product of low rank, are left out), else the full SVD.
    """
    if device is None:
        device = C.device if isinstance(C, torch.Tensor) else "cpu"
    C = as_tensor(C, device)
    want = tangents is not None and len(tangents) > 0
    low = certified_svd(C, vectors=want) if lowrank else None
    route = "full" if low is None else "lowrank"
    if not want:
        s = torch_svdvals(C) if low is None else low[1]
        return effective_rank(s.cpu().numpy()), np.empty(0), route
    U, s, Vh = torch_svd(C) if low is None else (low[0], low[1], low[2])
    H, grad = entropy_gradient(s.cpu().numpy(), floor)
    keep = torch.from_numpy(np.flatnonzero(grad)).to(device)
    g = torch.from_numpy(grad[grad != 0]).to(device=device, dtype=s.dtype)
    Gam = (U[:, keep] * g) @ Vh[keep]  # (d, d)
    # Re⟨Γ, Ċ_k⟩ in C's precision (complex when either is), one replicate at a time: no (K, d, d) float64 copy
    tangents = as_tensor(tangents, device)
    wide = torch.promote_types(Gam.dtype, _wide(tangents.dtype))
    Gf = Gam.reshape(-1).to(wide)
    dH = torch.stack([torch.vdot(Gf, t.reshape(-1).to(wide)).real for t in tangents]).cpu().numpy()
    return float(np.exp(H)), np.exp(H + dH), route


class ProductChain:
    """C_n = M_n C_{n−1} composed one step at a time, with tangents Ċ_n = Δ_n C_{n−1} + M_n Ċ_{n−1}.

    ``step(M, Δ)`` (Δ: (K, d, d) deviations of M, one per replicate; None without intervals) returns
    (erank(C_n), log‖C_n‖_F, the K first-order replicate values of erank(C_n)). C is kept in float64 (complex128)
    and renormalised by ‖C_n‖_F every step; the tangents — the size of the sampling perturbation, ≈1e-2 of C —
    in float32 (complex64: rounding ≈1e-7 of them), scaled alike. Memory: C and K tangents, (K+1)·d².

    The products are torch tensors on ``device`` (a torch device string: the job's, ``workflow.job_device``);
    M and Δ come as numpy arrays (memmaps too) or tensors and are moved there. ``state()`` is numpy on the CPU,
    so that a snapshot resumes on any device (``from_state(state, device=...)``).

    ``lowrank``: the singular values (and vectors) of C by ``linalg.certified_svd`` where it certifies them
    (the `update` products: of low rank after a grouped-query attention boundary), else a full SVD; ``routes``
    counts the steps of each route.
    """

    def __init__(self, floor: float, device: str = "cpu", lowrank: bool = False):
        self.floor = floor
        self.device = str(device)
        self.lowrank = bool(lowrank)
        self.C = self.T = None  # tensors on the device
        self.log_norm = 0.0
        self.routes = {"full": 0, "lowrank": 0}

    def advance(self, M, D=None) -> bool:
        """C_n = M C_{n−1} (and the tangents), renormalised; False once C_n vanished or overflowed."""
        M = as_tensor(M, self.device)
        M = M.to(_wide(M.dtype))
        if self.C is not None and not np.isfinite(self.log_norm):
            return False
        cplx = M.is_complex() or (D is not None and _is_complex(D)) or (self.C is not None and self.C.is_complex())
        low = torch.complex64 if cplx else torch.float32
        if self.C is None:
            self.C = M.clone()
            self.T = None if D is None else as_tensor(D, self.device, low).clone()
        else:
            if D is not None and self.T is not None:
                self.T = torch.matmul(as_tensor(D, self.device, low), self.C.to(low)) + torch.matmul(
                    M.to(low), self.T.to(low)
                )
            wide = torch.promote_types(M.dtype, self.C.dtype)  # a real C times a complex M: complex128
            self.C = M.to(wide) @ self.C.to(wide)  # (d, d)
        nrm = float(torch.linalg.vector_norm(self.C))
        if not np.isfinite(nrm) or nrm == 0:
            self.log_norm = float("-inf") if nrm == 0 else float("nan")
            return False
        self.C /= nrm
        if self.T is not None:
            self.T /= nrm
        self.log_norm += float(np.log(nrm))
        return True

    def state(self) -> dict:
        """What a snapshot keeps (``layergeom.resume``): C, the tangents, log‖C‖ and the floor, exactly, as numpy
        arrays on the CPU (on the CPU they share the chain's memory: the chain never changes them in place)."""
        return {"floor": self.floor, "C": _numpy(self.C), "T": _numpy(self.T), "log_norm": self.log_norm,
                "lowrank": self.lowrank}  # fmt: skip

    @classmethod
    def from_state(cls, state: dict, device: str = "cpu") -> ProductChain:
        chain = cls(state["floor"], device, lowrank=bool(state.get("lowrank", False)))
        chain.C = None if state["C"] is None else as_tensor(state["C"], chain.device).clone()
        chain.T = None if state["T"] is None else as_tensor(state["T"], chain.device).clone()
        chain.log_norm = state["log_norm"]
        return chain

    def step(self, M, D=None) -> tuple[float, float, np.ndarray]:
        """``advance``, then erank(C_n), log‖C_n‖_F and the replicate values of erank(C_n)."""
        if not self.advance(M, D):
            return float("nan"), self.log_norm, np.full(0 if self.T is None else len(self.T), np.nan)
        erank, reps, route = erank_with_tangents(self.C, self.T, self.floor, self.device, self.lowrank)
        self.routes[route] += 1
        return erank, self.log_norm, reps


def _is_complex(x) -> bool:
    return x.is_complex() if isinstance(x, torch.Tensor) else np.iscomplexobj(x)


def _numpy(t: torch.Tensor | None) -> np.ndarray | None:
    return None if t is None else t.detach().cpu().numpy()


def cumulative_rows(
    steps: Iterable[tuple[str, np.ndarray, np.ndarray | None]],
    variants: Iterable[str] = VARIANTS,
    *,
    weights: np.ndarray | None = None,
    ci_level: float,
    snapshots: Snapshots = NO_SNAPSHOTS,
    device: str = "cpu",
) -> pd.DataFrame:
    """cumulative.tsv from boundaries streamed in depth order: (name, J̄_b, Δ_b) with Δ_b (K, d, d) the
    replicates' deviations of J̄_b (None: no intervals); every variant composed in one pass, on `device` (a
    torch device string; each boundary's J̄_b and Δ_b are moved there once).

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
        chains = {
            v: None if s is None else ProductChain.from_state(s, device) for v, s in last["state"]["chains"].items()
        }
    for depth, (name, J, D) in enumerate(steps, start=1):
        if last is not None and depth <= last["done"]:
            continue
        J = as_tensor(J, device, torch.float64)
        if D is not None:  # the tangents' precision (ProductChain), once for both variants
            D = as_tensor(D, device, torch.complex64 if _is_complex(D) else torch.float32)
        for v in variants:
            if chains[v] is None:
                chains[v] = ProductChain(tangent_floor(J.shape[0]), device, lowrank=v == "update")
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
