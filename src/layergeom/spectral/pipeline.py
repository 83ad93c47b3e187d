"""Paper B spectral stage, one function per workflow rule: the only module of ``spectral`` that touches files.

- :func:`boundary_jacobians` (rule ``spectra_jacobians_<model>``): J̄_b of every boundary from the activation
  store -> ``jacobians/{boundary}.npy`` and the per-sample summaries ``jacobians/{boundary}.tsv``;
- :func:`write_spectra` (``spectra_table``): ``spectra.tsv`` and ``eigenvalues.tsv``;
- :func:`write_cumulative` (``spectra_cumulative``): ``cumulative.tsv``;
- :func:`write_schur` (``spectra_schur``): ``schur.tsv``.

Only the Jacobian job imports torch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import read_tsv, save_npy, write_tsv
from ..runtime import LayergeomError, progress
from .cumulative import VARIANTS, cumulative_table
from .schur import schur_surgery
from .spectra import Decomposition, eigenvalue_table, spectra_table

log = logging.getLogger("layergeom")

SUMMARY_COLUMNS = ["sample", "window", "position", "x_norm", "fro_norm", "trace", "asymmetry", "spectral_norm"]


def read_jacobians(names: list[str], paths: list) -> dict[str, np.ndarray]:
    """The mean Jacobians J̄_b (float64 d×d .npy files), keyed by boundary in the given (depth) order."""
    return {n: np.load(p).astype(np.float64, copy=False) for n, p in zip(names, paths)}


# ---- rule spectra_jacobians_<model> ----------------------------------------------------------------
def boundary_jacobians(
    adapter,
    store,
    boundaries: list[str],
    outputs: dict[str, tuple[str | Path, str | Path]],
    *,
    n_samples: int = 256,
    context: str = "isolated",
    chunk_size: int = 16,
    autodiff: str = "rev",
    spectral_norm: bool = False,
    dtype: str = "float32",
    seed: int = 0,
) -> dict:
    """Mean Jacobians of several boundaries from an activation store; writes {boundary}.npy and .tsv each.

    outputs maps a boundary name to (npy path, tsv path). The .npy holds J̄_b (d×d, float64); the .tsv one
    row per sample (window, position, state norm, Frobenius norm, trace, asymmetry, optional σ1).
    """
    import torch

    from . import jacobians as jac

    if context not in ("isolated", "in_context"):
        raise LayergeomError(f"spectra.context: '{context}' is not one of isolated, in_context")
    torch_dtype = jac.DTYPES[dtype]
    if torch_dtype != next(adapter.model.parameters()).dtype:
        adapter.model.to(torch_dtype)
    T = store.window_tokens
    rows = jac.sample_rows(store.n_windows, T, n_samples, seed)  # (N,)
    windows, positions = store.index[rows, 0], store.index[rows, 1]
    # the samples' token ids: their own (isolated), or their windows' up to them (in context)
    tok_rows = rows if context == "isolated" else rows[:, None] - np.arange(T - 1, -1, -1)  # (N,) or (N, T)
    tokens = torch.from_numpy(np.ascontiguousarray(store.index[tok_rows, 2]))
    if len(rows) < n_samples:
        log.info("only %d windows: using %d samples instead of %d", store.n_windows, len(rows), n_samples)
    results = {}
    for name in progress(boundaries, desc="jacobians", unit="boundary"):
        if name not in store.names:
            raise LayergeomError(f"boundary {name} is not in the activation store {store.path}")
        states = store.states(name)
        x = torch.from_numpy(np.ascontiguousarray(states[rows]))  # (N, d)
        prefix = None
        if context == "in_context":
            before = rows[:, None] - np.arange(T - 1, 0, -1)  # (N, T-1): positions 0 .. T-2 of each window
            prefix = torch.from_numpy(np.ascontiguousarray(states[before.ravel()]).reshape(len(rows), T - 1, -1))
        mean, summ = jac.mean_jacobian(
            adapter,
            name,
            x,
            prefix,
            tokens=tokens,
            chunk_size=chunk_size,
            mode=autodiff,
            spectral_norm=spectral_norm,
            dtype=torch_dtype,
        )
        table = pd.DataFrame({"sample": np.arange(len(rows)), "window": windows, "position": positions, **summ})
        npy, tsv = outputs[name]
        save_npy(mean, npy)
        write_tsv(table[SUMMARY_COLUMNS], tsv)
        log.info("%s: J̄ over %d samples, ‖J̄‖_F = %.4g", name, len(rows), np.linalg.norm(mean))
        results[name] = jac.MeanJacobian(name, mean, table, len(rows))
    return results


# ---- rules spectra_table, spectra_cumulative, spectra_schur ---------------------------------------
def write_spectra(
    names: list[str], npy_paths: list, tsv_paths: list, out_tsv, out_eigenvalues=None, **kwargs
) -> pd.DataFrame:
    """spectra.tsv from the per-boundary J̄_b files (n_samples = rows of each sample table); also the eigenvalues."""
    jacobians = read_jacobians(names, npy_paths)
    n_samples = {n: len(read_tsv(p)) for n, p in zip(names, tsv_paths)}
    decs: dict[str, Decomposition] = {}
    table = spectra_table(jacobians, n_samples, decompositions=decs, **kwargs)
    write_tsv(table, out_tsv)
    if out_eigenvalues is not None:
        write_tsv(eigenvalue_table(decs), out_eigenvalues)
    return table


def write_cumulative(names: list[str], npy_paths: list, out_tsv, variants: Iterable[str] = VARIANTS) -> pd.DataFrame:
    """cumulative.tsv from the per-boundary J̄_b files, composed in the given (depth) order."""
    table = cumulative_table(read_jacobians(names, npy_paths), variants)
    write_tsv(table, out_tsv)
    return table


def write_schur(names: list[str], npy_paths: list, out_tsv, **kwargs) -> pd.DataFrame:
    """schur.tsv from the per-boundary J̄_b files, composed in the given (depth) order."""
    table = schur_surgery(read_jacobians(names, npy_paths), **kwargs)
    write_tsv(table, out_tsv)
    return table
