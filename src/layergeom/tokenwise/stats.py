"""Association between the residual size and its functional effect: Spearman rho with a bootstrap CI."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass
class Rho:
    rho: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int


def _rowwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a - a.mean(1, keepdims=True)
    b = b - b.mean(1, keepdims=True)
    den = np.sqrt((a * a).sum(1) * (b * b).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (a * b).sum(1) / den, np.nan)


def spearman_ci(x: np.ndarray, y: np.ndarray, *, n_boot: int, level: float, seed: int = 0, chunk: int = 2**24) -> Rho:
    """Spearman rho(x, y) (scipy) with a percentile bootstrap CI over resampled pairs (vectorised).

    Pairs with a non-finite value are dropped; fewer than 3 pairs, or a constant variable, give nan.
    Each bootstrap sample is re-ranked (average ranks for ties), so the CI is that of Spearman's rho.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = len(x)
    nan = Rho(np.nan, np.nan, np.nan, np.nan, n)
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return nan
    res = stats.spearmanr(x, y)
    rng = np.random.default_rng(seed)
    boots = []
    per = max(1, chunk // n)  # resamples per chunk, to bound memory
    for start in range(0, n_boot, per):
        b = min(per, n_boot - start)
        idx = rng.integers(0, n, size=(b, n))  # (b, n)
        rx = stats.rankdata(x[idx], axis=1)
        ry = stats.rankdata(y[idx], axis=1)
        boots.append(_rowwise_pearson(rx, ry))
    boots = np.concatenate(boots) if boots else np.array([])
    alpha = (1 - level) / 2
    lo, hi = np.nanquantile(boots, [alpha, 1 - alpha]) if np.isfinite(boots).any() else (np.nan, np.nan)
    return Rho(float(res.statistic), float(lo), float(hi), float(res.pvalue), n)
