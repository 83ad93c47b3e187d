"""Convergence of the headline Paper A numbers with the number of anchors and the windows they come from.

From the per-anchor tables the tokenwise stage already writes (``tokenwise/anchors.tsv``: RelErr and KL;
``tokenwise/L{layer}.tsv``: the residual angle), per map class:

- ``spearman_rho``: ρ(RelErr, KL) pooled over layers, with a percentile bootstrap interval that resamples
  anchors (an anchor's layers together: the same token at every layer is one unit);
- ``angle_res_deg``: the mean residual angle over anchors and layers, with a t-interval over the anchors'
  layer means.

Each on nested subsets along two axes: ``anchors`` (a seeded nested random subset of m anchors) and
``windows`` (only the anchors that lie in the first k windows). Nothing is refitted on either axis: every
anchor keeps its k-nearest-neighbour neighbourhood from the pool of all windows and its fitted map, so the
``windows`` axis is not the kNN pool size; it shows how the numbers move when the anchors come from less
text (fewer, and more correlated, anchors), at the full run's pool and fits.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

#: Monte Carlo resamples of the ρ intervals here: the endpoints to a few per cent of their width, enough to
#: compare sizes (tokenwise.tsv uses tokenwise.bootstrap for the reported ρ)
MAX_BOOT = 200


def nested_sizes(n: int, minimum: int = 4) -> list[int]:
    """4 sizes from `minimum` to n spaced geometrically (96 anchors: 12, 24, 48, 96 with minimum 12; fewer only
    when n − minimum < 3)."""
    lo = min(minimum, n)
    k = min(4, n - lo + 1)
    out = sorted({int(round(v)) for v in np.geomspace(lo, n, k)})
    if len(out) < k:
        out = sorted({int(round(v)) for v in np.linspace(lo, n, k)})
    return out


def cluster_spearman(anchor_ids: np.ndarray, x: np.ndarray, y: np.ndarray, n_boot: int, level: float, rng):
    """Spearman ρ(x, y) over all pairs and a percentile bootstrap CI resampling the anchors (clusters)."""
    ok = np.isfinite(x) & np.isfinite(y)
    anchor_ids, x, y = anchor_ids[ok], x[ok], y[ok]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return np.nan, np.nan, np.nan, len(x)
    rho = float(stats.spearmanr(x, y).statistic)
    ids, inv = np.unique(anchor_ids, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    sizes = np.bincount(inv)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    boots = []
    for _ in range(0, n_boot, 50):  # 50 resamples at a time, ranked in one batch
        b = min(50, n_boot - len(boots))
        pick = rng.integers(0, len(ids), size=(b, len(ids)))  # (b, anchors) resampled clusters
        idx = [order[np.concatenate([np.arange(starts[a], starts[a] + sizes[a]) for a in row])] for row in pick]
        if len({len(i) for i in idx}) > 1:  # clusters of unequal size: one resample at a time
            boots += [stats.spearmanr(x[i], y[i]).statistic for i in idx]
            continue
        idx = np.stack(idx)  # (b, pairs)
        rx, ry = stats.rankdata(x[idx], axis=1), stats.rankdata(y[idx], axis=1)  # (b, pairs)
        rx, ry = rx - rx.mean(1, keepdims=True), ry - ry.mean(1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            boots += list((rx * ry).sum(1) / np.sqrt((rx * rx).sum(1) * (ry * ry).sum(1)))
    boots = np.asarray(boots, dtype=np.float64)
    boots = boots[np.isfinite(boots)]
    if not len(boots):
        return rho, np.nan, np.nan, len(x)
    a = (1 - level) / 2
    lo, hi = np.quantile(boots, [a, 1 - a])
    return rho, float(lo), float(hi), len(x)


def mean_angle(anchor_ids: np.ndarray, angle: np.ndarray, level: float):
    """Mean angle over all (anchor, layer) pairs, t-interval over the anchors' means."""
    ok = np.isfinite(angle)
    if not ok.any():
        return np.nan, np.nan, np.nan
    per = pd.Series(angle[ok]).groupby(anchor_ids[ok]).mean().to_numpy()
    m = float(np.mean(angle[ok]))
    if len(per) < 2:
        return m, np.nan, np.nan
    half = float(stats.t.ppf((1 + level) / 2, len(per) - 1) * np.std(per, ddof=1) / np.sqrt(len(per)))
    return m, m - half, m + half


def tokenwise_convergence(anchors: pd.DataFrame, layer_tables: list[pd.DataFrame], cfg: dict, *, seed: int):
    """tokenwise_convergence.tsv: metric, class, axis, n, n_anchors, n_windows, n_pairs, value, ci_low, ci_high."""
    angles = pd.concat([t[["layer", "class", "anchor", "angle_res_deg"]] for t in layer_tables], ignore_index=True)
    df = anchors.merge(angles, on=["layer", "class", "anchor"], how="left", validate="1:1")
    level = float(cfg["ci_level"])
    n_boot = min(int(cfg["bootstrap"]), MAX_BOOT)
    ids = np.sort(df["anchor"].unique())
    order = np.random.default_rng([seed, 7]).permutation(ids)  # nested: the first m of one permutation
    n_windows = int(df["window"].max()) + 1
    subsets = [("anchors", m, set(order[:m].tolist())) for m in nested_sizes(len(ids), max(4, len(ids) // 8))]
    subsets += [("windows", k, k) for k in nested_sizes(n_windows, max(2, n_windows // 8))]
    rows = []
    for ci, name in enumerate(dict.fromkeys(df["class"])):
        g = df[df["class"] == name]
        for si, (axis, n, sel) in enumerate(subsets):
            part = g[g["anchor"].isin(sel)] if axis == "anchors" else g[g["window"] < sel]
            a = part["anchor"].to_numpy()
            rng = np.random.default_rng([seed, ci, si])
            rho, lo, hi, n_pairs = cluster_spearman(a, part["relerr"].to_numpy(float), part["kl"].to_numpy(float),
                                                    n_boot, level, rng)  # fmt: skip
            base = {"class": name, "axis": axis, "n": int(n), "n_anchors": int(part["anchor"].nunique()),
                    "n_windows": int(part["window"].nunique())}  # fmt: skip
            rows.append({"metric": "spearman_rho", **base, "n_pairs": n_pairs, "value": rho, "ci_low": lo,
                         "ci_high": hi})  # fmt: skip
            m, lo, hi = mean_angle(a, part["angle_res_deg"].to_numpy(float), level)
            rows.append({"metric": "angle_res_deg", **base, "n_pairs": int(np.isfinite(part["angle_res_deg"]).sum()),
                         "value": m, "ci_low": lo, "ci_high": hi})  # fmt: skip
    return pd.DataFrame(rows)
