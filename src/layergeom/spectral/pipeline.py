"""Paper B spectral stage, one function per workflow rule: the only module of ``spectral`` that touches files.

- :func:`boundary_jacobians` (rule ``spectra_jacobians_<model>``): J̄_b of every boundary from the activation
  store -> ``jacobians/{boundary}.npy``, the group means ``{boundary}.groups.npy``, ``{boundary}.json`` and the
  per-sample summaries ``jacobians/{boundary}.tsv``;
- :func:`write_spectra` (``spectra_table``): ``spectra.tsv`` and ``eigenvalues.tsv``;
- :func:`write_cumulative` (``spectra_cumulative``): ``cumulative.tsv``;
- :func:`write_schur` (``spectra_schur``): ``schur.tsv``;
- :func:`write_convergence` (``spectra_convergence``): ``convergence.tsv``.

The tables read the boundaries one at a time in depth order (J̄_b, its group means memory-mapped), so a
checkpoint never holds more than one boundary's (G, d, d) group means and the products' K tangents.

Only the Jacobian job imports torch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import save_npy, write_tsv
from ..runtime import LayergeomError, atomic_path, progress
from . import intervals
from .cumulative import VARIANTS, cumulative_rows
from .schur import schur_surgery
from .spectra import CI_METRICS, eigenvalue_frame, order_columns, rank_tolerance, spectra_row

log = logging.getLogger("layergeom")

SUMMARY_COLUMNS = ["sample", "window", "position", "x_norm", "fro_norm", "trace", "asymmetry", "spectral_norm"]


def read_jacobians(names: list[str], paths: list) -> dict[str, np.ndarray]:
    """The mean Jacobians J̄_b (float64 d×d .npy files), keyed by boundary in the given (depth) order."""
    return {n: np.load(p).astype(np.float64, copy=False) for n, p in zip(names, paths)}


def sample_groups(windows: np.ndarray, n_groups: int) -> list[np.ndarray]:
    """Sample indices of each group: the sorted distinct windows split into min(n_groups, #windows) nearly equal
    contiguous blocks (np.array_split); a window's samples stay in one group (they are correlated)."""
    distinct = np.unique(windows)
    blocks = np.array_split(distinct, max(1, min(int(n_groups), len(distinct))))
    return [np.flatnonzero(np.isin(windows, b)) for b in blocks]


def write_json(obj: dict, path) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(obj, indent=1))


class BoundaryFiles(Mapping):
    """One checkpoint's per-boundary Jacobian files, read lazily in depth order.

    ``[name]`` is J̄_b (float64); ``groups(name)`` the group means (G, d, d) float32, memory-mapped;
    ``meta(name)`` the {boundary}.json record (n_samples, group_counts, ...).
    """

    def __init__(self, names: list[str], npy: list, groups: list | None = None, meta: list | None = None):
        self.names = list(names)
        self._npy = dict(zip(self.names, npy))
        self._groups = dict(zip(self.names, groups)) if groups else {}
        self._meta = dict(zip(self.names, meta)) if meta else {}

    def __getitem__(self, name: str) -> np.ndarray:
        return np.load(self._npy[name]).astype(np.float64, copy=False)

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def meta(self, name: str) -> dict:
        if name not in self._meta:
            raise LayergeomError(f"{name}: no {name}.json next to {self._npy[name]}; rerun the Jacobian job")
        return json.loads(Path(self._meta[name]).read_text())

    def groups(self, name: str) -> np.ndarray:
        if name not in self._groups:
            raise LayergeomError(f"{name}: no {name}.groups.npy next to {self._npy[name]}; rerun the Jacobian job")
        return np.load(self._groups[name], mmap_mode="r")

    def counts(self) -> np.ndarray:
        """The group sizes n_g, checked to be the same at every boundary (one grouping per checkpoint)."""
        first = None
        for name in self.names:
            c = np.asarray(self.meta(name)["group_counts"], dtype=np.int64)
            if first is None:
                first = c
            elif not np.array_equal(c, first):
                raise LayergeomError(
                    f"{name}: group_counts {c.tolist()} differ from {self.names[0]}'s {first.tolist()}; the "
                    "intervals need one grouping of the samples per checkpoint: rerun the Jacobian job"
                )
        return first

    def deviations(self, name: str, J: np.ndarray, counts: np.ndarray, reps, subset=None) -> np.ndarray:
        """Δ_k (K, d, d) of the replicates `reps` at this boundary (over the groups in `subset`, default all)."""
        g = self.groups(name)
        if g.shape[0] != len(self.meta(name)["group_counts"]):
            raise LayergeomError(f"{name}: {g.shape[0]} group means but {len(counts)} group counts in its .json")
        if subset is not None:
            g = g[subset]
        return intervals.deviations(J, g, counts, reps)


