"""Training dynamics: the headline number of every analysis per checkpoint, against the training step.

Reads the per-checkpoint tables of docs/outputs.md; importing it does not import torch.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from .io import read_tsv_if_exists
from .names import KIND_ORDER
from .spectral.trends import depth_thirds

#: cum_erank_{update,full}: erank of the cumulative operator through every boundary, per variant;
#: henrici_early/_late pool the kinds (kept for old scripts); the per-kind columns follow the fixed ones
COLUMNS = ["checkpoint", "step", "heldout_loss", "median_rho", "cum_erank_update", "cum_erank_full",
           "henrici_early", "henrici_late", "n_significant_layers", "n_significant_layers_simes"]  # fmt: skip
#: spectra.tsv metrics summarised per kind over the first and last third of the layers
KIND_METRICS = ("henrici", "self_realign", "frac_complex")


def edge_means(spectra: pd.DataFrame) -> dict[str, float]:
    """Mean of each metric over the first / last third of the layers: pooled (henrici only) and per kind
    ({metric}_{early,late}_{kind}), thirds as in trends.tsv."""
    L = int(spectra["layer"].max()) + 1
    th = depth_thirds(spectra["layer"].to_numpy(), L)
    out = {"henrici_early": float(spectra.loc[th["first"], "henrici"].mean()),
           "henrici_late": float(spectra.loc[th["last"], "henrici"].mean())}  # fmt: skip
    for kind in sorted(spectra["kind"].unique(), key=lambda k: (KIND_ORDER.get(k, 9), k)):
        is_kind = (spectra["kind"] == kind).to_numpy()
        for m in KIND_METRICS:
            if m in spectra:
                out[f"{m}_early_{kind}"] = float(spectra.loc[th["first"] & is_kind, m].mean())
                out[f"{m}_late_{kind}"] = float(spectra.loc[th["last"] & is_kind, m].mean())
    return out


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
            row |= edge_means(sp)
        co = read_tsv_if_exists(d / "coupling.tsv")
        if co is not None:
            row["n_significant_layers"] = int(co.loc[co["significant"].astype(bool), "layer"].nunique())
            if "significant_layer" in co:
                row["n_significant_layers_simes"] = int(co.loc[co["significant_layer"].astype(bool), "layer"].nunique())
        rows.append(row)
    extra = list(dict.fromkeys(k for r in rows for k in r if k not in COLUMNS))
    return pd.DataFrame(rows, columns=COLUMNS + extra).sort_values("step")
