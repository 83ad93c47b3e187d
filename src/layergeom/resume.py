"""Resumable long jobs: a job killed in the middle (pre-emption, a wall-time limit, a lost node) continues
where it stopped when it runs again, and writes exactly what an uninterrupted run writes.

Work goes into the folder ``.partial/`` next to the job's outputs. Snakemake never sees it (it deletes the
declared outputs of a failed job, not this folder), and the job removes it once its outputs are in place.
Everything kept there carries a **key**: the sha256 of the identities of the job's inputs (path, size and
modification time of every file), of its settings and of the package's source (:func:`code_id`). A restart
reuses only work of the same key, so a changed input, setting or code starts again from zero.

Two patterns:

- **Finished items** (the Jacobian and graph jobs, whose boundaries have their own files): each boundary's
  files are written into ``.partial/`` as it finishes, a marker with the key and each file's size and sha256
  last; a restart skips the boundaries whose marker matches and whose files still have the recorded size and
  sha256 (:func:`item_done`, :func:`mark_done`): a truncated file, or one swapped with another boundary's, is
  redone. The activation dump is a variant: its store grows in ``.partial/``, and its marker records the
  windows written (after a flush), the ``.npy`` header and a sha256 of the rows of each snapshot.
- **Snapshots** (:class:`Snapshots`, for jobs that carry a state from one step to the next: the products of
  the cumulative and Schur tables, the KL of the windows done so far): the state after a step is saved every
  ``every_s`` seconds (config ``snapshot_minutes``), atomically, replacing the previous snapshot; a restart
  continues after the last one. States are trees of dicts, lists, numbers, strings, numpy arrays and pandas
  frames, stored in one ``.npz`` (no pickle) and restored bit for bit. A snapshot that cannot be read back
  (a torn zip, a damaged tree) is removed with a log line and the job starts afresh.

A job holds a **lock** in its work folder while it works there (:class:`WorkLock`, ``{job}.lock``: the
holder's PID, host and start): a second instance of the same job (an orphan left by a lost snakemake, a
resubmission) refuses with one line naming the holder. A lock whose holder is dead (a PID that no longer runs
on this host) or, from another host, that has not been refreshed for :data:`LOCK_STALE_S` seconds (the holder
refreshes it every :data:`HEARTBEAT_S`) is stale, and is taken over with a log line.

This module imports no torch.
"""

from __future__ import annotations

import atexit
import datetime
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from .runtime import LayergeomError, atomic_path, remove_stale_temporaries

log = logging.getLogger("layergeom")

#: bump when what a job keeps in .partial/ changes meaning, so that no work of older code is reused
FORMAT = 2
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


def work_dir(output) -> Path:
    """The work folder of a job with this output: ``.partial/`` next to it."""
    return Path(output).parent / PARTIAL


def remove_work(work: Path, names: Iterable[str] | None = None, lock: WorkLock | None = None) -> None:
    """Remove the given files of a work folder (all of it when None), and the folder once it is empty.

    ``lock`` (this job's :class:`WorkLock`) is released before the folder goes. A symlinked work folder: the
    files go from its target, then the link (the target folder stays). Never
    raises: a file that cannot be removed is logged (the outputs are in place; the next run of the job
    clears it), so that a finished result is not discarded.
    """
    work = Path(work)
    try:
        if names is None:
            names = (
                [p.name for p in work.iterdir() if lock is None or p.name != lock.path.name] if work.is_dir() else []
            )
        for n in names:
            p = work / n
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
        if lock is not None:
            lock.release()
        if work.is_symlink():
            if not any(work.iterdir()):
                work.unlink()
        elif work.is_dir() and not any(work.iterdir()):
            work.rmdir()
    except FileNotFoundError:
        pass  # gone already
    except OSError as err:
        log.warning("could not clear the work folder %s (%s); the outputs are in place, remove it by hand", work, err)
    finally:
        if lock is not None:
            lock.release()


