"""The verdict grid: every claim (and its kind, class or variant) against every model and checkpoint, coloured by
verdict, with the estimate and its interval in each cell."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from ..claims.catalogue import CLAIMS  # noqa: E402
from ..claims.verdicts import VERDICTS  # noqa: E402
from ..names import KINDS  # noqa: E402

#: verdict -> (colour, mark): the mark repeats the colour for readers and prints that do not tell colours apart
STYLE = {
    "holds": ("#5aae61", "✓"),
    "fails": ("#f1a340", "✗"),
    "reversed": ("#d6604d", "⇄"),
    "inconclusive": ("#d9d9d9", "?"),
    "not_applicable": ("#ffffff", "–"),
}
EMPTY = "#f7f7f7"  # a claim that has no cell in this column (a per-checkpoint claim in a pair's column)


def scope(row) -> str:
    """What a row is about besides its checkpoint: its kind, class or variant (empty for none)."""
    parts = [str(row[c]) for c in ("kind", "class", "variant") if isinstance(row.get(c), str) and row[c]]
    return " · ".join(parts)


def column_label(row) -> str:
    ck = row["checkpoint"] if isinstance(row["checkpoint"], str) and row["checkpoint"] else "—"
    base = row.get("baseline")
    return f"{ck} vs {base}" if isinstance(base, str) and base else ck


def _num(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)) or pd.isna(x):
        return ""
    x = float(x)
    return (f"{x:.0f}" if x == int(x) and abs(x) < 1e4 else f"{x:.3g}").replace("-", "−")


def cell_text(row) -> str:
    """The mark, the estimate and, on a second line, its interval."""
    mark = STYLE[row["verdict"]][1]
    est, lo, hi = _num(row["estimate"]), _num(row["ci_low"]), _num(row["ci_high"])
    if row["verdict"] == "not_applicable" or not est:
        return mark
    if lo and hi:
        return f"{mark} {est}\n[{lo}, {hi}]"
    ref, against = _num(row["reference"]), row.get("compared_with")
    named = isinstance(against, str) and against not in ("", "0", "threshold")
    return f"{mark} {est}" + (f"\n({against}: {ref})" if ref and named else "")


def grid(table: pd.DataFrame) -> tuple[list[tuple[str, str]], list[tuple[str, str]], dict]:
    """(rows: (claim, scope) in the catalogue's order, columns: (model, column label), cells: (row, col) -> the
    table's row)."""
    rows, cols, cells = {}, {}, {}
    for _, r in table.iterrows():
        key, col = (r["claim"], scope(r)), (r["model"], column_label(r))
        rows.setdefault(key, None)
        cols.setdefault(col, None)
        cells[(key, col)] = r
    # rows by claim in the catalogue's order, then kind (depth order, pooled last), else as they first come;
    # per-checkpoint columns before the pairs of the same model, models in table order
    position = {c.id: i for i, c in enumerate(CLAIMS)}
    scopes = {s: i for i, s in enumerate((*KINDS, "pooled"))}  # kinds in depth order, pooled last
    first = {key: i for i, key in enumerate(rows)}
    ordered_rows = sorted(rows, key=lambda k: (position.get(k[0], len(position)), scopes.get(k[1], -1), first[k]))
    models = list(dict.fromkeys(m for m, _ in cols))
    ordered = [c for m in models for pair in (False, True) for c in cols if c[0] == m and (" vs " in c[1]) == pair]
    return ordered_rows, ordered, cells


def plot_verdict_grid(table: pd.DataFrame, title: str = "Do the papers' claims hold?"):
    """The grid of ``claims.tsv``: a row per (claim, kind / class / variant), a column per (model, checkpoint or
    checkpoint pair), each cell coloured by its verdict and showing the estimate and its interval."""
    rows, cols, cells = grid(table)
    n_r, n_c = max(len(rows), 1), max(len(cols), 1)
    fig, ax = plt.subplots(figsize=(3.4 + 1.15 * n_c, 1.6 + 0.3 * n_r))
    rgb = np.ones((n_r, n_c, 3))
    for i, key in enumerate(rows):
        for j, col in enumerate(cols):
            r = cells.get((key, col))
            rgb[i, j] = to_rgb(STYLE[r["verdict"]][0] if r is not None else EMPTY)
            if r is not None:
                ax.text(j, i, cell_text(r), ha="center", va="center", fontsize=5.5, linespacing=1.0)
    ax.imshow(rgb, aspect="auto", interpolation="nearest")
    ax.set_xticks(np.arange(n_c) - 0.5, minor=True)
    ax.set_yticks(np.arange(n_r) - 0.5, minor=True)
    ax.grid(which="minor", color="white", linewidth=1.2)
    ax.tick_params(which="minor", length=0)
    ax.set_yticks(range(len(rows)), [f"{c} · {s}" if s else c for c, s in rows], fontsize=6.5)
    ax.set_xticks(range(len(cols)), [f"{m}\n{label}" for m, label in cols], fontsize=6.5)
    ax.xaxis.tick_top()
    for i in range(1, len(rows)):  # a line between the papers
        if rows[i][0][0] != rows[i - 1][0][0]:
            ax.axhline(i - 0.5, color="black", linewidth=0.8)
    handles = [Patch(facecolor=STYLE[v][0], edgecolor="grey", label=f"{STYLE[v][1]} {v.replace('_', ' ')}")
               for v in VERDICTS]  # fmt: skip
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=len(VERDICTS), fontsize=6.5,
              frameon=False)  # fmt: skip
    ax.set_title(title, fontsize=9, pad=22)
    fig.tight_layout()
    return fig
