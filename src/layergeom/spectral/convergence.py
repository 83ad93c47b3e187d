"""Convergence of the headline Paper B numbers with the number of samples (docs/methods.md §2.7).

For nested subsets of the samples — the first S sample groups (contiguous blocks of windows), S = G/8, G/4,
G/2, G by default — recompute J̄_b from the group means and the headline metrics, each with its jackknife
interval over the S groups of the subset (``intervals``; the full-depth products over ``product_blocks``
blocks of them, so at S = G their interval is wider than cumulative.tsv's over every group):

- ``henrici_early``/``_late``, ``frac_complex_early``/``_late``, ``self_realign_early``/``_late``: means over
  the first and the last `n_edge` boundaries (Paper B's early non-normal rotation vs late near-symmetry);
- ``erank_middle``: the effective rank of the middle boundary's J̄_b;
- ``cumulative_erank_update``/``_full``: erank of the cumulative operator at full depth, both variants.

A mean over boundaries is a smooth function of the same replicate, so its replicate is the mean of the
boundaries' replicates. The subsets are read boundary by boundary (memory: one boundary's group means).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..resume import NO_SNAPSHOTS, Snapshots
from ..runtime import progress
from . import intervals
from .cumulative import VARIANTS, ProductChain, step_operator, tangent_floor
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
) -> pd.DataFrame:
    """One row per (metric, subset size): metric, n_samples, value, ci_low, ci_high, n_groups, boundaries.

    The per-boundary metrics use the delete-one-group jackknife over the S groups; the full-depth products,
    whose K tangents cost two d×d products per boundary each, over `product_blocks` blocks of them (as the
    Schur surgery; None: every group).

    ``snapshots`` (``layergeom.resume.Snapshots``; default none) resumes after its last snapshot and saves
    the state as it goes; a step is one boundary of one subset size (the steps of the progress bar). The
    per-boundary replicates are always linearised (``linear.metric_replicates``).
    """
    names = list(files.names)
    n_edge = max(1, min(int(n_edge), len(names)))
    early, late = names[:n_edge], names[-n_edge:]
    middle = names[len(names) // 2]
    rows = []
    nb = len(names)
    restored = snapshots.load()
    done = 0 if restored is None else restored["done"]
    if restored is not None:
        rows = restored["state"]["rows"]
    total = len(sizes) * nb
    bar = progress(total=total, initial=min(done, total), desc="convergence", unit="step")  # step: (size, boundary)
    for si, S in enumerate(sizes):
        if (si + 1) * nb <= done:  # this size's rows are in the snapshot
            continue
        subset = np.arange(S)
        sub_counts = np.asarray(counts)[subset]
        reps = intervals.replicates(sub_counts)
        preps = intervals.replicates(sub_counts, product_blocks)
        w = sub_counts / sub_counts.sum()
        per = {}  # boundary -> (metrics, replicate metrics)
        chains = {v: ProductChain(0.0) for v in VARIANTS}
        if restored is not None and done > si * nb:  # part of this size is in the snapshot
            per = restored["state"]["per"]
            chains = {v: ProductChain.from_state(c) for v, c in restored["state"]["chains"].items()}
        last = {}
        for i, name in enumerate(names):
            if si * nb + i < done:
                continue
            g = files.groups(name)[subset]
            J = np.tensordot(w, np.asarray(g, dtype=np.float64), axes=1)  # (d, d) J̄ of the subset
            D = intervals.deviations(J, g, sub_counts, reps)
            if name in early or name in late or name == middle:
                dec = decompose(J)
                m = spectral_metrics(J, sr_k=sr_k, tol=tol, dec=dec)
                per[name] = (m, metric_replicates(J, D, tol=tol, sr_k=sr_k, dec=dec, method="linear"))
            Dp = D if preps.K == reps.K else intervals.deviations(J, g, sub_counts, preps)
            final = i == len(names) - 1
            for v, chain in chains.items():
                if final:
                    chain.floor = tangent_floor(J.shape[0])
                    last[v] = chain.step(step_operator(J, v), Dp)
                else:
                    chain.advance(step_operator(J, v), Dp)
            if not final:
                state = {"rows": rows, "per": per, "chains": chains}  # the chains' arrays only when due
                snapshots.save(
                    si * nb + i + 1, lambda s=state: {**s, "chains": {v: c.state() for v, c in s["chains"].items()}}
                )
            bar.update()
        n = int(sub_counts.sum())

        def add(metric, value, reps_values, scale, boundaries, weights=reps.weights, n=n, S=S):
            lo, hi = intervals.jackknife_interval(value, reps_values, weights, ci_level, scale)
            rows.append({"metric": metric, "n_samples": n, "value": value, "ci_low": lo, "ci_high": hi,
                         "n_groups": S, "boundaries": boundaries})  # fmt: skip

        for part, bs in (("early", early), ("late", late)):
            for metric in EDGE_METRICS:
                value = float(np.mean([per[b][0][metric] for b in bs]))
                reps_values = np.mean([per[b][1][metric] for b in bs], axis=0)
                add(f"{metric}_{part}", value, reps_values, "linear", ",".join(bs))
        add("erank_middle", per[middle][0]["erank"], per[middle][1]["erank"], "log", middle)
        for v in VARIANTS:
            erank, _, reps_values = last[v]
            add(f"cumulative_erank_{v}", erank, reps_values, "log", f"{names[0]}..{names[-1]}", preps.weights)
        snapshots.save((si + 1) * nb, lambda: {"rows": rows})
    bar.close()
    cols = ["metric", "n_samples", "value", "ci_low", "ci_high", "n_groups", "boundaries"]
    return pd.DataFrame(rows, columns=cols)
