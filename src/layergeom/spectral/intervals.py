"""Confidence intervals on the Paper B numbers by resampling sample groups (docs/methods.md §2.7).

**Resampling unit.** The Jacobian job writes, per boundary, the mean Jacobian J̄_g of each sample group g
(contiguous blocks of windows: tokens of one window are correlated, so the window, not the token, is the
independent unit) and their sizes n_g; J̄ = Σ_g w_g J̄_g with w_g = n_g / N. The grouping is the same at
every boundary, so one replicate — one set of group weights — is one consistent draw of the whole network:
the cumulative products of a replicate compose that replicate's J̄_b.

**Scheme: the delete-one-group jackknife, linearised.** Replicate k deletes group (or block) k:
``J̄_(−k) = (J̄ − w_k J̄_k) / (1 − w_k)``, i.e. the deviation ``Δ_k = J̄_(−k) − J̄ = −w_k/(1−w_k) (J̄_k − J̄)``.
The variance of a statistic θ is

    v = K/(K−1) · Σ_k (1 − w_k)² (θ_(−k) − θ̂)²

(the textbook (K−1)/K Σ(θ_(−k) − θ̂)² for equal groups; for a linear statistic it equals the cluster-robust
sandwich variance of the weighted mean for any group sizes), and the interval is θ̂ ± t_{K−1, (1+level)/2} √v
(θ̂ the full-sample value; cond and erank on the log scale, so their intervals stay positive).

θ_(−k) is computed to first order, θ̂ + Dθ[Δ_k], from the full-sample decomposition: the SVD gives δσ_i =
u_iᵀΔv_i and the first-order rotation of the top-k singular subspaces, the eigenvectors give δλ_i =
y_iᴴΔx_i / y_iᴴx_i, and products carry a tangent Ċ_n = Δ_n C_{n−1} + M_n Ċ_{n−1}. This costs one or two
d×d matrix products per replicate (spectra.tsv: the float32 ΔV and Δ[Re x | Im x], ``linear.LinearSpectra``;
bench/results/replicates.md) instead of a new eigendecomposition and SVD per replicate and boundary
(G = 16 exact replicates of SmolLM2's 60 boundaries would cost ≈ 16·60·(0.2 s eig + 0.07 s SVD) ≈ 4.5 min
per checkpoint; linearised, the intervals add ≈ 20 s to spectra.tsv, ≈ 25 s to cumulative.tsv and ≈ 30 s to
schur.tsv on one core: bench/bench_intervals.py, bench/results/intervals.md). The jackknife of a smooth statistic is
its linearisation up to O(1/N) (Efron's infinitesimal jackknife), and the tests check the two against each
other and check coverage. Mode counts (complex and expansive fractions) are recounted on the first-order
eigenvalues λ_i + δλ_i with the point estimate's modes and rules (``spectra.mode_flags``; close real pairs
and pairs near the real axis through their 2×2 quasi-degenerate block, so that a collision into a complex
pair, or of a pair onto the axis, is seen), and SR over the point estimate's k' = min(k, r). A count is a discontinuous statistic:
when the sampling noise moves eigenvalues by as much as the gaps between real ones, it pushes them into
complex pairs and the complex fraction of J̄ is biased upwards — an interval around it does not correct that.
``method="exact"`` recomputes every replicate from scratch instead (affordable for small d).

Memory: one boundary's group means (G, d, d) float32 and K tangents (K, d, d) float32 per product, never
O(N·d²) (d = 4096, G = 16: 1.1 GB each).

This module is the jackknife core (replicates, deviations, the interval); the first-order replicates of one
matrix's metrics are ``linear``'s, those of the products ``cumulative``'s (``ProductChain``). It imports
nothing else of ``spectral``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special


# ---- replicates: group weights and deviations ---------------------------------------------------------
@dataclass
class Replicates:
    """The K jackknife replicates of one grouping: which groups each deletes and its weight w_k = n_k / N."""

    members: list[np.ndarray]  # K arrays of group indices (a block of consecutive groups)
    weights: np.ndarray  # (K,) w_k

    @property
    def K(self) -> int:
        return len(self.members)


def replicates(counts, n_blocks: int | None = None) -> Replicates:
    """Delete-one-block replicates over groups with sizes `counts`: K = min(n_blocks, G) blocks of consecutive groups.

    n_blocks None (or ≥ G) deletes one group at a time (K = G).
    """
    counts = np.asarray(counts, dtype=np.float64)
    G = len(counts)
    if G < 2:
        raise ValueError(f"a jackknife needs at least 2 sample groups, got {G}")
    K = G if n_blocks is None else max(2, min(int(n_blocks), G))
    members = [np.asarray(m) for m in np.array_split(np.arange(G), K)]
    w = np.array([counts[m].sum() for m in members]) / counts.sum()
    return Replicates(members, w)


def deviations(mean: np.ndarray, groups: np.ndarray, counts, reps: Replicates) -> np.ndarray:
    """Δ_k = J̄_(−k) − J̄ = −w_k/(1−w_k) (J̄_k − J̄) for every replicate k -> (K, d, d) float32.

    ``groups`` (G, d, d) are the group means (float32, may be a memmap), ``mean`` J̄ (d, d) float64.
    """
    counts = np.asarray(counts, dtype=np.float64)
    out = np.empty((reps.K, *mean.shape), dtype=np.float32)
    for k, (m, w) in enumerate(zip(reps.members, reps.weights)):
        block = np.tensordot(counts[m] / counts[m].sum(), np.asarray(groups[m], dtype=np.float64), axes=1)
        out[k] = -(w / (1 - w)) * (block - mean)  # (d, d)
    return out


# ---- variance and interval --------------------------------------------------------------------------
@lru_cache(maxsize=256)
def t_quantile(level: float, df: int) -> float:
    """The two-sided `level` quantile t_{df, (1+level)/2} of Student's t: scipy.special.stdtrit, the function
    scipy.stats.t.ppf evaluates (the same float), without scipy.stats' import (≈1 s) and per-call overhead."""
    return float(special.stdtrit(int(df), (1 + float(level)) / 2))


