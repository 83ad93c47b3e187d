"""Anchor sampling and leave-one-out k-nearest-neighbour search (Euclidean), batched with torch."""

from __future__ import annotations

import numpy as np
import torch


def sample_anchors(pool: np.ndarray, n_anchors: int, seed: int) -> np.ndarray:
    """`n_anchors` distinct rows of `pool` (indices, e.g. the non-BOS rows), drawn with `seed`, sorted."""
    pool = np.asarray(pool)
    n = min(int(n_anchors), len(pool))
    rng = np.random.default_rng(seed)
    return np.sort(pool[rng.choice(len(pool), size=n, replace=False)])


def knn(
    points: torch.Tensor,
    query_rows: torch.Tensor,
    k: int,
    *,
    leave_one_out: bool,
    max_elements: int = 1 << 24,
) -> torch.Tensor:
    """Indices (m, k) into `points` (n, d) of the k nearest neighbours of points[query_rows] (m,).

    With `leave_one_out` the query's own row is excluded (other rows at distance 0 are kept);
    otherwise the query is its own nearest neighbour. Queries are processed in chunks so the
    distance block (chunk, n) stays under `max_elements`. Neighbours are sorted by distance.
    """
    n = points.shape[0]
    k_eff = k + 1 if leave_one_out else k
    if k_eff > n:
        raise ValueError(f"k={k} neighbours asked for among {n} points")
    chunk = max(1, max_elements // max(n, 1))
    out = []
    for s in range(0, query_rows.shape[0], chunk):
        rows = query_rows[s : s + chunk]
        q = points[rows]  # (c, d)
        dist = torch.cdist(q, points)  # (c, n), GEMM-based for speed
        if leave_one_out:
            dist[torch.arange(rows.shape[0]), rows] = torch.inf
        # GEMM-based distances lose precision for near-identical points: re-rank a short list exactly
        cand = torch.topk(dist, min(n, 2 * k_eff), dim=1, largest=False).indices  # (c, 2k)
        exact = ((points[cand] - q[:, None, :]) ** 2).sum(-1)  # (c, 2k)
        if leave_one_out:
            exact = exact.masked_fill(cand == rows[:, None], torch.inf)
        order = torch.topk(exact, k, dim=1, largest=False).indices  # (c, k)
        out.append(torch.gather(cand, 1, order))
    return torch.cat(out)
