"""The work folder ``.partial/`` next to a job's outputs: where it is, the lock a job holds in it
(:class:`WorkLock`: one instance per job), clearing it once the outputs are in place, and removing the work of jobs
that the current settings no longer have (:func:`remove_unowned`).

Snakemake never sees the folder (it deletes the declared outputs of a failed job, not this folder). A job holds a
lock in it while it works there (``{job}.lock``: the holder's PID, host and start): a second instance of the same
job refuses with one line naming the holder. A lock whose holder is dead (a PID that no longer runs on this host)
or, from another host, that has not been refreshed for :data:`LOCK_STALE_S` seconds (the holder refreshes it every
:data:`HEARTBEAT_S`) is stale, and is taken over with a log line."""

from __future__ import annotations

import atexit
import datetime
import json
import logging
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from ..runtime import LayergeomError

log = logging.getLogger("layergeom")

#: the work folder of a job, next to its outputs
PARTIAL = ".partial"


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
