"""Tables and figures at the edges: the one place that writes and reads result files.

Every table is TSV (docs/outputs.md): one header line, tabs, ``.`` as decimal point, ``nan`` for undefined
values, booleans as ``true``/``false``, floats at full precision (the shortest text that reads back to the
same float64), written atomically. Every figure is saved as PNG and PDF at one resolution.
The maths modules return arrays and DataFrames; the job modules (``pipeline``, ``spectral.jobs``) call these.

No table is written with a value that comes from an overflow (``check_finite``, applied by ``write_tsv``):

- ``inf`` and ``-inf`` are errors in every column, except where the quantity's definition includes an infinity
  (``INFINITE``: the condition number of a singular matrix is ``inf``, the log of a norm that vanished exactly is
  ``-inf``). Arithmetic saturates at inf when it overflows, so this catches overflow wherever it happened.
- ``nan`` means *undefined* (a zero vector's direction, a constant variable's correlation, too few samples,
  a quantity past the point where a product vanished) and is allowed, except in the columns that are defined for
  every finite input (``ALWAYS_DEFINED``: norms, traces, KL): there a nan can only come from an overflow
  (inf - inf, 0 * inf).

The error names the table, the stage, the row's keys (boundary or layer, class ...), the column and the value,
and nothing is written.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pandas as pd

from .runtime import LayergeomError, atomic_path

log = logging.getLogger("layergeom")

#: resolution of every PNG figure
FIGURE_DPI = 150

#: columns whose definition includes an infinity, and its sign
INFINITE = {
    "cond": 1.0,
    "b_cond": 1.0,
    "cond_full": 1.0,
    "b_cond_full": 1.0,
    "cond_ci_high": 1.0,  # the data do not bound σ₁/σ_r from above when σ_r may be 0 (intervals.jackknife_interval)
    "first_third_ci_high": 1.0,  # trends.tsv: a third's mean of interval ends, unbounded where a cond_ci_high is
    "last_third_ci_high": 1.0,
    "log_norm": -1.0,
}
#: columns defined for every finite input: a nan there is an overflow, not an undefined value
ALWAYS_DEFINED = (
    "kl",
    "x_norm",
    "fro_norm",
    "trace",
    "sigma_max",
    "spectral_radius",
    "knn_radius",
    "norm_res",
    "norm_update",
    "norm_out",
)
#: columns that say where in the model (and which fit, variant, sample) a row belongs, named in errors
KEY_COLUMNS = (
    "boundary",
    "layer",
    "kind",
    "class",
    "variant",
    "alpha",
    "control",
    "depth",
    "gamma",
    "grouping",
    "group",
    "node",
    "sample",
    "anchor",
    "window",
    "position",
    "checkpoint",
)


def _stage_of(path: Path) -> str:
    """The stage a result file belongs to, from its place under results/{model}/{checkpoint}/."""
    parts = path.parts[path.parts.index("results") + 1 :] if "results" in path.parts else (path.name,)
    return Path(parts[2]).name.split(".")[0] if len(parts) > 3 else Path(parts[-1]).name.split(".")[0]


def check_finite(df: pd.DataFrame, path: str | os.PathLike, stage: str | None = None) -> None:
    """Raise a LayergeomError for the first value that comes from an overflow (the rules in this module's doc)."""
    for col in df.columns:
        if df[col].dtype.kind not in "fc":
            continue
        v = df[col].to_numpy()
        bad = np.isinf(v)
        if col in INFINITE:
            bad &= np.sign(v.real) != INFINITE[col]
        if col in ALWAYS_DEFINED:
            bad |= np.isnan(v)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            row = df.iloc[i]
            keys = ", ".join(f"{k}={row[k]}" for k in KEY_COLUMNS if k in df.columns) or f"row {i}"
            path = Path(path)
            raise LayergeomError(
                f"{v[i]} in column '{col}' of {path} (stage {stage or _stage_of(path)}, {keys}; {int(bad.sum())} such "
                f"value(s)): the computation overflowed; look for huge or corrupted weights in the model, or for a "
                f"setting of this stage that divides by a vanishing quantity"
            )


def write_tsv(df: pd.DataFrame, path: str | os.PathLike, *, stage: str | None = None) -> None:
    """Write a table as TSV (header, tabs, `nan`, true/false, full-precision floats), atomically, after
    ``check_finite`` (``stage`` names the stage in its error; by default it is read from the path)."""
    check_finite(df, path, stage)
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == bool:
            out[col] = np.where(out[col], "true", "false")
    with atomic_path(path) as tmp:
        out.to_csv(tmp, sep="\t", index=False, na_rep="nan")


def read_tsv(path: str | os.PathLike, *, exact: bool = False) -> pd.DataFrame:
    """Read a TSV written by ``write_tsv`` (`nan` as missing, true/false back to booleans); ``exact``: every float
    back to the very float that was written (pandas' round-trip parser; the default parser may miss by an ulp)."""
    df = pd.read_csv(path, sep="\t", na_values=["nan"], keep_default_na=False)
    if (
        exact
    ):  # pandas' own parser may miss by an ulp (its round-trip option is deprecated): Python's, correctly rounded
        text = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
        for col in df.columns[df.dtypes == np.float64]:
            df[col] = np.array([float(v) for v in text[col]], dtype=np.float64)
    for col in df.columns:
        if df[col].dtype == object and len(df) and set(df[col].dropna().unique()) <= {"true", "false"}:
            df[col] = df[col] == "true"
    return df


def read_tsv_if_exists(path: str | os.PathLike) -> pd.DataFrame | None:
    """``read_tsv``, or None when the file does not exist."""
    return read_tsv(path) if Path(path).exists() else None


def save_npy(array: np.ndarray, path: str | os.PathLike) -> None:
    """One array as .npy, written atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, array)


def drawn_texts(fig) -> list:
    """Every non-empty text a render of ``fig`` draws, with its extent in display pixels: (Text, Bbox) pairs.

    Tick labels count only for the ticks the axis draws (matplotlib keeps spare Tick objects whose stale
    labels are never rendered).
    """
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    spare = set()
    for ax in fig.get_axes():
        for axis in ax._axis_map.values():
            drawn = {id(t) for tick in axis._update_ticks() for t in (tick.label1, tick.label2) if t.get_visible()}
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                spare |= {id(t) for t in (tick.label1, tick.label2) if id(t) not in drawn}
    out = []
    for t in fig.findobj(Text):
        if id(t) in spare or not t.get_visible() or not t.get_text().strip():
            continue
        bb = t.get_window_extent(renderer)
        if bb.width > 0 and bb.height > 0:
            out.append((t, bb))
    return out


def overlapping_texts(fig, tol_px: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of drawn texts whose extents overlap by more than tol_px pixels in both directions."""
    texts = drawn_texts(fig)
    if len(texts) < 2:
        return []
    box = np.array([[b.x0, b.y0, b.x1, b.y1] for _, b in texts])  # (n, 4)
    w = np.minimum(box[:, None, 2], box[None, :, 2]) - np.maximum(box[:, None, 0], box[None, :, 0])  # (n, n)
    h = np.minimum(box[:, None, 3], box[None, :, 3]) - np.maximum(box[:, None, 1], box[None, :, 1])
    i, j = np.nonzero(np.triu((w > tol_px) & (h > tol_px), 1))
    return [(texts[a][0].get_text(), texts[b][0].get_text()) for a, b in zip(i, j)]


#: matplotlib's per-format metadata that would stamp the time of drawing into the file (PDF's CreationDate,
#: SVG's Date): None leaves it out
FIGURE_METADATA = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}


def save_figure(fig, *paths: str | os.PathLike) -> None:
    """Save one matplotlib figure to every path (format from the suffix: PNG, PDF) atomically, then close it.

    Texts that overlap once drawn (labels running into each other) are logged as a warning naming them. The
    formats' date stamps are left out (``FIGURE_METADATA``), so a figure comes back with the same bytes when it is
    drawn again from the same tables.
    """
    import matplotlib.pyplot as plt

    for a, b in overlapping_texts(fig):
        log.warning("figure %s: overlapping text %r and %r", Path(paths[0]).name, a, b)
    for path in paths:
        with atomic_path(path) as tmp:
            fmt = str(path).rsplit(".", 1)[-1]
            fig.savefig(tmp, format=fmt, dpi=FIGURE_DPI, bbox_inches="tight", metadata=FIGURE_METADATA.get(fmt))
    plt.close(fig)
