"""Resumable long jobs: a job killed in the middle (pre-emption, a wall-time limit, a lost node) continues
where it stopped when it runs again, and writes exactly what an uninterrupted run writes.

Work goes into the folder ``.partial/`` next to the job's outputs. Snakemake never sees it (it deletes the
declared outputs of a failed job, not this folder), and the job removes it once its outputs are in place.
Everything kept there carries a **key**: the sha256 of the identities of the job's inputs (path, size and
modification time of every file), of its settings and of the package's source (:func:`code_id`). A restart
reuses only work of the same key, so a changed input, setting or code starts again from zero.

Two patterns:

- **Finished items** (the Jacobian and graph jobs, whose boundaries have their own files): each boundary's
  files are written into ``.partial/`` as it finishes, a marker with the key last; a restart skips the
  boundaries whose marker matches (:func:`item_done`, :func:`mark_done`). The activation dump is a variant:
  its store grows in ``.partial/``, and its marker records the windows written (after a flush).
- **Snapshots** (:class:`Snapshots`, for jobs that carry a state from one step to the next: the products of
  the cumulative and Schur tables, the KL of the windows done so far): the state after a step is saved every
  ``every_s`` seconds (config ``snapshot_minutes``), atomically, replacing the previous snapshot; a restart
  continues after the last one. States are trees of dicts, lists, numbers, strings, numpy arrays and pandas
  frames, stored in one ``.npz`` (no pickle) and restored bit for bit.

This module imports no torch.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from .runtime import atomic_path, remove_stale_temporaries

log = logging.getLogger("layergeom")

#: bump when what a job keeps in .partial/ changes meaning, so that no work of older code is reused
FORMAT = 1
PARTIAL = ".partial"


# ---- keys -----------------------------------------------------------------------------------------------
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
    root = Path(__file__).resolve().parent
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def job_key(what: str, inputs: Iterable = (), settings: dict | None = None) -> str:
    """sha256 of a job's kind, the identities of its input files or folders (:func:`file_id`), its settings
    (anything JSON can write; numpy scalars and arrays as their values) and the code (:func:`code_id`)."""
    ids = {
        "format": FORMAT,
        "code": code_id(),
        "what": what,
        "inputs": [file_id(p) for p in inputs],
        "settings": settings or {},
    }
    return hashlib.sha256(json.dumps(ids, sort_keys=True, default=_plain).encode()).hexdigest()


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


def work_dir(output) -> Path:
    """The work folder of a job with this output: ``.partial/`` next to it."""
    return Path(output).parent / PARTIAL


def remove_work(work: Path, names: Iterable[str] | None = None) -> None:
    """Remove the given files of a work folder (all of it when None), and the folder once it is empty."""
    work = Path(work)
    if names is None:
        shutil.rmtree(work, ignore_errors=True)
        return
    for n in names:
        (work / n).unlink(missing_ok=True)
    try:
        work.rmdir()
    except OSError:
        pass  # other jobs' work is still there (or it is gone already)


# ---- finished items -------------------------------------------------------------------------------------
def item_done(marker: Path, key: str) -> bool:
    """Whether an item's marker file exists and holds this key."""
    try:
        return json.loads(Path(marker).read_text()).get("key") == key
    except (OSError, ValueError, AttributeError):
        return False


def mark_done(marker: Path, key: str, **extra) -> None:
    """Write an item's marker (last, after its files): its key and any JSON-writable extras."""
    with atomic_path(marker) as tmp:
        tmp.write_text(json.dumps({**extra, "key": key}, indent=2) + "\n")


