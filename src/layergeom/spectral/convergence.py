"""Convergence of the headline Paper B numbers with the number of samples (docs/methods.md §2.7).

For nested subsets of the samples — the first S sample groups (contiguous blocks of windows), S as
``settings.convergence_sizes`` computes them (by default 4 sizes from 2 to G, geometrically spaced) — recompute
J̄_b from the group means and the headline metrics, each with its jackknife
interval over the S groups of the subset (``intervals``; the full-depth products over ``product_blocks``
blocks of them, so at S = G their interval is wider than cumulative.tsv's over every group):

- ``henrici_early``/``_late``, ``frac_complex_early``/``_late``, ``self_realign_early``/``_late``: means over
  the first and the last `n_edge` boundaries (Paper B's early non-normal rotation vs late near-symmetry);
- ``erank_middle``: the effective rank of the middle boundary's J̄_b;
- ``cumulative_erank_update``/``_full``: erank of the cumulative operator at full depth, both variants.

A mean over boundaries is a smooth function of the same replicate, so its replicate is the mean of the
boundaries' replicates. The group means are read once per boundary, every subset size taking its first S groups
of them (memory: one boundary's group means and, per subset size, one product chain per variant).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..resume.snapshots import NO_SNAPSHOTS, Snapshots
from ..runtime import progress
from . import intervals
from .cumulative import VARIANTS, ProductChain, as_tensor, step_operator, tangent_floor
from .linear import metric_replicates
from .spectra import decompose, spectral_metrics

EDGE_METRICS = ("henrici", "frac_complex", "self_realign")
#: blocks of groups of the full-depth products' jackknife (as the Schur surgery's default)
PRODUCT_BLOCKS = 4


def convergence_rows(
    files,
    counts: np.ndarray,
    sizes: list[int],
    *,
    n_edge: int,
    sr_k: int,
    tol: float,
    ci_level: float,
    product_blocks: int | None = PRODUCT_BLOCKS,
    snapshots: Snapshots = NO_SNAPSHOTS,
    device: str = "cpu",
) -> pd.DataFrame:
    """One row per (metric, subset size): metric, n_samples, value, ci_low, ci_high, n_groups, boundaries.

    The per-boundary metrics use the delete-one-group jackknife over the S groups; the full-depth products,
    whose K tangents cost two d×d products per boundary each, over `product_blocks` blocks of them (as the
    Schur surgery; None: every group).

    The boundaries are the outer loop: each boundary's group means are read once (``files.groups``), every
    subset size composing its own product chains across the boundaries (the arithmetic of each (size,
    boundary) as a size-by-size pass).

    ``snapshots`` (``layergeom.resume.Snapshots``; default none) resumes after its last snapshot and saves
    the state as it goes; a step is one subset size at one boundary (the steps of the progress bar). The
    per-boundary replicates are always linearised (``linear.metric_replicates``). The decompositions, the
    replicates' products and the product chains compute on `device` (a torch device string).
    """
    names = list(files.names)
    n_edge = max(1, min(int(n_edge), len(names)))
    early, late = names[:n_edge], names[-n_edge:]
    middle = names[len(names) // 2]
    nb, ns = len(names), len(sizes)
    counts = np.asarray(counts)
    # per subset size si (the first S groups): its weights and replicates, fixed for the job
    sub_counts = [counts[np.arange(S)] for S in sizes]
    reps = [intervals.replicates(c) for c in sub_counts]
    preps = [intervals.replicates(c, product_blocks) for c in sub_counts]
    ws = [c / c.sum() for c in sub_counts]
    # boundary-outer: each boundary's group means are read once, and every subset size takes its first S groups
    # of them; a step is (boundary, size), step number i·ns + si + 1. The state carries, per size, the edge
    # boundaries' metrics and one product chain per variant. Memory: ns chains of both variants — C and the
    # product replicates' tangents, (8 + 4·K)·d² bytes per variant, K ≤ product_blocks — where the size-outer
    # loop held one size's at a time (resources.spectra_bytes counts them), plus the boundary's first max(S)
    # group means (4·max(S)·d², as the largest subset before).
    per = {si: {} for si in range(ns)}  # size -> boundary -> (metrics, replicate metrics)
    chains = {}  # size -> variant -> ProductChain, from the size's first step on
    last = {}  # size -> variant -> the final step's (erank, log-norm, replicates)
    restored = snapshots.load()
    done = 0 if restored is None else restored["done"]
    if restored is not None:
        st = restored["state"]
        per, last = st["per"], st["last"]
        chains = {si: {v: ProductChain.from_state(c, device) for v, c in ch.items()} for si, ch in st["chains"].items()}
    total = ns * nb
    bar = progress(total=total, initial=min(done, total), desc="convergence", unit="step")  # step: (boundary, size)
    for i, name in enumerate(names):
        if (i + 1) * ns <= done:  # this boundary's steps are in the snapshot
            continue
        final = i == nb - 1
        g_all = np.array(files.groups(name)[: max(sizes, default=0)])  # the one read of the group means: a copy
        for si, S in enumerate(sizes):
            if i * ns + si < done:
                continue
            g = g_all[:S]
            J = np.tensordot(ws[si], np.asarray(g, dtype=np.float64), axes=1)  # (d, d) J̄ of the subset
            D = intervals.deviations(J, g, sub_counts[si], reps[si])
            if name in early or name in late or name == middle:
                dec = decompose(J, device=device)
                m = spectral_metrics(J, sr_k=sr_k, tol=tol, dec=dec)
                per[si][name] = (
                    m,
                    metric_replicates(J, D, tol=tol, sr_k=sr_k, dec=dec, method="linear", device=device),
                )
            Dp = D if preps[si].K == reps[si].K else intervals.deviations(J, g, sub_counts[si], preps[si])
            del D
            Jt, Dp = as_tensor(J, device), as_tensor(Dp, device, torch.float32)  # once for both variants
            chain_s = chains.setdefault(si, {v: ProductChain(0.0, device, lowrank=v == "update") for v in VARIANTS})
            for v, chain in chain_s.items():
                if final:
                    chain.floor = tangent_floor(J.shape[0])
                    last.setdefault(si, {})[v] = chain.step(step_operator(Jt, v), Dp)
                else:
                    chain.advance(step_operator(Jt, v), Dp)
            del Dp, Jt
            state = {"per": per, "last": last, "chains": chains}  # the chains' arrays only when due
            snapshots.save(
                i * ns + si + 1,
                lambda s=state: {
                    **s,
                    "chains": {k: {v: c.state() for v, c in ch.items()} for k, ch in s["chains"].items()},
                },
            )
            bar.update()
        del g_all
    rows = []
    for si, S in enumerate(sizes):
        n = int(sub_counts[si].sum())

        def add(metric, value, reps_values, scale, boundaries, weights=reps[si].weights, n=n, S=S):
            lo, hi = intervals.jackknife_interval(value, reps_values, weights, ci_level, scale)
            rows.append({"metric": metric, "n_samples": n, "value": value, "ci_low": lo, "ci_high": hi,
                         "n_groups": S, "boundaries": boundaries})  # fmt: skip

        p = per[si]
        for part, bs in (("early", early), ("late", late)):
            for metric in EDGE_METRICS:
                value = float(np.mean([p[b][0][metric] for b in bs]))
                reps_values = np.mean([p[b][1][metric] for b in bs], axis=0)
                add(f"{metric}_{part}", value, reps_values, "linear", ",".join(bs))
        add("erank_middle", p[middle][0]["erank"], p[middle][1]["erank"], "log", middle)
        for v in VARIANTS:
            erank, _, reps_values = last[si][v]
            add(f"cumulative_erank_{v}", erank, reps_values, "log", f"{names[0]}..{names[-1]}", preps[si].weights)
    bar.close()
    cols = ["metric", "n_samples", "value", "ci_low", "ci_high", "n_groups", "boundaries"]
    return pd.DataFrame(rows, columns=cols)
