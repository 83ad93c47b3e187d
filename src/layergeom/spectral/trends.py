"""Per-kind depth trends of the spectral metrics (docs/methods.md §2.8), from spectra.tsv alone.

For each boundary kind (``attn``, ``mlp``, ``pli``, ``block``) and each gradient metric: the mean over the
first, middle and last third of the layers, and the OLS slope of the metric against relative depth
``x = layer / (L − 1)`` with a percentile bootstrap interval over the kind's boundaries. Attention and MLP
boundaries can run in opposite directions, so nothing here pools kinds. Importing it does not import torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..io import read_tsv, write_tsv
from ..runtime import LayergeomError

#: the metrics of the spectral-gradient figure, each with the scale its trend is taken on
TREND_METRICS = ("cond", "self_realign", "henrici", "frac_expansive", "frac_complex", "erank")
LOG_METRICS = frozenset({"cond"})  # spans decades and has a log-scale interval: trend of log10
#: bootstrap resamples of the boundaries: the percentile endpoints to about 1 % of the interval's width
N_BOOT = 2000
THIRDS = ("first", "middle", "last")
COLUMNS = ["kind", "metric", "scale", "n_boundaries", "first_third", "first_third_ci_low", "first_third_ci_high",
           "middle_third", "last_third", "last_third_ci_low", "last_third_ci_high", "slope", "slope_ci_low",
           "slope_ci_high", "slope_sampling_halfwidth", "intercept", "n_first", "n_middle", "n_last"]  # fmt: skip


def relative_depth(layer, n_layers: int) -> np.ndarray:
    """x = layer / (L − 1) in [0, 1] (0 for a one-layer model), as the gradient figure's axis."""
    return np.asarray(layer, dtype=np.float64) / max(n_layers - 1, 1)


