"""Paper B spectral stage, one function per workflow rule: the only module of ``spectral`` that touches files.

- :func:`boundary_jacobians` (rule ``spectra_jacobians_<model>``): J̄_b of every boundary from the activation
  store -> ``jacobians/{boundary}.npy``, the sample-group means ``{boundary}.groups.npy``, what was averaged
  ``{boundary}.json`` and the per-sample summaries ``{boundary}.tsv`` (resumable after a crash);
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
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..io import save_npy, write_tsv
from ..resume import Snapshots, WorkLock, file_id, item_done, job_key, machine_id, mark_done, remove_work, work_dir
from ..runtime import LayergeomError, atomic_path, progress
from . import intervals
from .cumulative import VARIANTS, cumulative_rows
from .schur import schur_surgery
from .spectra import CI_METRICS, eigenvalue_frame, order_columns, rank_tolerance, spectra_row

if TYPE_CHECKING:
    from .jacobians import JacobianSettings

log = logging.getLogger("layergeom")

SUMMARY_COLUMNS = ["sample", "window", "position", "x_norm", "fro_norm", "trace", "asymmetry", "spectral_norm"]


def read_jacobians(names: list[str], paths: list) -> dict[str, np.ndarray]:
    """The mean Jacobians J̄_b (float64 d×d .npy files), keyed by boundary in the given (depth) order."""
    return {n: np.load(p).astype(np.float64, copy=False) for n, p in zip(names, paths)}


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

    def paths(self) -> list:
        """Every file read, in depth order (the inputs of a job's resume key)."""
        out = []
        for name in self.names:
            out += [p[name] for p in (self._npy, self._groups, self._meta) if name in p]
        return out

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
SUFFIXES = ("npy", "groups", "tsv", "json")  # a boundary's files; its marker {boundary}.done.json comes last


def weights_id(weights, model) -> dict | str:
    """The weights file's identity (path, size, mtime), or the tensors' hash for a model not read from a file."""
    from ..models import weights_sha256

    return weights_sha256(model.state_dict()) if weights is None else file_id(weights)


def resume_key(store, name: str, settings: JacobianSettings, seed: int, weights: dict | str, machine: dict) -> str:
    """:func:`layergeom.resume.job_key` of everything a boundary's files depend on: the activation store (its
    store.json, index and the boundary's states), the weights (:func:`weights_id`), the settings, the seed, and
    the device and thread counts (``resume.machine_id``: they change the rounding)."""
    inputs = [store.path / "store.json", store.path / "index.npy", store.path / f"{name}.npy"]
    return job_key("spectra_jacobians", inputs, {"boundary": name, "weights": weights, "settings": asdict(settings),
                                                 "seed": seed, "machine": machine})  # fmt: skip


def _partial_paths(work: Path, name: str) -> dict[str, Path]:
    return {k: work / f"{name}.{'groups.npy' if k == 'groups' else k}" for k in SUFFIXES}


def _marker(work: Path, name: str) -> Path:
    return work / f"{name}.done.json"


def _finished(work: Path, name: str, key: str) -> bool:
    """Whether a boundary's marker holds this key and its files still match their recorded size and sha256."""
    return item_done(_marker(work, name), key, [p.name for p in _partial_paths(work, name).values()])


def boundary_jacobians(
    adapter,
    store,
    boundaries: list[str],
    outputs: dict[str, dict[str, str | Path]],
    settings: JacobianSettings | dict | None = None,
    *,
    seed: int = 0,
    weights=None,
) -> dict:
    """Mean Jacobians of several boundaries from an activation store, resumable after a crash.

    outputs maps a boundary name to its files {"npy", "groups", "json", "tsv"} (jacobians/{b}.npy,
    .groups.npy, .json, .tsv). Each boundary's files are written, as it finishes, into the sibling work
    folder ``.partial/`` (never declared to Snakemake, which deletes the declared outputs of a failed job),
    then its marker ``{boundary}.done.json`` with a key of the weights, activations, settings, seed, device and
    threads (:func:`resume_key`) and each file's size and sha256 (``layergeom.resume``); a restarted job reuses
    every boundary whose key and files match and computes the rest. One instance at a time works in the folder
    (a lock). When all are done the files move into place and the work folder goes. ``weights`` is the weights
    file (None: hash the tensors).
    Returns name -> ``BoundaryJacobian`` for the boundaries computed in this call (reused ones are not loaded).
    """
    import torch

    from . import jacobians as jac

    cfg = settings if isinstance(settings, jac.JacobianSettings) else jac.JacobianSettings.from_config(settings or {})
    if cfg.context not in ("isolated", "in_context"):
        raise LayergeomError(f"spectra.context: '{cfg.context}' is not one of isolated, in_context")
    samples = jac.resolve_samples(cfg.samples, cfg.context)
    torch_dtype = jac.DTYPES[cfg.dtype]
    if torch_dtype != next(adapter.model.parameters()).dtype:
        adapter.model.to(torch_dtype)
    T = store.window_tokens
    rows = jac.select_samples(store.n_windows, T, cfg.n_samples, samples, seed)  # (N,) sorted store rows
    windows, positions = store.index[rows, 0], store.index[rows, 1]
    groups, group_windows = jac.sample_groups(windows, cfg.n_groups)
    n_groups = len(group_windows)
    summary_idx = jac.summary_subset(len(rows), cfg.summary_samples, seed)
    log.info(
        "%d samples (%s of %d windows), %d groups, summaries on %d; dtype %s, context %s, method %s",
        len(rows), samples, len(np.unique(windows)), n_groups, len(summary_idx), cfg.dtype, cfg.context, cfg.method,
    )  # fmt: skip
    ids = store.index[:, 2]

    def tokens_of(idx):  # the samples' token ids: their own (c,) isolated, their windows' up to them in context
        if cfg.context == "isolated":
            return torch.from_numpy(np.ascontiguousarray(ids[rows[idx]]))
        p = int(positions[idx[0]])
        return torch.from_numpy(np.ascontiguousarray(ids[rows[idx][:, None] - np.arange(p, -1, -1)[None, :]]))

    wid = weights_id(weights, adapter.model)
    machine = machine_id(str(adapter.device), torch_threads=torch.get_num_threads())
    missing = [n for n in boundaries if n not in store.names]
    if missing:
        raise LayergeomError(f"boundary {missing[0]} is not in the activation store {store.path}")
    locks = {w: WorkLock.hold(w, "jacobians") for w in dict.fromkeys(work_dir(outputs[n]["npy"]) for n in boundaries)}
    results, reused = {}, []
    for name in progress(boundaries, desc="jacobians", unit="boundary"):
        work = work_dir(outputs[name]["npy"])
        key = resume_key(store, name, cfg, seed, wid, machine)
        if _finished(work, name, key):
            log.info("%s: reusing the finished result in %s", name, work)
            reused.append(name)
            continue
        states = store.states(name)
        x = torch.from_numpy(np.ascontiguousarray(states[rows]))  # (N, d)

        def prefix_of(idx, states=states):  # (c, p, d): positions 0 .. p-1 of each sample's window
            p = int(positions[idx[0]])
            before = rows[idx][:, None] - np.arange(p, 0, -1)[None, :]
            return torch.from_numpy(np.ascontiguousarray(states[before.ravel()]).reshape(len(idx), p, -1))

        res = jac.boundary_jacobian(
            adapter, name, x, groups, n_groups, summary_idx=summary_idx, context=cfg.context, method=cfg.method,
            prefix_of=prefix_of if cfg.context == "in_context" else None,
            tokens_of=tokens_of if adapter.uses_tokens else None, positions=positions,
            chunk_size=cfg.chunk_size, mode=cfg.autodiff, spectral_norm=cfg.sample_spectral_norm, dtype=torch_dtype,
        )  # fmt: skip
        table = pd.DataFrame(
            {"sample": summary_idx, "window": windows[summary_idx], "position": positions[summary_idx], **res.summaries}
        )
        meta = {
            "boundary": name,
            "n_samples": res.n_samples,
            "group_counts": [int(c) for c in res.group_counts],
            "group_windows": group_windows,
            "method": res.method,
            "context": cfg.context,
            "samples": samples,
            "dtype": cfg.dtype,
            "n_windows": int(len(np.unique(windows))),
            "summary_samples": int(len(summary_idx)),
        }
        part = _partial_paths(work, name)
        _marker(work, name).unlink(missing_ok=True)  # files of another key are rewritten below
        save_npy(res.mean, part["npy"])
        save_npy(res.group_means.astype(np.float32), part["groups"])
        write_tsv(table[SUMMARY_COLUMNS], part["tsv"])
        with atomic_path(part["json"]) as tmp:
            tmp.write_text(json.dumps(meta, indent=2) + "\n")
        mark_done(_marker(work, name), key, [p.name for p in part.values()])
        log.info("%s: J̄ over %d samples (%s), ‖J̄‖_F = %.4g", name, res.n_samples, res.method, np.linalg.norm(res.mean))
        results[name] = res
    if reused:
        log.info("resumed: %d boundaries reused, %d computed", len(reused), len(results))
    for name in boundaries:  # all finished: move into place
        part = _partial_paths(work_dir(outputs[name]["npy"]), name)
        for k in SUFFIXES:
            Path(outputs[name][k]).parent.mkdir(parents=True, exist_ok=True)
            os.replace(part[k], outputs[name][k])
    for work, lock in locks.items():
        remove_work(work, lock=lock)
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


def snapshots_for(files: BoundaryFiles, out, what: str, settings: dict, every_s: float | None) -> Snapshots | None:
    """The snapshots of a table job (``layergeom.resume``), keyed by its Jacobian files and settings."""
    return Snapshots.for_job(out, what, files.paths(), settings, every_s)


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
    snapshot_s: float | None = None,
) -> pd.DataFrame:
    """spectra.tsv (with jackknife intervals over the sample groups) and the eigenvalues, boundary by boundary.

    ``snapshot_s``: save the rows done so far every that many seconds, and resume from them (``resume``).
    """
    counts = files.counts()
    reps = _replicates(counts, ci_blocks, "spectra.tsv")
    if reps is not None:
        log.info("intervals: %s jackknife over %d replicates of %d groups (%s samples), level %g",
                 ci_method, reps.K, len(counts), int(counts.sum()), ci_level)  # fmt: skip
    settings = {"sr_k": sr_k, "dtype": dtype, "rank_tol": rank_tol, "ci_level": ci_level, "ci_method": ci_method,
                "ci_blocks": ci_blocks, "eigenvalues": out_eigenvalues is not None}  # fmt: skip
    snap = snapshots_for(files, out_tsv, "spectra", settings, snapshot_s)
    last = snap.load() if snap is not None else None
    rows, eig = (last["state"]["rows"], last["state"]["eig"]) if last else ([], [])
    done = last["done"] if last else 0
    for i, name in enumerate(progress(files.names, desc="spectra", unit="boundary")):
        if i < done:  # in the snapshot
            continue
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
        if snap is not None:
            snap.save(i + 1, lambda: {"rows": rows, "eig": eig})
    table = order_columns(pd.DataFrame(rows))
    write_tsv(table, out_tsv)
    if out_eigenvalues is not None:
        write_tsv(pd.concat(eig, ignore_index=True), out_eigenvalues)
    if snap is not None:
        snap.clear()
    return table


