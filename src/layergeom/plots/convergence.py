"""Paper A convergence figure: ρ(RelErr, KL) and the residual angle against the number of anchors and the
number of windows the anchors lie in (the kNN pool and the fits stay those of the full run), one row per
class, one colour per checkpoint (intervals as bars)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..io import read_tsv, save_figure  # noqa: E402
from .common import checkpoint_colours, note_figure, size_axis  # noqa: E402

PANELS = [("spearman_rho", "anchors"), ("spearman_rho", "windows"), ("angle_res_deg", "anchors"),
          ("angle_res_deg", "windows")]  # fmt: skip


def plot_tokenwise_convergence(tables: dict[str, pd.DataFrame], title: str):
    """Rows: classes; columns: (ρ, angle) x (anchors, windows)."""
    colours = checkpoint_colours(list(tables))
    classes = list(dict.fromkeys(c for df in tables.values() if "class" in df for c in df["class"]))
    if not classes:
        return note_figure(f"{title}: Paper A convergence", "no rows in tokenwise_convergence.tsv: nothing to draw")
    fig, axes = plt.subplots(len(classes), len(PANELS), figsize=(3.3 * len(PANELS), 2.4 * len(classes)),
                             squeeze=False)  # fmt: skip
    for i, cls in enumerate(classes):
        for j, (metric, axis) in enumerate(PANELS):
            ax = axes[i, j]
            for k, (ck, df) in enumerate(tables.items()):
                part = df[(df["class"] == cls) & (df["metric"] == metric) & (df["axis"] == axis)].sort_values("n")
                if not len(part):
                    continue
                yerr = np.vstack([part["value"] - part["ci_low"], part["ci_high"] - part["value"]])
                ax.errorbar(part["n"].to_numpy(float) * (1 + 0.03 * k), part["value"],
                            yerr=np.where(np.isfinite(yerr), yerr, 0), color=colours[ck], marker="o", ms=3,
                            capsize=2, lw=1, label=ck)  # fmt: skip
            size_axis(ax, sorted({int(n) for df in tables.values() for n in df.loc[df["axis"] == axis, "n"]}))
            ax.tick_params(labelsize=7)
            if i == 0:
                ax.set_title(f"{'ρ(RelErr, KL)' if metric == 'spearman_rho' else 'residual angle (°)'} vs {axis}",
                             fontsize=8)  # fmt: skip
            if j == 0:
                ax.set_ylabel(cls, fontsize=8)
            if i == len(classes) - 1:
                ax.set_xlabel("number of anchors" if axis == "anchors" else "anchors of the first k windows (k)",
                              fontsize=7)  # fmt: skip
    axes[0, 0].legend(fontsize=7, frameon=False)
    fig.suptitle(f"{title}: Paper A headline numbers against anchors and windows (95 % intervals; "
                 "kNN pool and fits fixed)", fontsize=10)  # fmt: skip
    fig.tight_layout()
    return fig


def draw_tokenwise(inputs: list[str], checkpoints: list[str], title: str, png: str, pdf: str) -> None:
    """Read one model's tokenwise_convergence.tsv files (one per checkpoint) and write the figure."""
    save_figure(plot_tokenwise_convergence({c: read_tsv(p) for c, p in zip(checkpoints, inputs)}, title), png, pdf)
