"""Training dynamics: the headline number of every analysis per checkpoint, against the training step.

Reads the per-checkpoint tables of docs/outputs.md; importing it does not import torch.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from .io import read_tsv_if_exists

#: cum_erank_{update,full}: erank of the cumulative operator through every boundary, per variant
COLUMNS = ["checkpoint", "step", "heldout_loss", "median_rho", "cum_erank_update", "cum_erank_full",
           "henrici_early", "henrici_late", "n_significant_layers"]  # fmt: skip


def checkpoint_step(name: str) -> int:
    m = re.fullmatch(r"step(\d+)", name)
    if not m:
        raise ValueError(f"checkpoint '{name}' is not named step<N>")
    return int(m.group(1))


def dynamics_table(results_dir: str | Path, checkpoints: list[str]) -> pd.DataFrame:
    """One row per checkpoint: the headline number of each analysis (from the docs/outputs.md tables)."""
    results_dir = Path(results_dir)
    curves = read_tsv_if_exists(results_dir / "training.tsv")
    held = {} if curves is None else dict(curves.dropna(subset=["heldout_loss"])[["step", "heldout_loss"]].values)
    rows = []
    for ck in checkpoints:
        d = results_dir / ck
        step = checkpoint_step(ck)
        row = {"checkpoint": ck, "step": step, "heldout_loss": held.get(step, np.nan)}
        tw = read_tsv_if_exists(d / "tokenwise.tsv")
        row["median_rho"] = float(np.nanmedian(tw["spearman_rho"])) if tw is not None and len(tw) else np.nan
        cu = read_tsv_if_exists(d / "cumulative.tsv")
        for variant in ("update", "full"):
            v = cu[cu["variant"] == variant] if cu is not None else None
            if v is not None and len(v):
                row[f"cum_erank_{variant}"] = float(v.loc[v["depth"].idxmax(), "erank"])
        sp = read_tsv_if_exists(d / "spectra.tsv")
        if sp is not None and len(sp):
            L = sp["layer"].max() + 1
            row["henrici_early"] = float(sp.loc[sp["layer"] < max(1, L // 3), "henrici"].mean())
            row["henrici_late"] = float(sp.loc[sp["layer"] >= L - max(1, L // 3), "henrici"].mean())
        co = read_tsv_if_exists(d / "coupling.tsv")
        if co is not None:
            row["n_significant_layers"] = int(co.loc[co["significant"].astype(bool), "layer"].nunique())
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS).sort_values("step")
