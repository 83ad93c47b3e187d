"""Tables and figures at the edges: the one place that writes and reads result files.

Every table is TSV (docs/outputs.md): one header line, tabs, ``.`` as decimal point, ``nan`` for undefined
values, booleans as ``true``/``false``, floats at full precision (the shortest text that reads back to the
same float64), written atomically. Every figure is saved as PNG and PDF at one resolution.
The maths modules return arrays and DataFrames; the ``pipeline`` modules call these.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from .runtime import atomic_path

#: resolution of every PNG figure
FIGURE_DPI = 150


def write_tsv(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write a table as TSV (header, tabs, `nan`, true/false, full-precision floats), atomically."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == bool:
            out[col] = np.where(out[col], "true", "false")
    with atomic_path(path) as tmp:
        out.to_csv(tmp, sep="\t", index=False, na_rep="nan")


def read_tsv(path: str | os.PathLike) -> pd.DataFrame:
    """Read a TSV written by ``write_tsv`` (`nan` as missing, true/false back to booleans)."""
    df = pd.read_csv(path, sep="\t", na_values=["nan"], keep_default_na=False)
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


def save_figure(fig, *paths: str | os.PathLike) -> None:
    """Save one matplotlib figure to every path (format from the suffix: PNG, PDF) atomically, then close it."""
    import matplotlib.pyplot as plt

    for path in paths:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=str(path).rsplit(".", 1)[-1], dpi=FIGURE_DPI, bbox_inches="tight")
    plt.close(fig)
