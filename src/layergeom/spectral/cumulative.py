"""Cumulative operators through depth (Paper B, docs/methods.md §2.4): the bottleneck of the composed dynamics.

``C_n = M_{b_n} ⋯ M_{b_1}`` with ``M_b = J̄_b`` (variant ``update``) or ``M_b = I + J̄_b`` (variant ``full``,
the residual map), composed in depth order in float64 (complex128 for Schur-surgery operators) and
renormalised by ‖C_n‖_F after every step, so deep products neither overflow nor underflow; the effective
rank is scale-free, and the log of the dropped norms is kept as ``log_norm``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pandas as pd

from ..linalg import svdvals
from .spectra import effective_rank

VARIANTS = ("update", "full")


def step_operator(J: np.ndarray, variant: str) -> np.ndarray:
    """The one-boundary map composed at each step: J̄_b (`update`) or I + J̄_b (`full`)."""
    if variant == "update":
        return J
    if variant == "full":
        return J + np.eye(J.shape[0], dtype=J.dtype)
    raise ValueError(f"unknown cumulative variant '{variant}'; known: {', '.join(VARIANTS)}")


def cumulative_products(mats: Iterable[np.ndarray], variant: str = "update") -> Iterator[tuple[np.ndarray, float]]:
    """Yield (C_n / ‖C_n‖_F, log ‖C_n‖_F) for n = 1, 2, ...: C_n = M_{b_n} C_{n-1}, renormalised each step."""
    C, log_norm = None, 0.0
    for J in mats:
        M = step_operator(np.asarray(J, dtype=np.result_type(J, np.float64)), variant)
        C = M if C is None else M @ C  # (d, d)
        nrm = float(np.linalg.norm(C))
        if not np.isfinite(nrm) or nrm == 0:
            C, log_norm = np.full_like(C, np.nan), float("-inf") if nrm == 0 else float("nan")
            yield C, log_norm
            continue
        C = C / nrm
        log_norm += np.log(nrm)
        yield C, log_norm


def cumulative_erank(mats: Iterable[np.ndarray], variant: str = "update") -> tuple[np.ndarray, np.ndarray]:
    """erank(C_n) and log ‖C_n‖_F against depth n = 1..len(mats) (erank is nan once C_n vanishes)."""
    eranks, logs = [], []
    for C, log_norm in cumulative_products(mats, variant):
        ok = np.isfinite(C).all()
        eranks.append(effective_rank(svdvals(C)) if ok else float("nan"))
        logs.append(log_norm)
    return np.asarray(eranks), np.asarray(logs)


def tangent_floor(d: int) -> float:
    """Singular values of C_n below this fraction of σ₁ are held fixed in the erank tangent (float32 tangents)."""
    return d * float(np.finfo(np.float32).eps)


def cumulative_rows(
    steps: Iterable[tuple[str, np.ndarray, np.ndarray | None]],
    variants: Iterable[str] = VARIANTS,
    *,
    weights: np.ndarray | None = None,
    ci_level: float = 0.95,
    snapshots=None,
) -> pd.DataFrame:
    """cumulative.tsv from boundaries streamed in depth order: (name, J̄_b, Δ_b) with Δ_b (K, d, d) the
    replicates' deviations of J̄_b (None: no intervals); every variant composed in one pass.

    Each replicate is the same delete-one-group draw at every boundary, so its product is a consistent
    replicate of C_n; erank_ci_low/high are jackknife intervals (``intervals``) on the log scale.
    ``snapshots`` (``layergeom.resume.Snapshots``, optional) resumes after its last snapshot (the steps it
    covers are skipped unread: they may be (name, None, None)) and saves the products as it goes.
    """
    from .intervals import ProductChain, jackknife_interval

    variants = list(variants)
    for v in variants:
        step_operator(np.zeros((1, 1)), v)  # validates the name
    chains = {v: None for v in variants}
    rows = []
    last = snapshots.load() if snapshots is not None else None
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
        if snapshots is not None:
            snapshots.save(depth, lambda: {"rows": rows, "chains": {v: c and c.state() for v, c in chains.items()}})
    table = pd.DataFrame(rows)
    order = {v: i for i, v in enumerate(variants)}
    return table.sort_values(["variant", "depth"], key=lambda c: c.map(order) if c.name == "variant" else c,
                             kind="stable").reset_index(drop=True)  # fmt: skip


def cumulative_table(jacobians: dict[str, np.ndarray], variants: Iterable[str] = VARIANTS) -> pd.DataFrame:
    """cumulative.tsv without intervals: one row per (variant, depth) with the last boundary and erank(C_n)."""
    names = list(jacobians)
    frames = []
    for variant in variants:
        erank, log_norm = cumulative_erank([jacobians[n] for n in names], variant)
        frames.append(
            pd.DataFrame(
                {
                    "variant": variant,
                    "depth": np.arange(1, len(names) + 1),
                    "boundary": names,
                    "erank": erank,
                    "log_norm": log_norm,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)