# ---- snapshots of a loop's state ----------------------------------------------------------------------------
class Snapshots:
    """The state of a long loop, saved every ``every_s`` seconds in ``work/{name}.snapshot.npz``.

    Use::

        snap = Snapshots(work_dir(out), "schur", key, every_s)
        state = snap.load()              # None, or {"done": n, "state": ...} of the last snapshot
        for i, item in enumerate(items):
            if state and i < state["done"]: continue
            ...                          # the step
            snap.save(i + 1, lambda: {...the state after step i...})   # only when every_s has passed
        ...                              # write the outputs, then
        snap.clear()

    ``every_s`` 0 saves after every step; None never saves (a job that cannot be resumed). The state
    callable is called only when a snapshot is due.
    """

    @classmethod
    def for_job(cls, out, what: str, inputs: Iterable, settings: dict, every_s: float | None) -> Snapshots | None:
        """The snapshots of the job writing `out`, keyed by :func:`job_key`; None when ``every_s`` is None (no
        snapshots: the job starts from zero if it is killed)."""
        if every_s is None:
            return None
        return cls(work_dir(out), what, job_key(what, inputs, settings), every_s)

    def __init__(self, work, name: str, key: str, every_s: float | None = 600.0):
        self.work = Path(work)
        self.name = name
        self.path = self.work / f"{name}.snapshot.npz"
        self.key = key
        self.every_s = every_s
        self.last = time.monotonic()
        self.saved = 0  # snapshots written by this process
        self._read_done = None  # steps finished by the snapshot read at the start (None: not read yet)
        self._last = None

    @property
    def done(self) -> int:
        """Steps finished by the snapshot this job started from (0 without one)."""
        self._peek()
        return self._read_done

    def _peek(self) -> None:
        if self._read_done is None:
            self._last = self._read()
            self._read_done = 0 if self._last is None else self._last["done"]

    def load(self) -> dict | None:
        """The snapshot to start from: {"done": steps finished, "state": the tree}; None if there is none.

        The file is read once; this hands its state over (a second call returns None). A snapshot of another
        key (other inputs or settings) or an unreadable one is removed.
        """
        self._peek()
        last, self._last = self._last, None
        return last

    def _read(self) -> dict | None:
        if not self.path.exists():
            return None
        try:
            with np.load(self.path, allow_pickle=False) as z:
                meta = json.loads(str(z["__meta__"]))
                if meta.get("key") != self.key:
                    log.info("%s: the snapshot in %s is of other inputs or settings; starting afresh", self.name,
                             self.work)  # fmt: skip
                    self.path.unlink(missing_ok=True)
                    return None
                arrays = {k: z[k] for k in z.files if k != "__meta__"}
        except Exception as err:  # noqa: BLE001  (torn zip, empty file, bad JSON: whatever it is, start afresh)
            log.warning("%s: unreadable snapshot %s (%s); starting afresh", self.name, self.path, err)
            self.path.unlink(missing_ok=True)
            return None
        log.info("%s: resuming after step %d from %s", self.name, meta["done"], self.path)
        return {"done": int(meta["done"]), "state": unpack(meta["tree"], arrays)}

    def due(self) -> bool:
        return self.every_s is not None and time.monotonic() - self.last >= self.every_s

    def save(self, done: int, state: Callable[[], object], force: bool = False) -> bool:
        """Save the state after `done` steps if a snapshot is due (or `force`); returns whether it saved.

        A save that fails for want of disk (or any OSError) is logged and skipped: the job goes on, and the
        previous snapshot, if any, stays (the next try comes after another interval).
        """
        if not (force or self.due()):
            return False
        t0 = time.monotonic()
        tree, arrays = pack(state())
        meta = json.dumps({"key": self.key, "done": int(done), "tree": tree, "format": FORMAT})
        try:
            with atomic_path(self.path) as tmp, open(tmp, "wb") as fh:
                np.savez(fh, __meta__=np.array(meta), **arrays)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as err:
            self.last = time.monotonic()
            log.warning("%s: could not save a snapshot after step %d (%s); going on without it", self.name, done, err)
            return False
        self.saved += 1
        self.last = time.monotonic()
        log.info("%s: snapshot after step %d (%.1f MB, %.1f s)", self.name, done, self.path.stat().st_size / 1e6,
                 self.last - t0)  # fmt: skip
        return True

    def clear(self) -> None:
        """Remove the snapshot (the outputs are written), any temporary a killed save left of it, and the work
        folder if nothing else is in it (the work of jobs running beside this one stays)."""
        if self.work.is_dir():
            remove_stale_temporaries(self.path)
        remove_work(self.work, [self.path.name])


# ---- state trees <-> (JSON, arrays) -------------------------------------------------------------------------
def pack(tree) -> tuple[object, dict[str, np.ndarray]]:
    """A tree of dicts, lists, tuples, None, bools, ints, floats (nan, inf), complex numbers, strings, numpy
    scalars and arrays and pandas DataFrames as (a JSON-writable tree, named arrays). Numpy float64, int64,
    bool and complex128 scalars come back as the Python values they equal, other numpy scalars with their
    dtype, arrays with their dtype; frames column by column (text columns: strings only, else TypeError)."""
    arrays: dict[str, np.ndarray] = {}

    def put(a: np.ndarray) -> dict:
        if a.dtype == object:  # a frame's text column: strings only (None, nan or numbers would come back as text)
            if not all(isinstance(v, str) for v in a.ravel()):
                raise TypeError("cannot snapshot an object array of anything but strings")
            a = a.astype(str)
        name = f"a{len(arrays)}"
        arrays[name] = a
        return {"__array__": name}

    def go(x):
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, np.ndarray):
            return put(x)
        if isinstance(x, np.generic):
            if x.dtype not in (np.float64, np.int64, np.bool_, np.complex128, np.str_):  # exact as Python values
                return {"__scalar__": [x.dtype.str, go(x.item())]}  # float32 etc.: their own type back
            x = x.item()
        if isinstance(x, complex):
            return {"__complex__": [x.real, x.imag]}
        if isinstance(x, (int, float)):
            return x
        if isinstance(x, dict):
            if not all(isinstance(k, str) for k in x):
                return {"__items__": [[go(k), go(v)] for k, v in x.items()]}
            return {"__dict__": {k: go(v) for k, v in x.items()}}
        if isinstance(x, tuple):
            return {"__tuple__": [go(v) for v in x]}
        if isinstance(x, list):
            return [go(v) for v in x]
        if type(x).__name__ == "DataFrame":
            return {"__frame__": [[str(c), put(x[c].to_numpy()), str(x[c].dtype)] for c in x.columns]}
        raise TypeError(f"cannot snapshot a {type(x).__name__}")

    return go(tree), arrays


def unpack(tree, arrays: dict[str, np.ndarray]):
    """The inverse of :func:`pack`."""

    def go(x):
        if isinstance(x, list):
            return [go(v) for v in x]
        if not isinstance(x, dict):
            return x
        if "__array__" in x:
            return arrays[x["__array__"]]
        if "__complex__" in x:
            return complex(*x["__complex__"])
        if "__scalar__" in x:
            dtype, value = x["__scalar__"]
            return np.dtype(dtype).type(go(value))
        if "__dict__" in x:
            return {k: go(v) for k, v in x["__dict__"].items()}
        if "__items__" in x:
            return {go(k): go(v) for k, v in x["__items__"]}
        if "__tuple__" in x:
            return tuple(go(v) for v in x["__tuple__"])
        if "__frame__" in x:
            import pandas as pd

            cols = {}
            for name, ref, dtype in x["__frame__"]:
                a = arrays[ref["__array__"]]
                cols[name] = a.astype(object) if dtype == "object" else a
            return pd.DataFrame(cols)
        raise ValueError(f"unknown snapshot node {sorted(x)}")

    return go(tree)