def depth_thirds(layer, n_layers: int) -> dict[str, np.ndarray]:
    """Masks of the first, middle and last third of the layers: layer < ⌊L/3⌋, ≥ L − ⌊L/3⌋ (each ≥ 1 layer)."""
    layer = np.asarray(layer)
    n = max(1, n_layers // 3)
    first, last = layer < n, layer >= n_layers - n
    return {"first": first, "middle": ~first & ~last, "last": last}


def ols_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares line y ≈ a + b·x: slope b = Σ(x−x̄)(y−ȳ) / Σ(x−x̄)², intercept a = ȳ − b·x̄."""
    xc = x - x.mean()
    sxx = float(xc @ xc)
    if len(x) < 2 or sxx == 0:
        return np.nan, np.nan
    b = float(xc @ (y - y.mean()) / sxx)
    return b, float(y.mean() - b * x.mean())


def bootstrap_slopes(x: np.ndarray, y: np.ndarray, n_boot: int, rng) -> np.ndarray:
    """OLS slopes of `n_boot` resamples of the (x, y) pairs with replacement (resamples with one x dropped)."""
    idx = rng.integers(0, len(x), size=(n_boot, len(x)))  # (B, n) one resample of the boundaries per row
    xb, yb = x[idx], y[idx]  # (B, n)
    xc = xb - xb.mean(axis=1, keepdims=True)
    sxx = np.einsum("bn,bn->b", xc, xc)  # (B,)
    ok = sxx > 1e-12 * max(float(np.ptp(x)) ** 2, 1e-300)
    return np.einsum("bn,bn->b", xc[ok], yb[ok]) / sxx[ok]


def slope_sampling_halfwidth(x: np.ndarray, halfwidths: np.ndarray) -> float:
    """Bound on the slope's sampling half-width: Σ_b |c_b| h_b, c_b = (x_b − x̄)/Σ(x − x̄)² (the slope is
    Σ c_b y_b; the bound holds for any correlation between the boundaries' errors)."""
    xc = x - x.mean()
    sxx = float(xc @ xc)
    return float(np.abs(xc / sxx) @ halfwidths) if sxx > 0 else np.nan


def _scaled(values, scale: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if scale == "linear":
        return v
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(v > 0, np.log10(np.where(v > 0, v, 1.0)), np.nan)


def _unscaled(v: float, scale: str) -> float:
    return float(v) if scale == "linear" else float(10.0**v)


def trend_row(part: pd.DataFrame, metric: str, n_layers: int, *, level: float, rng, n_boot: int = N_BOOT) -> dict:
    """One trends.tsv row: the thirds' means (intervals: the means of the boundaries' interval ends) and the
    OLS slope against relative depth with its bootstrap interval over the boundaries."""
    scale = "log10" if metric in LOG_METRICS else "linear"
    y = _scaled(part[metric], scale)
    lo_col, hi_col = f"{metric}_ci_low", f"{metric}_ci_high"
    lo = _scaled(part[lo_col], scale) if lo_col in part else np.full(len(part), np.nan)
    hi = _scaled(part[hi_col], scale) if hi_col in part else np.full(len(part), np.nan)
    ok = np.isfinite(y)
    layer = part["layer"].to_numpy()
    x = relative_depth(layer, n_layers)
    row: dict = {"metric": metric, "scale": scale, "n_boundaries": int(ok.sum())}
    for name, mask in depth_thirds(layer, n_layers).items():
        m = mask & ok
        row[f"n_{name}"] = int(m.sum())
        row[f"{name}_third"] = _unscaled(y[m].mean(), scale) if m.any() else np.nan
        if name != "middle":
            ends = [lo[m].mean(), hi[m].mean()] if m.any() else [np.nan, np.nan]
            row[f"{name}_third_ci_low"], row[f"{name}_third_ci_high"] = (_unscaled(e, scale) for e in ends)
    b, a = ols_line(x[ok], y[ok])
    row |= {"slope": b, "intercept": a, "slope_ci_low": np.nan, "slope_ci_high": np.nan}
    if ok.sum() >= 3 and np.isfinite(b):
        boots = bootstrap_slopes(x[ok], y[ok], n_boot, rng)
        q = (1 - level) / 2
        if len(boots):
            row["slope_ci_low"], row["slope_ci_high"] = (float(v) for v in np.quantile(boots, [q, 1 - q]))
    half = np.fmax(y - lo, hi - y)  # (n,) the larger side of each boundary's interval
    good = ok & np.isfinite(half)
    row["slope_sampling_halfwidth"] = slope_sampling_halfwidth(x[good], half[good]) if good.sum() >= 2 else np.nan
    return row


def write_trends(spectra_path, out_tsv, *, level: float, seed: int) -> pd.DataFrame:
    """Rule entry point: trends.tsv from one checkpoint's spectra.tsv."""
    table = trends_table(read_tsv(spectra_path), level=level, seed=seed)
    write_tsv(table, out_tsv)
    return table


def trends_table(spectra: pd.DataFrame, *, level: float, seed: int, n_boot: int = N_BOOT) -> pd.DataFrame:
    """trends.tsv of one checkpoint: one row per (kind, metric) in kind order of the table, docs/outputs.md."""
    missing = [c for c in ("layer", "kind") if c not in spectra]
    if missing or not len(spectra):
        raise LayergeomError(f"spectra table has no boundaries to take depth trends of (missing: {missing or 'rows'})")
    n_layers = int(spectra["layer"].max()) + 1
    rows = []
    kinds = list(dict.fromkeys(spectra["kind"]))
    for ki, kind in enumerate(kinds):
        part = spectra[spectra["kind"] == kind].sort_values("layer")
        for mi, metric in enumerate(TREND_METRICS):
            if metric not in part:
                continue
            rng = np.random.default_rng([seed, ki, mi])  # one stream per (kind, metric)
            rows.append({"kind": kind, **trend_row(part, metric, n_layers, level=level, rng=rng, n_boot=n_boot)})
    return pd.DataFrame(rows, columns=COLUMNS)
