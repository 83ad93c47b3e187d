"""Training dynamics figure: the headline numbers of ``layergeom.dynamics`` against the training step."""

from __future__ import annotations

import pandas as pd


def dynamics_figure(curves_path, table: pd.DataFrame, png, pdf, title: str = "") -> None:
    """Five panels against training step (symlog x, so that step 0 shows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..io import read_tsv, save_figure

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
    axes[3].plot(x, table["henrici_early"], "o-", color="C4", label="early boundaries")
    axes[3].plot(x, table["henrici_late"], "s--", color="C5", label="late boundaries")
    axes[3].set_ylabel("mean Henrici departure")
    axes[3].legend(frameon=False)
    axes[4].plot(x, table["n_significant_layers"], "o-", color="C2")
    axes[4].set_ylabel("FDR-significant coupling layers")
    for ax in axes:
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title}: geometry and dynamics as the model learns")
    fig.tight_layout()
    save_figure(fig, png, pdf)