# ---- rule spectra_jacobians_<model> ----------------------------------------------------------------
def boundary_jacobians(
    adapter,
    store,
    boundaries: list[str],
    outputs: dict[str, tuple],
    *,
    n_samples: int = 256,
    context: str = "isolated",
    chunk_size: int = 16,
    autodiff: str = "rev",
    spectral_norm: bool = False,
    dtype: str = "float32",
    seed: int = 0,
    n_groups: int = 16,
) -> dict:
    """Mean Jacobians of several boundaries from an activation store; writes {boundary}.npy and .tsv each,
    and (given in `outputs`) the group means {boundary}.groups.npy and {boundary}.json.

    outputs maps a boundary name to (npy path, tsv path[, groups path, json path]). The .npy holds J̄_b (d×d,
    float64); the .groups.npy the mean of each sample group (G, d, d) float32 (groups: ``sample_groups``);
    the .json the sample and group counts; the .tsv one row per sample (window, position, state norm,
    Frobenius norm, trace, asymmetry, optional σ1).
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
        # ---- group means for the intervals (stand-in until the structured J̄ job lands; see its interface):
        # the per-sample autodiff Jacobians of each group of windows averaged separately, J̄ = Σ n_g J̄_g / N
        groups = sample_groups(windows, n_groups)
        means, parts = [], []
        for idx in groups:
            m_g, s_g = jac.mean_jacobian(
                adapter,
                name,
                x[idx],
                None if prefix is None else prefix[idx],
                chunk_size=chunk_size,
                mode=autodiff,
                spectral_norm=spectral_norm,
                dtype=torch_dtype,
            )
            means.append(m_g)
            parts.append((idx, s_g))
        counts = np.array([len(idx) for idx in groups])
        mean = np.tensordot(counts / counts.sum(), np.stack(means), axes=1)  # (d, d) float64
        order = np.concatenate([idx for idx, _ in parts])
        summ = {k: np.empty(len(rows)) for k in parts[0][1]}
        for k in summ:
            summ[k][order] = np.concatenate([s_g[k] for _, s_g in parts])
        table = pd.DataFrame({"sample": np.arange(len(rows)), "window": windows, "position": positions, **summ})
        npy, tsv, *extra = outputs[name]
        save_npy(mean, npy)
        write_tsv(table[SUMMARY_COLUMNS], tsv)
        if extra:
            save_npy(np.stack(means).astype(np.float32), extra[0])
            meta = {
                "boundary": name,
                "n_samples": int(len(rows)),
                "group_counts": counts.tolist(),
                "group_windows": [[int(windows[i].min()), int(windows[i].max())] for i in groups],
                "method": "autodiff",
                "context": context,
                "samples": int(n_samples),
                "dtype": dtype,
            }
            write_json(meta, extra[1])
        # ---- end of the stand-in
        log.info("%s: J̄ over %d samples, ‖J̄‖_F = %.4g", name, len(rows), np.linalg.norm(mean))
        results[name] = jac.MeanJacobian(name, mean, table, len(rows))
    return results


# ---- rules spectra_table, spectra_cumulative, spectra_schur, spectra_convergence ------------------------
def _n_samples(files: BoundaryFiles, name: str) -> int:
    return int(files.meta(name)["n_samples"])


def _replicates(counts: np.ndarray, blocks: int | None, what: str):
    """The jackknife replicates, or None (intervals nan, with a warning) when there is only one sample group."""
    if len(counts) < 2:
        log.warning("%s: one sample group (%d samples): no jackknife, the intervals are nan; use more windows "
                    "or spectra.n_groups >= 2", what, int(np.sum(counts)))  # fmt: skip
        return None
    return intervals.replicates(counts, blocks)


def write_spectra(
    files: BoundaryFiles,
    out_tsv,
    out_eigenvalues=None,
    *,
    sr_k: int = 64,
    dtype: str = "float32",
    rank_tol: float | None = None,
    ci_level: float = 0.95,
    ci_method: str = "linear",
    ci_blocks: int | None = None,
) -> pd.DataFrame:
    """spectra.tsv (with jackknife intervals over the sample groups) and the eigenvalues, boundary by boundary."""
    counts = files.counts()
    reps = _replicates(counts, ci_blocks, "spectra.tsv")
    if reps is not None:
        log.info("intervals: %s jackknife over %d replicates of %d groups (%s samples), level %g",
                 ci_method, reps.K, len(counts), int(counts.sum()), ci_level)  # fmt: skip
    rows, eig = [], []
    for name in progress(files.names, desc="spectra", unit="boundary"):
        J = files[name]
        tol = rank_tolerance(J.shape[0], dtype, rank_tol)
        D = None if reps is None else files.deviations(name, J, counts, reps)
        row, dec = spectra_row(
            name, J, _n_samples(files, name), sr_k=sr_k, tol=tol, deltas=D,
            weights=None if reps is None else reps.weights, ci_level=ci_level, ci_method=ci_method,
        )  # fmt: skip
        if reps is None:
            row |= {f"{m}_ci_{s}": np.nan for m in CI_METRICS for s in ("low", "high")}
        rows.append(row)
        eig.append(eigenvalue_frame(name, dec, tol))
        log.info("%s: rank %d of %d, %d non-zero modes, cond %.4g [%.4g, %.4g]", name, row["numerical_rank"],
                 J.shape[0], row["n_modes"], row["cond"], row["cond_ci_low"], row["cond_ci_high"])  # fmt: skip
    table = order_columns(pd.DataFrame(rows))
    write_tsv(table, out_tsv)
    if out_eigenvalues is not None:
        write_tsv(pd.concat(eig, ignore_index=True), out_eigenvalues)
    return table


def write_cumulative(
    files: BoundaryFiles,
    out_tsv,
    variants: Iterable[str] = VARIANTS,
    *,
    ci_level: float = 0.95,
    ci_blocks: int | None = None,
) -> pd.DataFrame:
    """cumulative.tsv: both variants composed in one pass over the boundaries, with jackknife intervals."""
    counts = files.counts()
    reps = _replicates(counts, ci_blocks, "cumulative.tsv")

    def steps():
        for name in progress(files.names, desc="cumulative", unit="boundary"):
            J = files[name]
            yield name, J, None if reps is None else files.deviations(name, J, counts, reps)

    table = cumulative_rows(steps(), variants, weights=None if reps is None else reps.weights, ci_level=ci_level)
    if reps is None:
        table.insert(4, "erank_ci_low", np.nan)
        table.insert(5, "erank_ci_high", np.nan)
    write_tsv(table, out_tsv)
    return table


class _Deviations(Mapping):
    """boundary -> Δ_k of the replicates, computed when read (one boundary at a time)."""

    def __init__(self, files: BoundaryFiles, counts, reps):
        self.files, self.counts, self.reps = files, counts, reps

    def __getitem__(self, name):
        return self.files.deviations(name, self.files[name], self.counts, self.reps)

    def __iter__(self):
        return iter(self.files.names)

    def __len__(self):
        return len(self.files.names)


def write_schur(
    files: BoundaryFiles,
    out_tsv,
    *,
    dtype: str = "float32",
    rank_tol: float | None = None,
    ci_level: float = 0.95,
    ci_blocks: int | None = 4,
    ci_controls: Iterable[str] = ("none",),
    **kwargs,
) -> pd.DataFrame:
    """schur.tsv (both cumulative variants) with jackknife intervals over `ci_blocks` blocks of sample groups.

    ``ci_blocks`` 0 writes no intervals.
    """
    d = files[files.names[0]].shape[0]
    tol = rank_tolerance(d, dtype, rank_tol)
    devs, weights = None, None
    counts = files.counts()
    reps = _replicates(counts, ci_blocks, "schur.tsv") if ci_blocks != 0 else None
    if reps is not None:
        devs, weights = _Deviations(files, counts, reps), reps.weights
        log.info("Schur intervals: linearised jackknife over %d blocks of %d groups, controls %s",
                 reps.K, len(counts), ", ".join(ci_controls))  # fmt: skip
    table = schur_surgery(files, tol=tol, deviations=devs, weights=weights, ci_level=ci_level,
                          ci_controls=ci_controls, **kwargs)  # fmt: skip
    write_tsv(table, out_tsv)
    return table


def convergence_sizes(n_groups: int, sizes: list[int] | None = None) -> list[int]:
    """Nested numbers of leading groups: `sizes` (capped at G), or 4 sizes from 2 to G spaced geometrically
    (G = 16: 2, 4, 8, 16; fewer only when G < 5 leaves fewer distinct sizes of at least 2 groups)."""
    if sizes:
        return sorted({min(int(s), n_groups) for s in sizes if int(s) >= 2})
    n = min(4, n_groups - 1)
    out = sorted({int(round(v)) for v in np.geomspace(2, n_groups, n)}) if n > 0 else []
    if len(out) < n:  # rounding merged two: evenly spaced instead
        out = sorted({int(round(v)) for v in np.linspace(2, n_groups, n)})
    return out


def write_convergence(
    files: BoundaryFiles,
    out_tsv,
    *,
    sizes: list[int] | None = None,
    n_edge: int = 4,
    sr_k: int = 64,
    dtype: str = "float32",
    rank_tol: float | None = None,
    ci_level: float = 0.95,
) -> pd.DataFrame:
    """convergence.tsv: the headline Paper B metrics on the first S groups (nested subsets of the samples)."""
    from .convergence import convergence_rows

    counts = files.counts()
    S = convergence_sizes(len(counts), sizes)
    log.info("convergence over the first %s of %d groups", S, len(counts))
    if not S:
        log.warning("convergence.tsv: fewer than 2 sample groups, no subsets to compare")
    d = files[files.names[0]].shape[0]
    table = convergence_rows(
        files, counts, S, n_edge=n_edge, sr_k=sr_k, tol=rank_tolerance(d, dtype, rank_tol), ci_level=ci_level
    )
    write_tsv(table, out_tsv)
    return table