def jackknife_interval(
    theta: float, reps: np.ndarray, weights: np.ndarray, level: float, scale: str = "linear"
) -> tuple[float, float]:
    """(low, high): θ̂ ± t_{K−1} √v, v = K/(K−1) Σ_k (1−w_k)² (θ_k − θ̂)²; `scale` log works on log θ.

    Replicates that are not finite make the interval nan (an undefined metric has no interval). On the log
    scale an upper end past the largest float is ``inf``: the data do not bound θ from above (a condition number
    σ₁/σ_r whose replicates move σ_r by about σ_r itself: σ_r may be 0).
    """
    reps = np.asarray(reps, dtype=np.float64)
    K = len(reps)
    if K < 2 or not np.isfinite(theta) or not np.all(np.isfinite(reps)):
        return float("nan"), float("nan")
    if scale == "log":
        if theta <= 0 or np.any(reps <= 0):
            return float("nan"), float("nan")
        theta, reps = np.log(theta), np.log(reps)
    v = K / (K - 1) * float(np.sum((1 - np.asarray(weights)) ** 2 * (reps - theta) ** 2))
    half = t_quantile(level, K - 1) * np.sqrt(v)
    lo, hi = theta - half, theta + half
    if scale == "log":
        with np.errstate(over="ignore"):  # exp(hi) = inf: unbounded above
            return float(np.exp(lo)), float(np.exp(hi))
    return float(lo), float(hi)


#: per metric: the scale of its interval and the range it is clipped to
METRIC_SCALE = {"cond": "log", "erank": "log"}
METRIC_RANGE = {
    "self_realign": (0.0, 1.0),
    "henrici": (0.0, 1.0),
    "frac_expansive": (0.0, 1.0),
    "frac_complex": (0.0, 1.0),
    "asymmetry": (0.0, 1.0),
    "part_ratio": (1.0, np.inf),
    "erank": (1.0, np.inf),
    "cond": (1.0, np.inf),
}


def metric_interval(name: str, theta: float, reps: np.ndarray, weights: np.ndarray, level: float):
    """``jackknife_interval`` on the metric's scale, clipped to its range (fractions stay in [0, 1])."""
    lo, hi = jackknife_interval(theta, reps, weights, level, METRIC_SCALE.get(name, "linear"))
    a, b = METRIC_RANGE.get(name, (-np.inf, np.inf))
    return (float(np.clip(lo, a, b)), float(np.clip(hi, a, b))) if np.isfinite(lo) else (lo, hi)
