"""Snapshots of a loop's state (:class:`Snapshots`, for jobs that carry a state from one step to the next: the
products of the cumulative and Schur tables, the KL of the windows done so far): the state after a step is saved
every ``every_s`` seconds (config ``snapshot_minutes``), atomically, replacing the previous snapshot; a restart
continues after the last one. States are trees (:mod:`.trees`) stored in one ``.npz`` (no pickle) and restored bit
for bit. A snapshot that cannot be read back (a torn zip, a damaged tree) is removed with a log line and the job
starts afresh."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from ..runtime import atomic_path, remove_stale_temporaries
from .keys import FORMAT, job_key
from .trees import pack, unpack
from .work_folder import WorkLock, remove_work, work_dir

log = logging.getLogger("layergeom")


class Snapshots:
    """The state of a long loop, saved every ``every_s`` seconds in ``work/{name}.snapshot.npz``.

    Use::

        snap = Snapshots.for_job(out, "schur", inputs, settings, every_s)
        state = snap.load()              # None, or {"done": n, "state": ...} of the last snapshot
        for i, item in enumerate(items):
            if state and i < state["done"]: continue
            ...                          # the step
            snap.save(i + 1, lambda: {...the state after step i...})   # only when every_s has passed
        ...                              # write the outputs, then
        snap.clear()

    ``every_s`` 0 saves after every step. The state callable is called only when a snapshot is due. A job
    that is not resumable gets :data:`NO_SNAPSHOTS` (from :meth:`for_job` with ``every_s`` None): the same
    calls, doing nothing.
    """

    @classmethod
    def for_job(cls, out, what: str, inputs: Iterable, settings: dict, every_s: float | None) -> Snapshots:
        """The snapshots of the job writing `out`, keyed by :func:`job_key`; :data:`NO_SNAPSHOTS` when ``every_s``
        is None (the job starts from zero if it is killed)."""
        if every_s is None:
            return NO_SNAPSHOTS
        return cls(work_dir(out), what, job_key(what, inputs, settings), every_s)

    def __init__(self, work, name: str, key: str, every_s: float):
        self.work = Path(work)
        self.name = name
        self.path = self.work / f"{name}.snapshot.npz"
        self.key = key
        self.every_s = float(every_s)
        self.saved_at = time.monotonic()  # when the last snapshot was written (or the job started)
        self._start: dict | None = None  # the snapshot read at the start, until load() hands it over
        self._read = False  # whether that snapshot has been looked for
        self._start_done = 0  # steps finished by it
        self.lock: WorkLock | None = None

    @property
    def done(self) -> int:
        """Steps finished by the snapshot this job started from (0 without one)."""
        self._read_start()
        return self._start_done

    def _read_start(self) -> None:
        if not self._read:
            self.lock = self.lock or WorkLock.hold(self.work, self.name)  # one instance of this job works here
            self._start = self._read_file()
            self._start_done = 0 if self._start is None else self._start["done"]
            self._read = True

    def load(self) -> dict | None:
        """The snapshot to start from: {"done": steps finished, "state": the tree}; None if there is none.

        The file is read once; this hands its state over (a second call returns None). A snapshot of another
        key (other inputs or settings) or an unreadable one is removed.
        """
        self._read_start()
        start, self._start = self._start, None
        return start

    def _read_file(self) -> dict | None:
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
            out = {"done": int(meta["done"]), "state": unpack(meta["tree"], arrays)}
        except Exception as err:  # noqa: BLE001  (torn zip, empty file, bad JSON, damaged tree: start afresh)
            log.warning("%s: unreadable snapshot %s (%s: %s); removed, starting afresh", self.name, self.path,
                        type(err).__name__, err)  # fmt: skip
            self.path.unlink(missing_ok=True)
            return None
        log.info("%s: resuming after step %d from %s", self.name, out["done"], self.path)
        return out

    def due(self) -> bool:
        return time.monotonic() - self.saved_at >= self.every_s

    def save(self, done: int, state: Callable[[], object], force: bool = False) -> bool:
        """Save the state after `done` steps if a snapshot is due (or `force`); returns whether it saved.

        A save that fails for want of disk (or any OSError) is logged and skipped: the job goes on, and the
        previous snapshot, if any, stays (the next try comes after another interval).
        """
        if not (force or self.due()):
            return False
        self._read_start()  # holds the lock
        t0 = time.monotonic()
        tree, arrays = pack(state())
        meta = json.dumps({"key": self.key, "done": int(done), "tree": tree, "format": FORMAT})
        try:
            with atomic_path(self.path) as tmp, open(tmp, "wb") as fh:
                np.savez(fh, __meta__=np.array(meta), **arrays)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as err:
            self.saved_at = time.monotonic()
            log.warning("%s: could not save a snapshot after step %d (%s); going on without it", self.name, done, err)
            return False
        self.saved_at = time.monotonic()
        log.info("%s: snapshot after step %d (%.1f MB, %.1f s)", self.name, done, self.path.stat().st_size / 1e6,
                 self.saved_at - t0)  # fmt: skip
        return True

    def clear(self) -> None:
        """Remove the snapshot (the outputs are written), any temporary a killed save left of it, the lock and
        the work folder if nothing else is in it (the work of jobs running beside this one stays). Never raises
        (a failure is logged): the outputs are in place."""
        try:
            if self.work.is_dir():
                remove_stale_temporaries(self.path)
        except OSError as err:
            log.warning("%s: could not remove temporaries in %s (%s)", self.name, self.work, err)
        remove_work(self.work, [self.path.name], lock=self.lock)
        self.lock = None


class _NoSnapshots(Snapshots):
    """The snapshots of a job that is not resumable: nothing is read, saved or removed."""

    def __init__(self):
        pass

    @property
    def done(self) -> int:
        return 0

    def load(self) -> None:
        return None

    def due(self) -> bool:
        return False

    def save(self, done: int, state: Callable[[], object], force: bool = False) -> bool:
        return False

    def clear(self) -> None:
        pass

    def __repr__(self) -> str:
        return "NO_SNAPSHOTS"


#: the snapshots of a job that is not resumable (``snapshot_minutes`` unset for it): every call does nothing
NO_SNAPSHOTS: Snapshots = _NoSnapshots()
