"""Paper B spectral stage, one function per workflow rule: the only module of ``spectral`` that touches files.

- :func:`boundary_jacobians` (rule ``spectra_jacobians_<model>``): J̄_b of every boundary from the activation
  store -> ``jacobians/{boundary}.npy``, the sample-group means ``{boundary}.groups.npy``, what was averaged
  ``{boundary}.json`` and the per-sample summaries ``{boundary}.tsv`` (resumable after a crash);
- :func:`write_spectra` (``spectra_table``): ``spectra.tsv`` and ``eigenvalues.tsv``; fanned out over blocks of
  boundaries, :func:`write_spectra_part` (``spectra_table_part``) per block and :func:`gather_spectra`
  (``spectra_table_gather``);
- :func:`write_cumulative` (``spectra_cumulative``): ``cumulative.tsv``;
- :func:`write_schur` (``spectra_schur``): ``schur.tsv``; fanned out, :func:`write_schur_prep`
  (``spectra_schur_prep``) per block, :func:`write_schur_chain` (``spectra_schur_chain``) per product chain (or
  per depth segment of one: spectra.chain_segments) and :func:`gather_schur` (``spectra_schur_gather``);
- :func:`write_convergence` (``spectra_convergence``): ``convergence.tsv``.

The tables read the boundaries one at a time in depth order (J̄_b, its group means memory-mapped), so a
checkpoint never holds more than one boundary's (G, d, d) group means and the products' K tangents.

Only the Jacobian job imports torch.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import read_tsv, save_npy, write_tsv
from ..parts import SUFFIX as PART_SUFFIX
from ..parts import read_parts, write_part
from ..resume import (
    Snapshots,
    WorkLock,
    file_id,
    item_done,
    job_key,
    machine_id,
    mark_done,
    remove_unowned,
    remove_work,
    work_dir,
)
from ..runtime import LayergeomError, atomic_path, progress
from . import intervals
from .convergence import convergence_rows
from .cumulative import VARIANTS, cumulative_rows, step_operator
from .linear import spectra_intervals
from .schur import (
    BoundaryStep,
    SurgeryBoundary,
    _chain_states,
    _chains_from,
    alpha_one,
    check_surgery,
    prepare_boundary,
    schur_surgery,
    step_chain,
    surgery_rows,
    surgery_table,
    wants_interval,
)
from .schur_basis import SchurForm, SchurTangent
from .settings import (
    SCHUR_VARIANTS,
    JacobianSettings,
    convergence_sizes,
    schur_alphas,
    schur_chain_name,
    schur_chains,
    schur_order_alphas,
    schur_runs,
)
from .spectra import METRICS, eigenvalue_frame, order_columns, rank_tolerance, spectra_row

log = logging.getLogger("layergeom")

SUMMARY_COLUMNS = ["sample", "window", "position", "x_norm", "fro_norm", "trace", "asymmetry", "spectral_norm"]


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
    from ..models import weights_sha256  # imports torch

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


def jacobian_settings(settings: JacobianSettings | dict) -> JacobianSettings:
    """The Jacobian job's settings (from a ``spectra`` section), with the context checked."""
    cfg = settings if isinstance(settings, JacobianSettings) else JacobianSettings.from_config(settings)
    if cfg.context not in ("isolated", "in_context"):
        raise LayergeomError(f"spectra.context: '{cfg.context}' is not one of isolated, in_context")
    return cfg


@dataclass
class JacobianSamples:
    """The samples of a Jacobian job, the same at every boundary: store rows, their windows and positions,
    their groups (and each group's [first, last] window), and the summary subset."""

    samples: str | int  # spectra.samples, resolved
    rows: np.ndarray  # (N,) sorted store rows
    windows: np.ndarray  # (N,)
    positions: np.ndarray  # (N,)
    groups: np.ndarray  # (N,) group id
    group_windows: list[list[int]]
    summary_idx: np.ndarray  # sorted indices of the samples with per-sample summaries

    @classmethod
    def select(cls, store, cfg: JacobianSettings, seed: int) -> JacobianSamples:
        from . import jacobians as jac  # imports torch

        samples = jac.resolve_samples(cfg.samples, cfg.context)
        rows = jac.select_samples(store.n_windows, store.window_tokens, cfg.n_samples, samples, seed)
        windows, positions = store.index[rows, 0], store.index[rows, 1]
        groups, group_windows = jac.sample_groups(windows, cfg.n_groups)
        summary_idx = jac.summary_subset(len(rows), cfg.summary_samples, seed)
        return cls(samples, rows, windows, positions, groups, group_windows, summary_idx)

    @property
    def n_groups(self) -> int:
        return len(self.group_windows)

    @property
    def n_windows(self) -> int:
        return int(len(np.unique(self.windows)))

    def tokens_of(self, ids: np.ndarray, context: str) -> Callable:
        """idx -> the samples' token ids: their own (c,) isolated, their windows' up to them (c, p + 1) in context
        (``ids``: the store's token column)."""
        import torch

        def tokens_of(idx):
            if context == "isolated":
                return torch.from_numpy(np.ascontiguousarray(ids[self.rows[idx]]))
            p = int(self.positions[idx[0]])
            return torch.from_numpy(np.ascontiguousarray(ids[self.rows[idx][:, None] - np.arange(p, -1, -1)[None, :]]))

        return tokens_of

    def prefix_of(self, states: np.ndarray) -> Callable:
        """idx -> (c, p, d): positions 0 .. p-1 of each sample's window (the samples of idx share p)."""
        import torch

        def prefix_of(idx):
            p = int(self.positions[idx[0]])
            before = self.rows[idx][:, None] - np.arange(p, 0, -1)[None, :]
            return torch.from_numpy(np.ascontiguousarray(states[before.ravel()]).reshape(len(idx), p, -1))

        return prefix_of

    def meta(self, name: str, res, cfg: JacobianSettings) -> dict:
        """A boundary's {boundary}.json record."""
        return {
            "boundary": name,
            "n_samples": res.n_samples,
            "group_counts": [int(c) for c in res.group_counts],
            "group_windows": self.group_windows,
            "method": res.method,
            "context": cfg.context,
            "samples": self.samples,
            "dtype": cfg.dtype,
            "n_windows": self.n_windows,
            "summary_samples": int(len(self.summary_idx)),
        }

    def summary_table(self, res) -> pd.DataFrame:
        """A boundary's per-sample summaries ({boundary}.tsv)."""
        idx = self.summary_idx
        table = pd.DataFrame({"sample": idx, "window": self.windows[idx], "position": self.positions[idx],
                              **res.summaries})  # fmt: skip
        return table[SUMMARY_COLUMNS]