def check_work_dir(work: Path) -> Path:
    """Create the work folder if needed; one clear line if it cannot be (a plain file, no permission)."""
    work = Path(work)
    try:
        if work.exists() and not work.is_dir():
            raise NotADirectoryError("it is not a folder")
        work.mkdir(parents=True, exist_ok=True)
        if not os.access(work, os.W_OK | os.X_OK):
            raise PermissionError("it is not writable")
    except OSError as err:
        reason = err.strerror or str(err)
        raise LayergeomError(f"cannot keep work in {work}: {reason}; make it a writable folder or remove it") from None
    return work


# ---- finished items -------------------------------------------------------------------------------------
def file_record(path) -> dict:
    """A kept file's record: {"size": bytes, "sha256": hex digest of its content}."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 24), b""):
            h.update(chunk)
    return {"size": Path(path).stat().st_size, "sha256": h.hexdigest()}


def record_problem(path: Path, record: dict) -> str | None:
    """Why a kept file does not match its record ({"size", "sha256"}), or None when it does."""
    path = Path(path)
    if not path.is_file():
        return f"{path.name} is missing"
    size = path.stat().st_size
    if size != record.get("size"):
        return f"{path.name} has {size} bytes, its marker recorded {record.get('size')}"
    if file_record(path)["sha256"] != record.get("sha256"):
        return f"{path.name} is not the file its marker recorded (another sha256)"
    return None


def npy_problem(path, shape: tuple, dtype) -> str | None:
    """Why a kept ``.npy`` file is not one of this shape and dtype, whole (its size: header + data), or None."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            got_shape, fortran, got_dtype = read(fh)
            offset = fh.tell()
    except FileNotFoundError:
        return f"{path.name} is missing"
    except (OSError, ValueError) as err:
        return f"{path.name} has no readable .npy header ({err})"
    if tuple(got_shape) != tuple(shape) or np.dtype(got_dtype) != np.dtype(dtype) or fortran:
        return f"{path.name} holds {got_dtype} {tuple(got_shape)}, not {np.dtype(dtype)} {tuple(shape)}"
    size, want = path.stat().st_size, offset + int(np.prod(shape)) * np.dtype(dtype).itemsize
    if size != want:
        return f"{path.name} has {size} bytes, not the {want} of its header"
    return None


def item_done(marker: Path, key: str, files: Iterable[str] | None = None) -> bool:
    """Whether an item's marker holds this key and, for each name in ``files`` (in the marker's folder), a
    record that the file still matches (size and sha256). A mismatch is logged (one line): the item is redone."""
    marker = Path(marker)
    try:
        meta = json.loads(marker.read_text())
        if meta.get("key") != key:
            return False
    except (OSError, ValueError, AttributeError):
        return False
    records = meta.get("files", {})
    for name in files or ():
        problem = record_problem(marker.parent / name, records[name]) if name in records else (
            f"{name} is not recorded in the marker")  # fmt: skip
        if problem:
            log.warning("%s: %s in %s; redoing it", marker.name.split(".done")[0], problem, marker.parent)
            return False
    return True


def mark_done(marker: Path, key: str, files: Iterable[str] = (), **extra) -> None:
    """Write an item's marker (last, after its files): its key, the size and sha256 of each of ``files`` (names
    in the marker's folder) and any JSON-writable extras."""
    marker = Path(marker)
    records = {n: file_record(marker.parent / n) for n in files}
    with atomic_path(marker) as tmp:
        tmp.write_text(json.dumps({**extra, "files": records, "key": key}, indent=2) + "\n")


# ---- one instance per job -----------------------------------------------------------------------------------
#: seconds between refreshes of a held lock, and the age after which a lock from another host is stale
HEARTBEAT_S = 30.0
LOCK_STALE_S = 600.0
_HELD: dict[Path, WorkLock] = {}  # the locks this process holds, by path


