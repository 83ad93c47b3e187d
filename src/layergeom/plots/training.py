"""Training dynamics figure: the headline numbers of ``layergeom.dynamics`` against the training step."""

from __future__ import annotations

import pandas as pd


def dynamics_figure(curves_path, table: pd.DataFrame, png, pdf, title: str = "") -> None:
    """Five panels against training step (symlog x, so that step 0 shows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..io import read_tsv, save_figure
    from .common import KIND_STYLE

    curves = read_tsv(curves_path)
    fig, axes = plt.subplots(1, 5, figsize=(20, 3.6))
    x = table["step"]
    ax = axes[0]
    tr = curves.dropna(subset=["train_loss"])
    ax.plot(tr["step"], tr["train_loss"], color="0.6", lw=1, label="train")
    ax.plot(x, table["heldout_loss"], "o-", color="C3", label="held-out")
    ax.set_ylabel("loss (nats/token)")
    ax.legend(frameon=False)
    panels = [
        ("median_rho", "median ρ(RelErr, KL)", "C0"),
        ("cum_erank_update", "cumulative erank (update), full depth", "C1"),
    ]
    for ax, (col, label, color) in zip(axes[1:3], panels):
        ax.plot(x, table[col], "o-", color=color)
        ax.set_ylabel(label)
    kinds = [c.removeprefix("henrici_early_") for c in table.columns if c.startswith("henrici_early_")]
    for kind in kinds or [None]:  # per kind: attention and MLP may run opposite ways; pooled only without kinds
        sfx = f"_{kind}" if kind else ""
        ls = KIND_STYLE.get(kind, "-")
        axes[3].plot(x, table[f"henrici_early{sfx}"], marker="o", ls=ls, color="C4", label=f"first third {kind or ''}")
        axes[3].plot(x, table[f"henrici_late{sfx}"], marker="s", ls=ls, color="C5", label=f"last third {kind or ''}")
    axes[3].set_ylabel("mean Henrici departure")
    axes[3].legend(frameon=False, fontsize=7)
    axes[4].plot(x, table["n_significant_layers"], "o-", color="C2", label="any boundary")
    if "n_significant_layers_simes" in table and table["n_significant_layers_simes"].notna().any():
        axes[4].plot(x, table["n_significant_layers_simes"], "s--", color="C8", label="per-layer test")
    axes[4].set_ylabel("FDR-significant coupling layers")
    axes[4].legend(frameon=False, fontsize=7)
    for ax in axes:
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title}: geometry and dynamics as the model learns")
    fig.tight_layout()
    save_figure(fig, png, pdf)