def compute_boundary(adapter, store, name: str, sample: JacobianSamples, cfg: JacobianSettings):
    """``jacobians.boundary_jacobian`` of one boundary over the job's samples -> ``BoundaryJacobian``."""
    import torch

    from . import jacobians as jac  # imports torch

    states = store.states(name)
    x = torch.from_numpy(np.ascontiguousarray(states[sample.rows]))  # (N, d)
    in_context = cfg.context == "in_context"
    return jac.boundary_jacobian(
        adapter, name, x, sample.groups, sample.n_groups, summary_idx=sample.summary_idx, context=cfg.context,
        method=cfg.method, prefix_of=sample.prefix_of(states) if in_context else None,
        tokens_of=sample.tokens_of(store.index[:, 2], cfg.context) if adapter.uses_tokens else None,
        positions=sample.positions, chunk_size=cfg.chunk_size, mode=cfg.autodiff,
        spectral_norm=cfg.sample_spectral_norm, dtype=jac.DTYPES[cfg.dtype],
    )  # fmt: skip


def keep_boundary(work: Path, name: str, key: str, res, sample: JacobianSamples, cfg: JacobianSettings) -> None:
    """Write a finished boundary's files into the work folder, then its marker (key, sizes, sha256) last."""
    part = _partial_paths(work, name)
    _marker(work, name).unlink(missing_ok=True)  # files of another key are rewritten below
    save_npy(res.mean, part["npy"])
    save_npy(res.group_means.astype(np.float32), part["groups"])
    write_tsv(sample.summary_table(res), part["tsv"])
    with atomic_path(part["json"]) as tmp:
        tmp.write_text(json.dumps(sample.meta(name, res, cfg), indent=2) + "\n")
    mark_done(_marker(work, name), key, [p.name for p in part.values()])


def move_into_place(boundaries: list[str], outputs: dict[str, dict[str, str | Path]]) -> None:
    """Every boundary finished: its files move from the work folder to the declared outputs."""
    for name in boundaries:
        part = _partial_paths(work_dir(outputs[name]["npy"]), name)
        for k in SUFFIXES:
            Path(outputs[name][k]).parent.mkdir(parents=True, exist_ok=True)
            os.replace(part[k], outputs[name][k])


