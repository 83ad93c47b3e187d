"""The Jacobian job (rule ``spectra_jacobians_<model>``): :func:`boundary_jacobians`, J̄_b of every boundary from
the activation store -> ``jacobians/{boundary}.npy``, the sample-group means ``{boundary}.groups.npy``, what was
averaged ``{boundary}.json`` and the per-sample summaries ``{boundary}.tsv``, resumable after a crash (each
boundary's files and marker in a work folder, under its :func:`resume_key`).

The method is ``layergeom.spectral.jacobians``; it and torch are imported inside the functions (the only job
of ``spectral.jobs`` that imports torch).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ...io import save_npy, write_tsv
from ...resume.items import item_done, mark_done
from ...resume.keys import file_id, job_key, machine_id
from ...resume.work_folder import WorkLock, remove_work, work_dir
from ...runtime import LayergeomError, atomic_path, progress
from ..settings import (
    JacobianSettings,
)

log = logging.getLogger("layergeom")

SUMMARY_COLUMNS = ["sample", "window", "position", "x_norm", "fro_norm", "trace", "asymmetry", "spectral_norm"]
SUFFIXES = ("npy", "groups", "tsv", "json")  # a boundary's files; its marker {boundary}.done.json comes last


def weights_id(weights, model) -> dict | str:
    """The weights file's identity (path, size, mtime), or the tensors' hash for a model not read from a file."""
    from ...models import weights_sha256  # imports torch

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
        from .. import jacobians as jac  # imports torch

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

    from .. import jacobians as jac  # imports torch

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


def keep_boundary(work: Path, name: str, key: str, res, sample: JacobianSamples, cfg: JacobianSettings) -> dict:
    """Write a finished boundary's files into the work folder, then its marker (key, sizes, sha256) last; returns
    its {boundary}.json record."""
    part = _partial_paths(work, name)
    _marker(work, name).unlink(missing_ok=True)  # files of another key are rewritten below
    save_npy(res.mean, part["npy"])
    save_npy(res.group_means.astype(np.float32), part["groups"])
    write_tsv(sample.summary_table(res), part["tsv"])
    record = sample.meta(name, res, cfg)
    with atomic_path(part["json"]) as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n")
    mark_done(_marker(work, name), key, [p.name for p in part.values()])
    return record


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
    Returns name -> the boundary's ``{boundary}.json`` record for the boundaries computed in this call (reused
    ones are not read). A boundary's arrays are released once its files are written: the job holds one boundary
    at a time, as its memory request (``resources.model_jobs.jacobians_bytes``) counts.
    """
    import torch

    from .. import jacobians as jac  # imports torch

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
        results[name] = keep_boundary(work, name, key, res, sample, cfg)
        log.info("%s: J̄ over %d samples (%s), ‖J̄‖_F = %.4g", name, res.n_samples, res.method, np.linalg.norm(res.mean))
        del res  # its arrays ((G + 1) d² float64: 2.3 GB at d = 4096) go before the next boundary is computed
    if reused:
        log.info("resumed: %d boundaries reused, %d computed", len(reused), len(results))
    move_into_place(boundaries, outputs)
    for work, lock in locks.items():
        remove_work(work, lock=lock)
    return results
