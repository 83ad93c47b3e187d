"""Training dynamics: every analysis summarised per checkpoint, against the training step."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

COLUMNS = ["checkpoint", "step", "heldout_loss", "median_rho", "cum_erank_full_depth", "henrici_early",
           "henrici_late", "n_significant_layers"]  # fmt: skip


def _read(path: Path) -> pd.DataFrame | None:
    return pd.read_csv(path, sep="\t") if path.exists() else None


def checkpoint_step(name: str) -> int:
    m = re.fullmatch(r"step(\d+)", name)
    if not m:
        raise ValueError(f"checkpoint '{name}' is not named step<N>")
    return int(m.group(1))


def dynamics_table(results_dir: str | Path, checkpoints: list[str]) -> pd.DataFrame:
    """One row per checkpoint: the headline number of each analysis (from the OUTPUTS.md tables)."""
    results_dir = Path(results_dir)
    curves = _read(results_dir / "training.tsv")
    held = {} if curves is None else dict(curves.dropna(subset=["heldout_loss"])[["step", "heldout_loss"]].values)
    rows = []
    for ck in checkpoints:
        d = results_dir / ck
        step = checkpoint_step(ck)
        row = {"checkpoint": ck, "step": step, "heldout_loss": held.get(step, np.nan)}
        tw = _read(d / "tokenwise.tsv")
        row["median_rho"] = float(np.nanmedian(tw["spearman_rho"])) if tw is not None and len(tw) else np.nan
        cu = _read(d / "cumulative.tsv")
        if cu is not None and len(cu):
            cu = cu[cu["variant"] == "update"]
            row["cum_erank_full_depth"] = float(cu.loc[cu["depth"].idxmax(), "erank"])
        sp = _read(d / "spectra.tsv")
        if sp is not None and len(sp):
            L = sp["layer"].max() + 1
            row["henrici_early"] = float(sp.loc[sp["layer"] < max(1, L // 3), "henrici"].mean())
            row["henrici_late"] = float(sp.loc[sp["layer"] >= L - max(1, L // 3), "henrici"].mean())
        co = _read(d / "coupling.tsv")
        if co is not None:
            sig = co["significant"].astype(str).str.lower() == "true"
            row["n_significant_layers"] = int(co.loc[sig, "layer"].nunique())
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS).sort_values("step")


def write_table(table: pd.DataFrame, out) -> None:
    table.to_csv(out, sep="\t", index=False, na_rep="nan")


def dynamics_figure(curves_path, table: pd.DataFrame, png, pdf, title: str = "") -> None:
    """Five panels against training step (symlog x, so that step 0 shows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = pd.read_csv(curves_path, sep="\t")
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
        ("cum_erank_full_depth", "cumulative erank, full depth", "C1"),
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
    fig.savefig(png, dpi=120)
    fig.savefig(pdf)
    plt.close(fig)