def boundary_jacobians(
    adapter,
    store,
    boundaries: list[str],
    outputs: dict[str, dict[str, str | Path]],
    settings: JacobianSettings | dict,
    *,
    seed: int,
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

    Named steps: the settings (:func:`jacobian_settings`), the samples (:class:`JacobianSamples`), then per
    boundary :func:`compute_boundary` and :func:`keep_boundary` unless a finished one is reused, and
    :func:`move_into_place`.
    Returns name -> ``BoundaryJacobian`` for the boundaries computed in this call (reused ones are not loaded).
    """
    import torch

    from . import jacobians as jac  # imports torch

    cfg = jacobian_settings(settings)
    if jac.DTYPES[cfg.dtype] != next(adapter.model.parameters()).dtype:
        adapter.model.to(jac.DTYPES[cfg.dtype])
    sample = JacobianSamples.select(store, cfg, seed)
    log.info(
        "%d samples (%s of %d windows), %d groups, summaries on %d; dtype %s, context %s, method %s",
        len(sample.rows), sample.samples, sample.n_windows, sample.n_groups, len(sample.summary_idx), cfg.dtype,
        cfg.context, cfg.method,
    )  # fmt: skip
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
        res = compute_boundary(adapter, store, name, sample, cfg)
        keep_boundary(work, name, key, res, sample, cfg)
        log.info("%s: J̄ over %d samples (%s), ‖J̄‖_F = %.4g", name, res.n_samples, res.method, np.linalg.norm(res.mean))
        results[name] = res
    if reused:
        log.info("resumed: %d boundaries reused, %d computed", len(reused), len(results))
    move_into_place(boundaries, outputs)
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


def snapshots_for(files: BoundaryFiles, out, what: str, settings: dict, every_s: float | None) -> Snapshots:
    """The snapshots of a table job (``layergeom.resume``), keyed by its Jacobian files and settings
    (``resume.NO_SNAPSHOTS`` when ``every_s`` is None)."""
    return Snapshots.for_job(out, what, files.paths(), settings, every_s)


def spectra_rows(
    files: BoundaryFiles,
    out,
    *,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    ci_method: str,
    ci_blocks: int | None,
    eigenvalues: bool = True,
    snapshot_s: float | None = None,
    what: str = "spectra",
    device: str = "cpu",
) -> tuple[list[dict], list[pd.DataFrame], np.ndarray, Snapshots]:
    """The spectra.tsv rows and eigenvalue frames of `files`' boundaries in depth order, with the group counts
    they were computed with: each boundary's ``spectra_row``, then its intervals (``linear.spectra_intervals``).

    ``snapshot_s``: save the rows done so far every that many seconds next to `out` (the file the caller
    writes), and resume from them (``resume``), as `what` (the snapshot's and its lock's name in the work
    folder: jobs working beside each other in one folder need their own). Returns (rows, eigenvalue frames, counts, the snapshots): the
    caller clears the snapshots once its output is written. ``device``: where the decompositions and the
    replicates' products run (a torch device string; the snapshots hold the rows, so a job resumes on any).
    """
    counts = files.counts()
    reps = _replicates(counts, ci_blocks, "spectra.tsv")
    if reps is not None:
        log.info("intervals: %s jackknife over %d replicates of %d groups (%s samples), level %g",
                 ci_method, reps.K, len(counts), int(counts.sum()), ci_level)  # fmt: skip
    settings = {"sr_k": sr_k, "dtype": dtype, "rank_tol": rank_tol, "ci_level": ci_level, "ci_method": ci_method,
                "ci_blocks": ci_blocks, "eigenvalues": eigenvalues}  # fmt: skip
    snap = snapshots_for(files, out, what, settings, snapshot_s)
    last = snap.load()
    rows, eig = (last["state"]["rows"], last["state"]["eig"]) if last else ([], [])
    done = last["done"] if last else 0
    for i, name in enumerate(progress(files.names, desc="spectra", unit="boundary")):
        if i < done:  # in the snapshot
            continue
        J = files[name]
        tol = rank_tolerance(J.shape[0], dtype, rank_tol)
        row, dec = spectra_row(name, J, _n_samples(files, name), sr_k=sr_k, tol=tol, device=device)
        if reps is None:
            row |= {f"{m}_ci_{s}": np.nan for m in METRICS for s in ("low", "high")}
        else:
            D = files.deviations(name, J, counts, reps)
            row |= spectra_intervals(J, dec, row, D, reps.weights, tol=tol, ci_level=ci_level, ci_method=ci_method,
                                     device=device)  # fmt: skip
        rows.append(row)
        eig.append(eigenvalue_frame(name, dec, tol))
        log.info("%s: rank %d of %d, %d non-zero modes, cond %.4g [%.4g, %.4g]", name, row["numerical_rank"],
                 J.shape[0], row["n_modes"], row["cond"], row["cond_ci_low"], row["cond_ci_high"])  # fmt: skip
        snap.save(i + 1, lambda: {"rows": rows, "eig": eig})
    return rows, eig, counts, snap


def write_spectra_tables(rows: list[dict], eig: list[pd.DataFrame], out_tsv, out_eigenvalues=None) -> pd.DataFrame:
    """spectra.tsv (the rows, ``order_columns``) and eigenvalues.tsv (the frames, concatenated) of a checkpoint."""
    table = order_columns(pd.DataFrame(rows))
    write_tsv(table, out_tsv)
    if out_eigenvalues is not None:
        write_tsv(pd.concat(eig, ignore_index=True), out_eigenvalues)
    return table


def write_spectra(
    files: BoundaryFiles,
    out_tsv,
    out_eigenvalues=None,
    *,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    ci_method: str,
    ci_blocks: int | None,
    snapshot_s: float | None = None,
    device: str = "cpu",
) -> pd.DataFrame:
    """spectra.tsv (with jackknife intervals over the sample groups) and the eigenvalues, boundary by boundary
    (:func:`spectra_rows`, :func:`write_spectra_tables`): the table job of a checkpoint in one job.

    ``snapshot_s``: save the rows done so far every that many seconds, and resume from them (``resume``);
    ``device``: where the decompositions and the replicates' products run.
    """
    rows, eig, _, snap = spectra_rows(
        files, out_tsv, sr_k=sr_k, dtype=dtype, rank_tol=rank_tol, ci_level=ci_level, ci_method=ci_method,
        ci_blocks=ci_blocks, eigenvalues=out_eigenvalues is not None, snapshot_s=snapshot_s, device=device,
    )  # fmt: skip
    table = write_spectra_tables(rows, eig, out_tsv, out_eigenvalues)
    snap.clear()
    return table


def _remove_unowned_work(out_part, siblings: Iterable | None, name) -> None:
    """Before a part job works: remove from its work folder what a killed job of other settings left there (a
    block, variant or subset the current settings do not have). `siblings`: the outputs of every part job of the
    current settings sharing the folder (None: nothing is removed); `name`: output -> its work's name."""
    if siblings is not None:
        remove_unowned(work_dir(out_part), {name(p) for p in siblings})


def _spectra_part_name(out_part) -> str:
    return f"spectra_part_{Path(out_part).stem}"


def write_spectra_part(
    files: BoundaryFiles,
    out_part,
    *,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    ci_method: str,
    ci_blocks: int | None,
    snapshot_s: float | None = None,
    device: str = "cpu",
    siblings: Iterable | None = None,
) -> None:
    """One block of a checkpoint's boundaries (rule ``spectra_table_part``): the rows and eigenvalue frames of
    :func:`spectra_rows` as they are (restored bit for bit, so the gather writes the same bytes) with the
    boundaries and the group counts, in a part file (``layergeom.parts``: arrays and JSON, with its inputs and
    settings) for :func:`gather_spectra`.

    ``snapshot_s``: save the rows done so far every that many seconds, and resume from them (``resume``); the
    parts of a checkpoint share their work folder (``parts/spectra/.partial/``), each with its own snapshot, and
    `siblings` (the outputs of every part job of the current settings) lets a part remove the work of blocks the
    settings no longer have; ``device``: where the decompositions and the replicates' products run.
    """
    _remove_unowned_work(out_part, siblings, _spectra_part_name)
    settings = {"sr_k": sr_k, "dtype": dtype, "rank_tol": rank_tol, "ci_level": ci_level, "ci_method": ci_method,
                "ci_blocks": ci_blocks}  # fmt: skip
    rows, eig, counts, snap = spectra_rows(
        files, out_part, **settings, eigenvalues=True, snapshot_s=snapshot_s, what=_spectra_part_name(out_part),
        device=device,
    )  # fmt: skip
    data = {"boundaries": list(files.names), "counts": [int(c) for c in counts], "rows": rows, "eigenvalues": eig}
    write_part(out_part, "spectra", data, job="spectra_table_part", inputs=files.paths(), settings=settings)
    snap.clear()


def _same_counts(parts) -> None:
    """The parts of one checkpoint's table share one grouping of the samples."""
    first = parts[0] if parts else None
    for part in parts[1:]:
        if part.data["counts"] != first.data["counts"]:
            raise LayergeomError(
                f"{part.path}: group_counts {part.data['counts']} differ from {first.path}'s {first.data['counts']}; "
                "the intervals need one grouping of the samples per checkpoint: rerun the Jacobian job"
            )


def gather_spectra(parts: list, boundaries: list[str], out_tsv, out_eigenvalues=None, *, inputs=None) -> pd.DataFrame:
    """spectra.tsv and eigenvalues.tsv of a checkpoint from its parts (rule ``spectra_table_gather``), in
    boundary order: byte for byte what :func:`write_spectra` writes in one job.

    The parts must cover `boundaries` in order, each once, and share one grouping of the samples (the group
    counts every part's intervals were computed with, as :meth:`BoundaryFiles.counts` checks in one job) and
    their settings; with `inputs` (the checkpoint's Jacobian files), each part must have been computed from them
    as they are now (``parts.read_parts``: a truncated, foreign or stale part is one error naming it).
    """
    loaded = read_parts(parts, "spectra", inputs=inputs, job="spectra_table_part")
    _same_counts(loaded)
    rows, eig, names = [], [], []
    for part in loaded:
        names += part.data["boundaries"]
        rows += part.data["rows"]
        eig += part.data["eigenvalues"]
    if names != list(boundaries):
        raise LayergeomError(f"the spectra parts {[str(p) for p in parts]} hold boundaries {names}, not the "
                             f"checkpoint's {list(boundaries)} in order; rerun the spectra_table_part jobs")  # fmt: skip
    return write_spectra_tables(rows, eig, out_tsv, out_eigenvalues)


def write_cumulative(
    files: BoundaryFiles,
    out_tsv,
    variants: Iterable[str] = VARIANTS,
    *,
    ci_level: float,
    ci_blocks: int | None,
    snapshot_s: float | None = None,
    device: str = "cpu",
) -> pd.DataFrame:
    """cumulative.tsv: both variants composed in one pass over the boundaries, with jackknife intervals.

    ``snapshot_s``: save the products every that many seconds, and resume from them (``resume``; on any
    device). ``device``: where the products compute (a torch device string, ``workflow.job_device``).
    """
    table, _, snap = _cumulative_table(files, out_tsv, list(variants), ci_level=ci_level, ci_blocks=ci_blocks,
                                       snapshot_s=snapshot_s, what="cumulative", device=device)  # fmt: skip
    write_tsv(table, out_tsv)
    snap.clear()
    return table


def _cumulative_table(
    files: BoundaryFiles,
    out,
    variants: list[str],
    *,
    ci_level: float,
    ci_blocks: int | None,
    snapshot_s: float | None,
    what: str,
    device: str,
) -> tuple[pd.DataFrame, np.ndarray, Snapshots]:
    """The cumulative.tsv rows of `variants` (``cumulative_rows``, nan interval columns without replicates), the
    group counts and the snapshots (as `what`, next to `out`): the caller writes, then clears them."""
    counts = files.counts()
    reps = _replicates(counts, ci_blocks, "cumulative.tsv")
    settings = {"variants": variants, "ci_level": ci_level, "ci_blocks": ci_blocks}
    snap = snapshots_for(files, out, what, settings, snapshot_s)
    skip = snap.done

    def steps():
        for i, name in enumerate(progress(files.names, desc="cumulative", unit="boundary")):
            if i < skip:  # in the snapshot: not read
                yield name, None, None
                continue
            J = files[name]
            yield name, J, None if reps is None else files.deviations(name, J, counts, reps)

    table = cumulative_rows(steps(), variants, weights=None if reps is None else reps.weights, ci_level=ci_level,
                            snapshots=snap, device=device)  # fmt: skip
    if reps is None:
        table.insert(4, "erank_ci_low", np.nan)
        table.insert(5, "erank_ci_high", np.nan)
    return table, counts, snap


def write_cumulative_variant(
    files: BoundaryFiles,
    out_part,
    *,
    variant: str,
    ci_level: float,
    ci_blocks: int | None,
    snapshot_s: float | None = None,
    device: str = "cpu",
    siblings: Iterable | None = None,
) -> None:
    """One variant's chain of cumulative.tsv through every boundary (rule ``spectra_cumulative_variant``): the
    rows :func:`write_cumulative` computes for it (``cumulative_rows`` with ``variants=[variant]``: the chains of
    the variants never meet, so they are the same numbers), as computed, in a part file (``layergeom.parts``) for
    :func:`gather_cumulative`.

    ``snapshot_s``: save the product every that many seconds, and resume from it (``resume``); the variants of a
    checkpoint share their work folder (``parts/cumulative/.partial/``), each with its own snapshot (`siblings`:
    the outputs of every variant job, ``{variant}.npz``; the work of others is removed). ``device``: where the
    products compute (it resumes on any).
    """
    step_operator(np.zeros((1, 1)), variant)  # an unknown variant: one clear error before any work
    _remove_unowned_work(out_part, siblings, lambda p: f"cumulative_{Path(p).stem}")
    table, counts, snap = _cumulative_table(files, out_part, [variant], ci_level=ci_level, ci_blocks=ci_blocks,
                                            snapshot_s=snapshot_s, what=f"cumulative_{variant}",
                                            device=device)  # fmt: skip
    data = {"variant": variant, "boundaries": list(files.names), "counts": [int(c) for c in counts], "table": table}
    write_part(out_part, "cumulative", data, job="spectra_cumulative_variant", inputs=files.paths(),
               settings={"ci_level": ci_level, "ci_blocks": ci_blocks})  # fmt: skip
    snap.clear()


def gather_cumulative(
    parts: list, boundaries: list[str], out_tsv, variants: Iterable[str] = VARIANTS, *, inputs=None
) -> pd.DataFrame:
    """cumulative.tsv of a checkpoint from its variants' parts (rule ``spectra_cumulative_gather``), the variants
    in `variants` order: byte for byte what :func:`write_cumulative` writes in one job (its table is sorted by
    variant, then depth: the parts' rows one after the other).

    There must be one part per variant, in order, each over `boundaries` in order, all with one grouping of the
    samples and one set of settings; with `inputs` (the checkpoint's Jacobian files), each computed from them as
    they are now (``parts.read_parts``)."""
    loaded = read_parts(parts, "cumulative", inputs=inputs, job="spectra_cumulative_variant")
    _same_counts(loaded)
    got = [p.data["variant"] for p in loaded]
    if got != list(variants):
        raise LayergeomError(f"the cumulative parts {[str(p) for p in parts]} hold the variants {got}, not "
                             f"{list(variants)} in order; rerun the spectra_cumulative_variant jobs")  # fmt: skip
    for p in loaded:
        if p.data["boundaries"] != list(boundaries):
            raise LayergeomError(f"{p.path}: a chain over {p.data['boundaries']}, not the checkpoint's "
                                 f"{list(boundaries)} in order; rerun its spectra_cumulative_variant job")  # fmt: skip
    table = pd.concat([p.data["table"] for p in loaded], ignore_index=True)
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


# ---- the Schur surgery fanned out (spectra.boundaries_per_job): prep per block, a job per chain, a gather ----
#: the arrays of one boundary in a prep's .npz (``b{i}.{name}``: i its place in the block): the Schur form
#: (Q, λ, N, the number of non-zero modes), the order sampler's eigenvectors Y (orders, where usable), the random
#: control R' = Q_c N' Q_cᴴ (a run with the random N') and the tangents (intervals: δJ₀, δ‖N‖/‖N‖, and δR' with
#: a random control in schur_ci_controls)
SCHUR_PREP_ARRAYS = ("Q", "lam", "N", "n_nonzero", "Y", "Rr", "dJ0", "dnorm_rel", "dRr")


def _schur_prep_name(out_part) -> str:
    """A prep job's name in its work folder (its snapshot, lock and boundaries' arrays): by its block."""
    return f"schur_prep_{Path(out_part).stem}"


def _schur_chain_name(out_part) -> str:
    """A chain job's name in its work folder: by its output, the chain and its segment (``update_none_a0.5.s1``)."""
    name = Path(out_part).name
    return f"schur_chain_{name[: -len(PART_SUFFIX)] if name.endswith(PART_SUFFIX) else name}"


def _order_alphas(alphas, order_alphas) -> list[float]:
    """``settings.schur_order_alphas``, its error as one clear line (LayergeomError)."""
    try:
        return schur_order_alphas(alphas, order_alphas)
    except ValueError as e:
        raise LayergeomError(str(e)) from None


def _schur_setup(files: BoundaryFiles, ci_blocks: int, ci_controls, dtype: str, rank_tol, what: str):
    """(τ, the replicates or None, the group counts, ci_controls sorted) of a Schur job."""
    d = files[files.names[0]].shape[0]
    counts = files.counts()
    reps = _replicates(counts, ci_blocks, what) if ci_blocks != 0 else None
    if reps is not None:
        log.info("Schur intervals: linearised jackknife over %d blocks of %d groups, controls %s",
                 reps.K, len(counts), ", ".join(ci_controls))  # fmt: skip
    return rank_tolerance(d, dtype, rank_tol), reps, counts, sorted(ci_controls)


def _schur_settings(dtype, rank_tol, ci_level, ci_blocks, ci_controls, kwargs) -> dict:
    return {"dtype": dtype, "rank_tol": rank_tol, "ci_level": ci_level, "ci_blocks": ci_blocks,
            "ci_controls": ci_controls, **{k: sorted(v) if isinstance(v, (set, frozenset)) else
                                           list(v) if isinstance(v, tuple) else v
                                           for k, v in kwargs.items()}}  # fmt: skip


def write_schur(
    files: BoundaryFiles,
    out_tsv,
    cumulative,
    *,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    ci_blocks: int,
    ci_controls: Iterable[str],
    snapshot_s: float | None = None,
    device: str = "cpu",
    **kwargs,
) -> pd.DataFrame:
    """schur.tsv (both cumulative variants) with jackknife intervals over `ci_blocks` blocks of sample groups; the
    rows of α = 1 with the own N (J̄ itself) from `cumulative`, the checkpoint's cumulative.tsv (``schur.alpha_one``).

    ``ci_blocks`` 0 writes no intervals. ``snapshot_s``: save the products every that many seconds, and resume
    from them (``resume``). ``kwargs`` go to ``schur_surgery`` (alphas, seed, sr_k, boundary_metrics, orders,
    order_alphas, variants). ``device``: where the decompositions and the product chains compute (``workflow.job_device``).
    """
    _order_alphas(kwargs["alphas"], kwargs["order_alphas"])  # a bad spectra.schur_order_alphas: one clear line
    tol, reps, counts, ci_controls = _schur_setup(files, ci_blocks, ci_controls, dtype, rank_tol, "schur.tsv")
    devs, weights = (None, None) if reps is None else (_Deviations(files, counts, reps), reps.weights)
    settings = _schur_settings(dtype, rank_tol, ci_level, ci_blocks, ci_controls, kwargs)
    snap = snapshots_for(files, out_tsv, "schur", settings, snapshot_s)
    table = schur_surgery(files, tol=tol, deviations=devs, weights=weights, ci_level=ci_level,
                          ci_controls=ci_controls, cumulative=read_tsv(cumulative, exact=True), snapshots=snap,
                          device=device, **kwargs)  # fmt: skip
    write_tsv(table, out_tsv)
    snap.clear()
    return table


class _NpzWriter:
    """Arrays written one at a time into an uncompressed .npz (what ``np.savez`` writes; ``np.load`` reads one
    member without the others), so a prep job holds one boundary's arrays at a time."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True)

    def put(self, key: str, array) -> None:
        with self.zip.open(f"{key}.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array(fh, np.asanyarray(array), allow_pickle=False)

    def copy_from(self, path, prefix: str) -> None:
        """Every array of the .npz at `path`, as it is stored, under `prefix` + its name."""
        with zipfile.ZipFile(path) as src:
            for member in src.namelist():
                with src.open(member) as fin, self.zip.open(prefix + member, "w", force_zip64=True) as fout:
                    shutil.copyfileobj(fin, fout, 1 << 24)

    def close(self) -> None:
        self.zip.close()


def write_schur_prep(
    files: BoundaryFiles,
    out_part,
    out_arrays,
    *,
    first: int,
    alphas,
    seed: int,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    boundary_metrics: str,
    orders: int,
    ci_blocks: int,
    ci_controls: Iterable[str],
    order_alphas,
    snapshot_s: float | None = None,
    device: str = "cpu",
    siblings: Iterable | None = None,
) -> None:
    """One block of a checkpoint's boundaries for the fanned-out Schur surgery (rule ``spectra_schur_prep``):
    ``schur.prepare_boundary`` of each (the single job's per-boundary step; `first` is the depth index of the
    block's first boundary: it seeds the control N' and the random orders). `out_arrays` (.npz) gets what the
    chains read and cannot recompute cheaply (``SCHUR_PREP_ARRAYS``, lossless); `out_part` (a part file,
    ``layergeom.parts``: arrays and JSON with the record of this job) the records the gather writes into
    schur.tsv (the b_* metrics, ‖N‖_F), the boundaries and the group counts.

    Each boundary's arrays go into the work folder (``parts/schur/prep/.partial/``) as it finishes, then into
    `out_arrays` at the end. ``snapshot_s``: save the records done so far every that many seconds, and resume
    after them (``resume``; their boundaries' arrays are in the work folder). ``device``: where the
    decompositions run. `siblings`: the record parts of every block of the current settings (the work a killed
    prep of a block they no longer have left in the folder is removed).
    """
    check_surgery(boundary_metrics, orders)
    spread = _order_alphas(alphas, order_alphas)
    tol, reps, counts, ci_controls = _schur_setup(files, ci_blocks, ci_controls, dtype, rank_tol, "schur.tsv")
    what = _schur_prep_name(out_part)
    _remove_unowned_work(out_part, siblings, _schur_prep_name)
    common = _schur_settings(dtype, rank_tol, ci_level=None, ci_blocks=ci_blocks, ci_controls=ci_controls,
                             kwargs={"alphas": list(alphas), "seed": seed, "sr_k": sr_k,
                                     "boundary_metrics": boundary_metrics, "orders": orders,
                                     "order_alphas": spread})  # fmt: skip
    settings = common | {"first": first}
    snap = snapshots_for(files, out_part, what, settings, snapshot_s)
    work = work_dir(out_part)
    done = [work / f"{what}.b{i}.npz" for i in range(len(files.names))]  # each boundary's arrays
    last = snap.load()
    records = [] if last is None else last["state"]["records"]
    if any(not p.exists() for p in done[: len(records)]):  # a snapshot without its arrays: start afresh
        records = []
    for i, name in enumerate(progress(files.names, desc="schur prep", unit="boundary")):
        if i < len(records):
            continue
        J = files[name]
        D = None if reps is None else files.deviations(name, J, counts, reps)
        prep = prepare_boundary(name, J, D, index=first + i, seed=seed, tol=tol, sr_k=sr_k, alphas=alphas,
                                boundary_metrics=boundary_metrics, orders=orders, ci_controls=ci_controls,
                                order_alphas=spread, device=device)  # fmt: skip
        form, tan = prep.boundary.form, prep.tangent
        arrays = {"Q": form.Q, "lam": form.lam, "N": form.N, "n_nonzero": np.int64(form.n_nonzero), "Y": prep.Y}
        if any(c == "random" for _, c in schur_runs(alphas)):
            arrays["Rr"] = prep.boundary.R_rand
        if tan is not None:
            arrays |= {"dJ0": tan.dJ0, "dnorm_rel": tan.dnorm_rel, "dRr": tan.dRr}
        with atomic_path(done[i]) as tmp:
            npz = _NpzWriter(tmp)
            try:
                for key, a in arrays.items():
                    if a is not None:
                        npz.put(key, a)
            finally:
                npz.close()
        records.append(prep.record)
        del prep, form, tan, arrays
        snap.save(i + 1, lambda: {"records": records})
    with atomic_path(out_arrays) as tmp:  # the block's arrays, member by member: b{i}.{key}
        npz = _NpzWriter(tmp)
        try:
            for i, path in enumerate(done):
                npz.copy_from(path, f"b{i}.")
        finally:
            npz.close()
    data = {"boundaries": list(files.names), "first": int(first), "counts": [int(c) for c in counts],
            "records": records}  # fmt: skip
    write_part(out_part, "schur_prep", data, job="spectra_schur_prep", inputs=files.paths(), settings=common)
    remove_work(work, [p.name for p in done])
    snap.clear()


class _PrepArrays:
    """boundary index -> its prep arrays (``write_schur_prep``'s .npz of its block), read when asked."""

    def __init__(self, arrays: list, blocks: list[list[str]]):
        self.where = [(path, i) for path, block in zip(arrays, blocks) for i in range(len(block))]

    def read(self, bi: int, keys) -> dict:
        path, i = self.where[bi]
        with np.load(path, allow_pickle=False) as z:
            return {k: z[f"b{i}.{k}"] if f"b{i}.{k}.npy" in z.zip.namelist() else None for k in keys}


def write_schur_chain(
    files: BoundaryFiles,
    prep_arrays: list,
    blocks: list[list[str]],
    out_part,
    *,
    chain: str,
    alphas,
    seed: int,
    orders: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    ci_blocks: int,
    ci_controls: Iterable[str],
    order_alphas,
    segment: tuple[int, int] | None = None,
    snapshot_s: float | None = None,
    device: str = "cpu",
    siblings: Iterable | None = None,
) -> None:
    """One product chain of the Schur surgery through every boundary in depth order (rule ``spectra_schur_chain``):
    `chain` a name of ``settings.schur_chains`` (``schur_chain_name``), stepped by ``schur.step_chain`` (the
    single job's) on the operators rebuilt from the prep arrays (`prep_arrays`, one .npz per block of
    `blocks`), J̄ and the replicates' deviations from `files` (every boundary). Writes its results per depth
    in a part file (``layergeom.parts``) for ``gather_schur``.

    ``segment`` (start, end): only the depths start..end−1 (spectra.chain_segments; ``settings.
    chain_segment_bounds``): the products are advanced through the depths before `start` without their SVDs
    (``step_chain(..., advance=True)``: the same products in the same order), then stepped; the part holds
    the results of its own depths and its bounds. None: every depth.

    ``snapshot_s``: save the products every that many seconds, and resume from them (``resume``); the chains of
    a checkpoint share their work folder (``parts/schur/chains/.partial/``), each (segment) with its own
    snapshot, which covers its prefix as well (`siblings`: the outputs of every chain job of the current
    settings; the work of others, such as a chain or segment the settings no longer have, is removed).
    ``device``: where the product chain computes (it resumes on any).
    """

    alphas = schur_alphas(alphas)
    spread = _order_alphas(alphas, order_alphas)
    plan = {schur_chain_name(c): c for c in schur_chains(alphas, orders, SCHUR_VARIANTS, spread)}
    if chain not in plan:
        raise LayergeomError(f"no Schur chain '{chain}' at alphas {alphas}, {orders} orders at α {spread}; one of "
                             f"{sorted(plan)}")  # fmt: skip
    spec = plan[chain]
    if [n for block in blocks for n in block] != list(files.names):
        raise LayergeomError(f"the Schur prep blocks {blocks} do not hold the boundaries {files.names} in order")
    n = len(files.names)
    first, end = (0, n) if segment is None else (int(segment[0]), int(segment[1]))
    if not 0 <= first < end <= n:
        raise LayergeomError(f"Schur chain '{chain}': segment [{first}, {end}) is not a depth range of {n} boundaries")
    _, reps, counts, ci_controls = _schur_setup(files, ci_blocks, ci_controls, dtype, rank_tol, "schur.tsv")
    weights = None if reps is None else reps.weights
    prep = _PrepArrays(prep_arrays, blocks)
    _remove_unowned_work(out_part, siblings, _schur_chain_name)
    common = _schur_settings(dtype, rank_tol, ci_level, ci_blocks, ci_controls,
                             {"alphas": alphas, "seed": seed, "orders": orders, "order_alphas": spread})  # fmt: skip
    settings = common | {"chain": chain} | ({} if segment is None else {"segment": [first, end]})
    what = _schur_chain_name(out_part)
    snap = Snapshots.for_job(out_part, what, [*files.paths(), *prep_arrays], settings, snapshot_s)
    last = snap.load()
    start, results, chains = 0, [], {}
    if last is not None:
        start, results, chains = last["done"], last["state"]["results"], _chains_from(last["state"]["chains"], device)
    # deviations where the chain carries an interval; the Schur form's tangents unless it is J̄ itself
    needs_D = reps is not None and spec[0] == "run" and wants_interval(spec[2], spec[3], ci_controls)
    random = spec[0] == "run" and spec[3] == "random"
    tangent = ["dJ0", "dnorm_rel", *(["dRr"] if random else [])] if needs_D and spec[2:] != (1.0, "none") else []
    keys = ["Q", "lam", "N", "n_nonzero", *(["Y"] if spec[0] == "order" else []), *(["Rr"] if random else []),
            *tangent]  # fmt: skip
    for bi in progress(range(start, end), total=end, initial=start, desc=f"schur {chain}",
                       unit="boundary"):  # fmt: skip
        name = files.names[bi]
        J = files[name]
        a = prep.read(bi, keys)
        form = SchurForm(Q=a["Q"], lam=a["lam"], N=a["N"], n_nonzero=int(a["n_nonzero"]))
        b = SurgeryBoundary(J=np.asarray(J, dtype=np.float64), form=form, seed=seed, index=bi, Rr=a.get("Rr"))
        tan = None
        if a.get("dJ0") is not None:
            tan = SchurTangent(W=None, dlam=None, dJ0=a["dJ0"], dnorm_rel=a["dnorm_rel"], dRr=a.get("dRr"))
        D = files.deviations(name, J, counts, reps) if needs_D else None
        st = BoundaryStep(b, tan, D, a.get("Y"), orders, ci_controls)
        step = {"alphas": alphas, "weights": weights, "ci_level": ci_level, "device": device,
                "variants": SCHUR_VARIANTS, "order_alphas": spread}  # fmt: skip
        if bi < first:  # the prefix: the products only
            step_chain(spec, chains, st, advance=True, **step)
        else:
            results.append(step_chain(spec, chains, st, **step))
        del st, b, form, a, tan, D
        snap.save(bi + 1, lambda: {"results": results, "chains": _chain_states(chains)})
    data = {"chain": list(spec), "boundaries": list(files.names), "counts": [int(c) for c in counts],
            "results": results, "start": first, "end": end}  # fmt: skip
    write_part(out_part, "schur_chain", data, job="spectra_schur_chain", inputs=files.paths(), settings=common)
    snap.clear()


def gather_schur(
    preps: list,
    chains: list,
    boundaries: list[str],
    out_tsv,
    cumulative,
    *,
    alphas,
    orders: int,
    order_alphas,
    segments: int | Mapping[str, int] = 1,
    inputs=None,
) -> pd.DataFrame:
    """schur.tsv of a checkpoint from its prep records, its chains' results and (α = 1, own N) its cumulative.tsv
    (rule ``spectra_schur_gather``): byte for byte what :func:`write_schur` writes in one job (``schur.surgery_rows``, ``surgery_table``).

    The preps must cover `boundaries` in order, each once; every chain of ``schur_chains`` must be there, over
    the same boundaries, as min(its count, boundaries) parts whose depth ranges cover every depth once, in order
    (their results concatenated); all with one grouping of the samples. `segments`: the count of every chain,
    or each chain's by its name (``schur_chain_name``; spectra.chain_segments splits the costlier chains into
    more jobs, ``resources.schur_chain_segments``). The parts are read by ``parts.read_parts`` (one clear error
    for a truncated, pickled, foreign or stale part, or one of other settings than its siblings'; with `inputs`,
    the checkpoint's Jacobian files, each computed from them as they are now)."""
    inputs = None if inputs is None else list(inputs)
    prep_parts = [(p.path, p.data) for p in read_parts(preps, "schur_prep", inputs=inputs, job="spectra_schur_prep")]
    chain_parts = [(p.path, p.data) for p in read_parts(chains, "schur_chain", inputs=inputs,
                                                         job="spectra_schur_chain")]  # fmt: skip
    records, names, first = [], [], None

    def same_counts(path, part):
        nonlocal first
        if first is None:
            first = (path, part["counts"])
        elif part["counts"] != first[1]:
            raise LayergeomError(f"{path}: group_counts {part['counts']} differ from {first[0]}'s {first[1]}; the "
                                 "intervals need one grouping of the samples per checkpoint: rerun the Jacobian job")  # fmt: skip

    for path, part in prep_parts:
        same_counts(path, part)
        names += part["boundaries"]
        records += part["records"]
    if names != list(boundaries):
        raise LayergeomError(f"the Schur prep parts {[str(p) for p in preps]} hold boundaries {names}, not the "
                             f"checkpoint's {list(boundaries)} in order; rerun the spectra_schur_prep jobs")  # fmt: skip
    alphas = schur_alphas(alphas)
    spread = _order_alphas(alphas, order_alphas)
    plan = schur_chains(alphas, orders, SCHUR_VARIANTS, spread)
    n, pieces = len(names), {}
    for path, part in chain_parts:
        same_counts(path, part)
        spec = tuple(part["chain"])
        start, end = int(part.get("start", 0)), int(part.get("end", n))
        if part["boundaries"] != names or len(part["results"]) != end - start:
            raise LayergeomError(f"{path}: chain {spec} over boundaries {part['boundaries']} with "
                                 f"{len(part['results'])} results for depths [{start}, {end}) (not the checkpoint's "
                                 f"{names}); rerun the spectra_schur_chain jobs")  # fmt: skip
        pieces.setdefault(spec, []).append((start, end, path, part["results"]))
    results = {}
    for spec, got in pieces.items():
        if isinstance(segments, Mapping):  # a chain not of the plan: refused below
            count = segments.get(schur_chain_name(spec), 1) if spec in plan else 1
        else:
            count = segments
        want = min(max(1, int(count)), n)
        got.sort(key=lambda p: (p[0], p[1]))
        at = 0
        for start, end, path, _ in got:
            if start != at:
                raise LayergeomError(f"{path}: chain {spec} segment [{start}, {end}) does not start at depth {at} "
                                     f"({'a gap' if start > at else 'an overlap'}); its segments "
                                     f"{[(p[0], p[1]) for p in got]} must cover depths 0..{n - 1} once, in order: "
                                     "rerun the spectra_schur_chain jobs")  # fmt: skip
            at = end
        if at != n or len(got) != want:
            raise LayergeomError(f"the Schur chain {spec} has segments {[(p[0], p[1]) for p in got]}, not {want} "
                                 f"covering depths 0..{n - 1}; rerun the spectra_schur_chain jobs")  # fmt: skip
        results[spec] = [r for *_, res in got for r in res]
    if set(results) != set(plan):
        raise LayergeomError(f"the Schur chain parts hold {sorted(map(str, results))}, not the chains "
                             f"{sorted(map(str, plan))}; rerun the spectra_schur_chain jobs")  # fmt: skip
    if 1.0 in alphas:  # J̄ itself: cumulative.tsv's rows (``schur.alpha_one``)
        results |= alpha_one(read_tsv(cumulative, exact=True), names, SCHUR_VARIANTS)
    rows = surgery_rows(records, results, alphas=alphas, variants=list(SCHUR_VARIANTS), orders=orders,
                        order_alphas=spread)  # fmt: skip
    table = surgery_table(rows, list(SCHUR_VARIANTS))
    write_tsv(table, out_tsv)
    return table


def write_convergence(
    files: BoundaryFiles,
    out_tsv,
    *,
    sizes: list[int] | None,
    n_edge: int,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    snapshot_s: float | None = None,
    device: str = "cpu",
) -> pd.DataFrame:
    """convergence.tsv: the headline Paper B metrics on the first S groups (nested subsets of the samples).

    ``snapshot_s``: save the state every that many seconds, and resume from it (``resume``; on any device).
    ``device``: where the product chains compute (a torch device string, ``workflow.job_device``).
    """
    counts = files.counts()
    S = convergence_sizes(len(counts), sizes)
    log.info("convergence over the first %s of %d groups", S, len(counts))
    if not S:
        log.warning("convergence.tsv: fewer than 2 sample groups, no subsets to compare")
    table, snap = _convergence_table(files, out_tsv, counts, S, what="convergence", n_edge=n_edge, sr_k=sr_k,
                                     dtype=dtype, rank_tol=rank_tol, ci_level=ci_level, snapshot_s=snapshot_s,
                                     device=device)  # fmt: skip
    write_tsv(table, out_tsv)
    snap.clear()
    return table


def _convergence_table(
    files: BoundaryFiles,
    out,
    counts: np.ndarray,
    S: list[int],
    *,
    what: str,
    n_edge: int,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    snapshot_s: float | None,
    device: str,
) -> tuple[pd.DataFrame, Snapshots]:
    """The convergence.tsv rows of the subset sizes `S` (``convergence_rows``) and the snapshots (as `what`, next
    to `out`): the caller writes, then clears them."""
    d = files[files.names[0]].shape[0]
    settings = {"sizes": S, "n_edge": n_edge, "sr_k": sr_k, "dtype": dtype, "rank_tol": rank_tol,
                "ci_level": ci_level}  # fmt: skip
    snap = snapshots_for(files, out, what, settings, snapshot_s)
    table = convergence_rows(files, counts, S, n_edge=n_edge, sr_k=sr_k, tol=rank_tolerance(d, dtype, rank_tol),
                             ci_level=ci_level, snapshots=snap, device=device)  # fmt: skip
    return table, snap


def write_convergence_subset(
    files: BoundaryFiles,
    out_part,
    *,
    subset: int,
    sizes: list[int] | None,
    n_edge: int,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    snapshot_s: float | None = None,
    device: str = "cpu",
    siblings: Iterable | None = None,
) -> None:
    """The convergence.tsv rows of one subset size (rule ``spectra_convergence_subset``): the `subset`-th of
    ``convergence_sizes(G, sizes)`` (G the Jacobian job's groups, known once it ran: the workflow fans out over
    the index, as many as the config's n_groups allows, and an index past the sizes of the actual G has no
    rows). ``convergence_rows`` over that one size: every size's arithmetic is its own (its first S groups,
    weights, replicates and chains), so the rows are those :func:`write_convergence` computes for it; in a part
    file (``layergeom.parts``) for :func:`gather_convergence`.

    ``snapshot_s``: save the state every that many seconds, and resume from it (``resume``); the subsets of a
    checkpoint share their work folder (``parts/convergence/.partial/``), each with its own snapshot (`siblings`:
    the outputs of every subset job, ``{k}.npz``; the work of others is removed). ``device``: where the product
    chains compute (it resumes on any).
    """
    _remove_unowned_work(out_part, siblings, lambda p: f"convergence_{Path(p).stem}")
    counts = files.counts()
    every = convergence_sizes(len(counts), sizes)
    S = every[subset : subset + 1] if subset >= 0 else []
    log.info("convergence subset %d: the first %s of %d groups (sizes %s)", subset, S, len(counts), every)
    table, snap = _convergence_table(files, out_part, counts, S, what=f"convergence_{subset}", n_edge=n_edge,
                                     sr_k=sr_k, dtype=dtype, rank_tol=rank_tol, ci_level=ci_level,
                                     snapshot_s=snapshot_s, device=device)  # fmt: skip
    data = {"subset": int(subset), "sizes": every, "boundaries": list(files.names),
            "counts": [int(c) for c in counts], "table": table}  # fmt: skip
    settings = {"sizes": sizes, "n_edge": n_edge, "sr_k": sr_k, "dtype": dtype, "rank_tol": rank_tol,
                "ci_level": ci_level}  # fmt: skip
    write_part(out_part, "convergence", data, job="spectra_convergence_subset", inputs=files.paths(),
               settings=settings)  # fmt: skip
    snap.clear()


def gather_convergence(parts: list, boundaries: list[str], out_tsv, *, inputs=None) -> pd.DataFrame:
    """convergence.tsv of a checkpoint from its subsets' parts (rule ``spectra_convergence_gather``), in size
    order: byte for byte what :func:`write_convergence` writes in one job (its rows are size by size).

    The parts must be the subsets 0, 1, … in order, over `boundaries`, with one grouping of the samples and one
    set of settings, and cover every size of it (more parts than sizes: the extra ones have no rows); with
    `inputs` (the checkpoint's Jacobian files), each computed from them as they are now (``parts.read_parts``)."""
    loaded = read_parts(parts, "convergence", inputs=inputs, job="spectra_convergence_subset")
    if not loaded:
        raise LayergeomError("no convergence parts to gather")
    _same_counts(loaded)
    every = loaded[0].data["sizes"]
    for k, p in enumerate(loaded):
        d = p.data
        if d["subset"] != k or d["sizes"] != every or d["boundaries"] != list(boundaries):
            raise LayergeomError(f"{p.path}: subset {d['subset']} of sizes {d['sizes']} over {d['boundaries']}, not "
                                 f"subset {k} of {every} over the checkpoint's {list(boundaries)}; rerun the "
                                 "spectra_convergence_subset jobs")  # fmt: skip
    if len(loaded) < len(every):
        raise LayergeomError(f"{len(loaded)} convergence parts for the sizes {every}: the config's spectra.n_groups "
                             "is below the Jacobian job's groups; rerun the Jacobian job")  # fmt: skip
    frames = [p.data["table"] for p in loaded if len(p.data["table"])]
    table = pd.concat(frames, ignore_index=True) if frames else loaded[0].data["table"]
    write_tsv(table, out_tsv)
    return table
