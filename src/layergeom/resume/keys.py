"""A job's **key**: the sha256 of the identities of the job's inputs (path, size and modification time of every
file), of its settings, of the package's source (:func:`code_id`) and of the threads it computes with. A restart
reuses only work of the same key, so a changed input, setting or code starts again from zero."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .work_folder import PARTIAL

#: bump when what a job keeps in .partial/ changes meaning, so that no work of older code is reused
FORMAT = 2


def file_id(path) -> dict | list:
    """A file's identity (resolved path, size, mtime in ns); a folder's: that of every file in it, sorted
    (work folders ``.partial`` excluded)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and PARTIAL not in f.relative_to(p).parts)
        return [file_id(f) for f in files]
    st = p.stat()
    return {"path": str(p.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


@functools.cache
def code_id() -> str:
    """sha256 of the layergeom package's source: work kept by other code is never reused."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent  # the layergeom package (this is resume/keys.py)
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def job_key(what: str, inputs: Iterable = (), settings: dict | None = None) -> str:
    """sha256 of a job's kind, the identities of its input files or folders (:func:`file_id`), its settings
    (anything JSON can write; numpy scalars and arrays as their values), the code (:func:`code_id`) and the
    BLAS threads (:func:`blas_threads`; a torch job adds its device and torch threads to its settings)."""
    ids = {
        "format": FORMAT,
        "code": code_id(),
        "blas_threads": blas_threads(),
        "what": what,
        "inputs": [file_id(p) for p in inputs],
        "settings": settings or {},
    }
    return hashlib.sha256(json.dumps(ids, sort_keys=True, default=_plain).encode()).hexdigest()


def blas_threads() -> dict | int:
    """The BLAS thread settings (OMP/OPENBLAS/MKL_NUM_THREADS), else the number of CPUs this process may use."""
    env = {v: os.environ[v] for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS") if v in os.environ}
    return env or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())


def machine_id(device: str = "cpu", torch_threads: int | None = None) -> dict:
    """The device and thread counts a job computes with (they change the rounding): the BLAS threads
    (OMP/OPENBLAS/MKL_NUM_THREADS, else the CPUs this process may use), and a torch job's
    ``torch.get_num_threads()`` (passed in: this module imports no torch)."""
    out = {"device": str(device), "blas_threads": blas_threads()}
    if torch_threads is not None:
        out["threads"] = int(torch_threads)
    return out


def _plain(obj):
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    raise TypeError(f"cannot key a {type(obj).__name__}")
