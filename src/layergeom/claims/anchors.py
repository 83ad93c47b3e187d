"""Paper A's claims from the per-anchor tables: layer means of the geometry and their bootstrap over anchors.

Anchors are the sampling unit of Paper A (every layer, class and checkpoint uses the same anchor tokens), so a
statistic over layers gets its interval from resampling the anchors jointly across layers and classes: each
resample redraws the anchor set once, recomputes every (class, layer) mean on it, and the statistic from those
means (a percentile interval). Paired across classes, so a difference between two classes is read on the same
anchors. Importing it does not import torch.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import read_tsv

#: the tokenwise controls: not restricted tokenwise maps, so Paper A's claims are not read on them
CONTROLS = ("identity", "global")
#: resamples per block of the bootstrap: (layers, block, anchors) floats at a time
_BLOCK = 128


def nanmean(a: np.ndarray, axis: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-nan slice is nan, as wanted
        return np.nanmean(a, axis=axis)


def nanmedian(a: np.ndarray, axis: int = -1) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(a, axis=axis)


def convention_columns(columns) -> dict[str, str]:
    """The suffix of each convention's geometry columns: the primary one has none, the other `_abs` or `_delta`."""
    if "cos_full_tok_delta" in columns:
        return {"delta": "_delta", "absolute": ""}
    return {"delta": "", "absolute": "_abs"}


#: per-anchor columns the claims read, by name in the delta (d) or absolute (a) convention, or in neither (relerr)
METRICS = {"tok_d": ("cos_full_tok", "delta"), "res_d": ("cos_full_res", "delta"),
           "tok_a": ("cos_full_tok", "absolute"), "res_a": ("cos_full_res", "absolute"),
           "angle_res": ("angle_res_deg", "delta"), "proj_full": ("proj_full", "delta"),
           "proj_res": ("proj_res", "delta"), "relerr": ("relerr", None)}  # fmt: skip


@dataclass
class AnchorMeans:
    """Per (class, metric): the layer means over anchors, ``estimate`` (L,), and over `n_boot` anchor resamples,
    ``boot`` (B, L); ``layers`` (L,) the block transitions in order."""

    layers: np.ndarray
    estimate: dict[tuple[str, str], np.ndarray]
    boot: dict[tuple[str, str], np.ndarray]
    classes: list[str]
    n_anchors: int

    def get(self, cls: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
        return self.estimate[(cls, metric)], self.boot[(cls, metric)]


def read_anchor_tables(paths: list[Path]) -> pd.DataFrame:
    """The per-anchor tables of one checkpoint (tokenwise/L{layer}.tsv), with the columns the claims read."""
    frames = []
    for p in paths:
        df = read_tsv(p)
        suffix = convention_columns(df.columns)
        keep = {"layer": "layer", "class": "class", "anchor": "anchor"}
        for name, (col, conv) in METRICS.items():
            src = col + (suffix[conv] if conv else "")
            if src in df:
                keep[src] = name
        frames.append(df[list(keep)].rename(columns=keep))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def anchor_means(df: pd.DataFrame, *, n_boot: int, seed) -> AnchorMeans:
    """Layer means of every metric per restricted class, and the same over `n_boot` resamples of the anchors
    (one draw of the anchor set shared by every layer and class)."""
    layers = np.sort(df["layer"].unique())
    anchors = np.sort(df["anchor"].unique())
    classes = [c for c in dict.fromkeys(df["class"]) if c not in CONTROLS]
    li = np.searchsorted(layers, df["layer"].to_numpy())
    ai = np.searchsorted(anchors, df["anchor"].to_numpy())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(anchors), size=(n_boot, len(anchors)))  # (B, n) resampled anchor positions
    estimate, boot = {}, {}
    for cls in classes:
        rows = (df["class"] == cls).to_numpy()
        for metric in METRICS:
            if metric not in df:
                continue
            m = np.full((len(layers), len(anchors)), np.nan)  # (L, n)
            m[li[rows], ai[rows]] = df.loc[rows, metric].to_numpy(dtype=np.float64)
            estimate[(cls, metric)] = nanmean(m, axis=1)
            blocks = [nanmean(m[:, idx[b : b + _BLOCK]], axis=2).T for b in range(0, n_boot, _BLOCK)]  # (b, L)
            boot[(cls, metric)] = np.concatenate(blocks) if blocks else np.empty((0, len(layers)))
    return AnchorMeans(layers, estimate, boot, classes, len(anchors))


def percentile_interval(boot: np.ndarray, level: float) -> tuple[float, float]:
    """The percentile interval of a bootstrap distribution (nan without finite resamples)."""
    boot = boot[np.isfinite(boot)]
    if not len(boot):
        return np.nan, np.nan
    q = (1 - level) / 2
    lo, hi = np.quantile(boot, [q, 1 - q])
    return float(lo), float(hi)