def write_cumulative(
    files: BoundaryFiles,
    out_tsv,
    variants: Iterable[str] = VARIANTS,
    *,
    ci_level: float = 0.95,
    ci_blocks: int | None = None,
    snapshot_s: float | None = None,
) -> pd.DataFrame:
    """cumulative.tsv: both variants composed in one pass over the boundaries, with jackknife intervals.

    ``snapshot_s``: save the products every that many seconds, and resume from them (``resume``).
    """
    counts = files.counts()
    reps = _replicates(counts, ci_blocks, "cumulative.tsv")
    variants = list(variants)
    settings = {"variants": variants, "ci_level": ci_level, "ci_blocks": ci_blocks}
    snap = snapshots_for(files, out_tsv, "cumulative", settings, snapshot_s)
    skip = snap.done if snap is not None else 0

    def steps():
        for i, name in enumerate(progress(files.names, desc="cumulative", unit="boundary")):
            if i < skip:  # in the snapshot: not read
                yield name, None, None
                continue
            J = files[name]
            yield name, J, None if reps is None else files.deviations(name, J, counts, reps)

    table = cumulative_rows(steps(), variants, weights=None if reps is None else reps.weights, ci_level=ci_level,
                            snapshots=snap)  # fmt: skip
    if reps is None:
        table.insert(4, "erank_ci_low", np.nan)
        table.insert(5, "erank_ci_high", np.nan)
    write_tsv(table, out_tsv)
    if snap is not None:
        snap.clear()
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
    snapshot_s: float | None = None,
    **kwargs,
) -> pd.DataFrame:
    """schur.tsv (both cumulative variants) with jackknife intervals over `ci_blocks` blocks of sample groups.

    ``ci_blocks`` 0 writes no intervals. ``snapshot_s``: save the products every that many seconds, and resume
    from them (``resume``). ``kwargs`` go to ``schur_surgery`` (alphas, seed, variants, sr_k, boundary_metrics,
    orders).
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
    ci_controls = sorted(ci_controls)  # a set for schur_surgery; sorted for the key
    settings = {"dtype": dtype, "rank_tol": rank_tol, "ci_level": ci_level, "ci_blocks": ci_blocks,
                "ci_controls": ci_controls, **{k: sorted(v) if isinstance(v, (set, frozenset)) else
                                               list(v) if isinstance(v, tuple) else v
                                               for k, v in kwargs.items()}}  # fmt: skip
    snap = snapshots_for(files, out_tsv, "schur", settings, snapshot_s)
    table = schur_surgery(files, tol=tol, deviations=devs, weights=weights, ci_level=ci_level,
                          ci_controls=ci_controls, snapshots=snap, **kwargs)  # fmt: skip
    write_tsv(table, out_tsv)
    if snap is not None:
        snap.clear()
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
    snapshot_s: float | None = None,
) -> pd.DataFrame:
    """convergence.tsv: the headline Paper B metrics on the first S groups (nested subsets of the samples).

    ``snapshot_s``: save the state every that many seconds, and resume from it (``resume``).
    """
    from .convergence import convergence_rows

    counts = files.counts()
    S = convergence_sizes(len(counts), sizes)
    log.info("convergence over the first %s of %d groups", S, len(counts))
    if not S:
        log.warning("convergence.tsv: fewer than 2 sample groups, no subsets to compare")
    d = files[files.names[0]].shape[0]
    settings = {"sizes": S, "n_edge": n_edge, "sr_k": sr_k, "dtype": dtype, "rank_tol": rank_tol,
                "ci_level": ci_level}  # fmt: skip
    snap = snapshots_for(files, out_tsv, "convergence", settings, snapshot_s)
    table = convergence_rows(files, counts, S, n_edge=n_edge, sr_k=sr_k, tol=rank_tolerance(d, dtype, rank_tol),
                             ci_level=ci_level, snapshots=snap)  # fmt: skip
    write_tsv(table, out_tsv)
    if snap is not None:
        snap.clear()
    return table
