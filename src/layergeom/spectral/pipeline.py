"""Paper B spectral stage, one function per workflow rule: the only module of ``spectral`` that touches files.

- :func:`boundary_jacobians` (rule ``spectra_jacobians_<model>``): J̄_b of every boundary from the activation
  store -> ``jacobians/{boundary}.npy``, the sample-group means ``{boundary}.groups.npy``, what was averaged
  ``{boundary}.json`` and the per-sample summaries ``{boundary}.tsv`` (resumable after a crash);
- :func:`write_spectra` (``spectra_table``): ``spectra.tsv`` and ``eigenvalues.tsv``;
- :func:`write_cumulative` (``spectra_cumulative``): ``cumulative.tsv``;
- :func:`write_schur` (``spectra_schur``): ``schur.tsv``.

Only the Jacobian job imports torch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import save_npy, write_tsv
from ..runtime import LayergeomError, atomic_path, progress
from .cumulative import VARIANTS, cumulative_table
from .jacobians import JacobianSettings
from .schur import schur_surgery
from .spectra import Decomposition, eigenvalue_table, spectra_table

log = logging.getLogger("layergeom")

SUMMARY_COLUMNS = ["sample", "window", "position", "x_norm", "fro_norm", "trace", "asymmetry", "spectral_norm"]


def read_jacobians(names: list[str], paths: list) -> dict[str, np.ndarray]:
    """The mean Jacobians J̄_b (float64 d×d .npy files), keyed by boundary in the given (depth) order."""
    return {n: np.load(p).astype(np.float64, copy=False) for n, p in zip(names, paths)}


# ---- rule spectra_jacobians_<model> ----------------------------------------------------------------
#: bump when the files of a boundary change meaning, so that no partial result of older code is reused
RESUME_FORMAT = 1
PARTIAL = ".partial"
SUFFIXES = ("npy", "groups", "tsv", "json")  # the json (with the resume key) is written last


def _file_id(path) -> dict:
    st = Path(path).stat()
    return {"path": str(Path(path).resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def weights_id(weights, model) -> dict | str:
    """The weights file's identity (path, size, mtime), or the tensors' hash for a model not read from a file."""
    from ..models import weights_sha256

    return weights_sha256(model.state_dict()) if weights is None else _file_id(weights)


def resume_key(store, name: str, settings: JacobianSettings, seed: int, weights: dict | str) -> str:
    """sha256 of everything a boundary's files depend on: the weights (:func:`weights_id`), the activation
    store (its store.json, index and the boundary's states), the settings and the seed."""
    ids = {
        "format": RESUME_FORMAT,
        "boundary": name,
        "weights": weights,
        "store": (store.path / "store.json").read_text(),
        "index": _file_id(store.path / "index.npy"),
        "states": _file_id(store.path / f"{name}.npy"),
        "settings": asdict(settings),
        "seed": seed,
    }
    return hashlib.sha256(json.dumps(ids, sort_keys=True).encode()).hexdigest()


def _partial_paths(work: Path, name: str) -> dict[str, Path]:
    return {k: work / f"{name}.{'groups.npy' if k == 'groups' else k}" for k in SUFFIXES}


def _finished(work: Path, name: str, key: str) -> bool:
    paths = _partial_paths(work, name)
    if not all(p.exists() for p in paths.values()):
        return False
    try:
        return json.loads(paths["json"].read_text()).get("key") == key
    except (OSError, ValueError):
        return False


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
    the ``.json`` last with a key of the weights, activations, settings and seed (:func:`resume_key`); a
    restarted job reuses every boundary whose key matches and computes the rest. When all are done the files
    move into place and the work folder goes. ``weights`` is the weights file (None: hash the tensors).
    Returns name -> ``BoundaryJacobian`` for the boundaries computed in this call (reused ones are not loaded).
    """
    import torch

    from . import jacobians as jac

    cfg = settings if isinstance(settings, JacobianSettings) else JacobianSettings.from_config(settings or {})
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
    results, reused = {}, []
    for name in progress(boundaries, desc="jacobians", unit="boundary"):
        if name not in store.names:
            raise LayergeomError(f"boundary {name} is not in the activation store {store.path}")
        work = Path(outputs[name]["npy"]).parent / PARTIAL
        key = resume_key(store, name, cfg, seed, wid)
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
            "key": key,
        }
        part = _partial_paths(work, name)
        save_npy(res.mean, part["npy"])
        save_npy(res.group_means.astype(np.float32), part["groups"])
        write_tsv(table[SUMMARY_COLUMNS], part["tsv"])
        with atomic_path(part["json"]) as tmp:
            tmp.write_text(json.dumps(meta, indent=2) + "\n")
        log.info("%s: J̄ over %d samples (%s), ‖J̄‖_F = %.4g", name, res.n_samples, res.method, np.linalg.norm(res.mean))
        results[name] = res
    if reused:
        log.info("resumed: %d boundaries reused, %d computed", len(reused), len(results))
    for name in boundaries:  # all finished: move into place, the json last
        part = _partial_paths(Path(outputs[name]["npy"]).parent / PARTIAL, name)
        for k in SUFFIXES:
            Path(outputs[name][k]).parent.mkdir(parents=True, exist_ok=True)
            os.replace(part[k], outputs[name][k])
    for work in {Path(outputs[n]["npy"]).parent / PARTIAL for n in boundaries}:
        shutil.rmtree(work, ignore_errors=True)
    return results


# ---- rules spectra_table, spectra_cumulative, spectra_schur ---------------------------------------
def write_spectra(
    names: list[str], npy_paths: list, tsv_paths: list, out_tsv, out_eigenvalues=None, **kwargs
) -> pd.DataFrame:
    """spectra.tsv from the per-boundary J̄_b files (n_samples from each {boundary}.json); also the eigenvalues."""
    jacobians = read_jacobians(names, npy_paths)
    n_samples = {n: json.loads(Path(p).with_suffix(".json").read_text())["n_samples"] for n, p in zip(names, tsv_paths)}
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