def _process_start(pid: int) -> str | None:
    """The start time of a process (Linux /proc, in clock ticks since boot), which tells a reused PID apart."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _pid_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    now = _process_start(pid)
    return start is None or now is None or now == start


class WorkLock:
    """``{work}/{job}.lock``: this process works in ``work`` for ``job``; one instance per job at a time.

    :meth:`acquire` creates it (the work folder too) or refuses with one line naming the holder; a stale lock
    (see the module's doc) is taken over with a log line. A daemon thread refreshes it every
    :data:`HEARTBEAT_S`; :meth:`release` (also at exit) removes it. Within one process a job's lock is one:
    taking it again returns the lock held, and releasing it once releases it.
    """

    def __init__(self, work, job: str):
        self.work, self.job = Path(work), job
        self.path = self.work / f"{job}.lock"
        self.held = False
        self._stop = threading.Event()

    @classmethod
    def hold(cls, work, job: str) -> WorkLock:
        """The lock of ``job`` in ``work``, acquired (or the one this process holds already)."""
        path = (Path(work) / f"{job}.lock").absolute()
        lock = _HELD.get(path) or cls(work, job)
        lock.acquire()
        return lock

    def _me(self) -> dict:
        return {"pid": os.getpid(), "host": socket.gethostname(), "start": _process_start(os.getpid()),
                "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "job": self.job}  # fmt: skip

    def acquire(self) -> None:
        if self.held:
            return
        check_work_dir(self.work)
        tmp = self.work / f".{self.job}.lock.{socket.gethostname()}.{os.getpid()}"
        try:
            tmp.write_text(json.dumps(self._me()) + "\n")
            for _ in range(3):
                try:
                    os.link(tmp, self.path)  # atomic, with its content, and safe on NFS: exists -> FileExistsError
                    break
                except FileExistsError:
                    self._take_over_if_stale()
            else:
                raise LayergeomError(f"{self.job}: could not take the lock {self.path}; remove it and rerun")
        except OSError as err:
            raise LayergeomError(f"cannot keep work in {self.work}: {err.strerror or err}; make it a writable "
                                 "folder or remove it") from None  # fmt: skip
        finally:
            tmp.unlink(missing_ok=True)
        self.held = True
        _HELD[self.path.absolute()] = self
        atexit.register(self.release)
        self._stop = threading.Event()
        threading.Thread(target=self._beat, args=(self._stop,), name=f"{self.job}-lock", daemon=True).start()

    def _take_over_if_stale(self) -> None:
        """Remove the lock if its holder is gone (logged), else refuse naming the holder."""
        try:
            holder = json.loads(self.path.read_text())
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return  # released meanwhile: try again
        except (OSError, ValueError):
            holder, age = {}, LOCK_STALE_S + 1  # torn (a kill while it was written): stale
        pid, host = holder.get("pid"), holder.get("host")
        here = host == socket.gethostname()
        if here and isinstance(pid, int) and _pid_alive(pid, holder.get("start")):
            stale = False
        else:
            stale = here or age > LOCK_STALE_S
        who = f"pid {pid} on {host}, since {holder.get('since')}"
        if not stale:
            raise LayergeomError(
                f"{self.job}: another instance ({who}) is working in {self.work}; wait for it to end or stop it "
                f"(a lock whose holder is gone is taken over: a dead PID on {host} at once, after "
                f"{LOCK_STALE_S / 60:.0f} min without a refresh from another host; or remove {self.path})"
            )
        log.warning("%s: taking over the stale lock %s (%s: %s)", self.job, self.path, who,
                    "no longer running" if here else f"not refreshed for {age / 60:.0f} min")  # fmt: skip
        self.path.unlink(missing_ok=True)

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(HEARTBEAT_S):
            try:
                os.utime(self.path)
            except OSError:
                return

    def release(self) -> None:
        """Give the lock back: remove its file (unless another instance took it over meanwhile)."""
        if not self.held:
            return
        self.held = False
        self._stop.set()
        _HELD.pop(self.path.absolute(), None)
        try:
            if json.loads(self.path.read_text()).get("pid") == os.getpid():
                self.path.unlink()
        except (OSError, ValueError):
            pass  # gone, or taken over


# ---- work that no job owns any more -------------------------------------------------------------------------
#: the tails of the files a job keeps in a work folder under its name, as regular expressions: its lock
#: ``{name}.lock``, its snapshot ``{name}.snapshot.npz`` and per-item files ``{name}.b{i}.npz`` (the Schur prep's)
WORK_TAILS = (r"lock", r"snapshot\.npz", r"b\d+\.npz")
_LOCK_TEMP = re.compile(r"\.(?P<owner>.+)\.lock\.(?P<host>[^/]+)\.(?P<pid>\d+)")  # WorkLock.acquire's link source
_ATOMIC_TEMP = re.compile(r"\.(?P<final>.+)\.[a-z0-9_]{8}")  # runtime.atomic_path's temporary of {final}


def work_owner(filename: str, tails: Iterable[str] = WORK_TAILS) -> str | None:
    """The job name a file of a work folder belongs to (``{name}.{tail}``, or a temporary of one: an
    ``atomic_path`` folder ``.{name}.{tail}.xxxxxxxx`` or a lock's ``.{name}.lock.{host}.{pid}``), or None for a
    file of no known kind (left alone)."""
    tail = "|".join(tails)
    m = _LOCK_TEMP.fullmatch(filename)
    if m:
        return m.group("owner")
    m = _ATOMIC_TEMP.fullmatch(filename)
    if m:
        filename = m.group("final")
    m = re.fullmatch(rf"(?P<owner>.+?)\.(?:{tail})", filename)
    return m.group("owner") if m else None


def remove_unowned(work, owned: Iterable[str], tails: Iterable[str] = WORK_TAILS) -> list[Path]:
    """Remove from the work folder `work` the files of every job not named in `owned` (the names, as the jobs'
    locks and snapshots are named, of every job of the current settings that works there), and return them.

    Such files are what a killed job left under settings that have changed since (other α, other segments, fewer
    blocks): no job of the new settings would ever resume from them or remove them. A job is asked for first as
    its lock's holder (:class:`WorkLock`): while a live process holds it (another run with the old settings,
    still working) its files stay, with a log line; a stale lock is taken over, its files removed, then the lock.
    Files of the owned jobs, files whose name is of no known kind (``tails``, :func:`work_owner`) and the folder
    itself stay (the jobs of the current settings may start in it any moment). Never raises: a file that cannot
    be removed is logged, and removed by a later run.
    """
    work, owned = Path(work), set(owned)
    tails = tuple(tails)
    if not work.is_dir():
        return []
    by_owner: dict[str, list[Path]] = {}
    try:
        entries = list(work.iterdir())
    except OSError as err:
        log.warning("could not list the work folder %s (%s)", work, err)
        return []
    for p in entries:
        owner = work_owner(p.name, tails)
        if owner is None or owner in owned:
            continue
        m = _LOCK_TEMP.fullmatch(p.name)
        if m and m.group("host") == socket.gethostname() and _pid_alive(int(m.group("pid")), None):
            continue  # a live process taking a lock right now: its file is gone in a moment
        by_owner.setdefault(owner, []).append(p)
    removed: list[Path] = []
    for owner, files in sorted(by_owner.items()):
        lock = WorkLock(work, owner)
        try:
            lock.acquire()  # a live holder refuses: its work stays
        except LayergeomError as err:
            log.info("%s: left the work of %s in place: %s", work, owner, err)
            continue
        try:
            for p in files:
                if p.name == lock.path.name:
                    removed.append(p)  # the old holder's, taken over: goes when released below
                    continue
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink(missing_ok=True)
                removed.append(p)
        except OSError as err:
            log.warning("%s: could not remove the work of %s (%s); a later run removes it", work, owner, err)
        finally:
            lock.release()
    if removed:
        log.info("removed %d work file(s) of %d job(s) that the current settings do not have from %s: %s",
                 len(removed), len(by_owner), work, ", ".join(sorted(p.name for p in removed)))  # fmt: skip
    return removed


# ---- snapshots of a loop's state ----------------------------------------------------------------------------
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
