"""Seeds, threads, devices and atomic outputs: the one place where run-time determinism is set.

Importable without torch or numpy (the workflow's DAG is built with this module loaded): both are imported
where they are used.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger("layergeom")


class LayergeomError(RuntimeError):
    """An error caused by the user's input (config, model name, corpus): the message says what to change."""


def set_determinism(seed: int, threads: int | None = None) -> None:
    """Seed every RNG we use and pin thread counts, so that two runs give bit-identical tables.

    torch is seeded only when the job has imported it already (jobs that never touch torch skip its
    2-3 s import); scripts import their library modules, and thereby torch, before the job starts.
    """
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % (2**32))
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if "torch" not in sys.modules:
        return
    import torch

    torch.manual_seed(seed)
    if threads:
        torch.set_num_threads(int(threads))
    torch.use_deterministic_algorithms(True, warn_only=True)


# CUDA_VISIBLE_DEVICES values that hide every GPU: SLURM sets NoDevFiles for a job without GPUs
_NO_GPU_VALUES = ("", "-1", "NoDevFiles")
ALLOW_CPU_FALLBACK = "LAYERGEOM_ALLOW_CPU_FALLBACK"


def gpus_assigned(environ=None) -> list[str]:
    """The devices CUDA_VISIBLE_DEVICES hands this process (empty when unset or hiding all).

    CUDA reads the list up to the first entry that is empty or negative.
    """
    env = os.environ if environ is None else environ
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None or value.strip() in _NO_GPU_VALUES:
        return []
    out = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        out.append(entry)
    return out


def visible_gpus(environ=None) -> int:
    """How many GPUs jobs started here can use, without importing torch.

    CUDA_VISIBLE_DEVICES when set (also when it hides all), else the GPUs ``nvidia-smi -L`` lists, else 0.
    """
    env = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in env:
        return len(gpus_assigned(env))
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return 0
    if out.returncode != 0:
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def resolve_device(name: str = "auto") -> str:
    """`auto` picks CUDA when present, else the CPU; `cuda` without a GPU is an error.

    A job that was given a GPU (its ``gpu`` resource, or CUDA_VISIBLE_DEVICES naming one) but whose torch
    sees no CUDA device stops here, unless it pinned ``cpu``: a CPU build of torch, or one built for another
    CUDA, in a GPU job would otherwise run for hours on the CPU. LAYERGEOM_ALLOW_CPU_FALLBACK=1 lets it run
    on the CPU instead (test clusters whose GPUs are fake). The device chosen is logged (``device_info``).
    """
    import torch

    if name == "cpu":
        log.info("device: %s", describe_device(device_info(name)))
        return name
    available = torch.cuda.is_available()
    if not available:
        check_given_gpus()
    resolved = ("cuda" if available else "cpu") if name == "auto" else name
    if name.startswith("cuda") and not available:
        raise LayergeomError(f"device: '{name}' was asked for but no CUDA device is visible; use 'auto' or 'cpu'")
    log.info("device: %s", describe_device(device_info(resolved)))
    return resolved


# ---- GPU slots: one device per concurrently running GPU job ------------------------------------------------
#: set by ``claim_gpus`` in a job given GPUs (its ``gpu`` resource): how many it was given
GPUS_GIVEN = "LAYERGEOM_GPUS_GIVEN"
#: the per-host folder of GPU slot locks (default: layergeom-gpu-slots-{uid} in the temporary folder)
GPU_LOCK_DIR = "LAYERGEOM_GPU_LOCK_DIR"
#: jobs one GPU takes before a further job waits: beyond it, jobs share the least used GPU anyway
MAX_JOBS_PER_GPU = 64
_held_slots: list = []  # open, locked slot files of this process: released when it exits (flock)


def host_gpus(environ=None) -> list[str]:
    """The GPUs jobs started here may use: the CUDA_VISIBLE_DEVICES entries when set, else nvidia-smi's indices."""
    env = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in env:
        return gpus_assigned(env)
    return [str(i) for i in range(visible_gpus(env))]


def gpu_lock_dir(environ=None) -> Path:
    """The folder of this host's GPU slot locks: $LAYERGEOM_GPU_LOCK_DIR, else /tmp/layergeom-gpu-slots-{uid}.

    /tmp rather than $TMPDIR: an executor may give each job a TMPDIR of its own, and the jobs of one host must
    all see the same locks."""
    env = os.environ if environ is None else environ
    uid = os.getuid() if hasattr(os, "getuid") else 0
    tmp = Path("/tmp") if os.access("/tmp", os.W_OK) else Path(tempfile.gettempdir())
    return Path(env.get(GPU_LOCK_DIR) or tmp / f"layergeom-gpu-slots-{uid}")


def _try_lock(path: Path):
    """An open file holding an exclusive lock on ``path``, or None when another process holds it."""
    import fcntl

    fh = open(path, "a+")  # noqa: SIM115 -- held open (and locked) until the process exits
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        return None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh


def claim_gpus(n: int, environ=None) -> list[str]:
    """Give this job ``n`` of the host's GPUs: CUDA_VISIBLE_DEVICES <- the least used ones, each held as a slot.

    Snakemake names no GPU per job, so the slot is a lock file per (host, device, k) under ``gpu_lock_dir``:
    slot k of device d is taken when k jobs hold d already, so concurrent jobs spread over the devices and
    share one only when there are more jobs than GPUs (``--resources gpu=N`` above the count). The lock
    (flock) is released when the process exits, however it ends. When the executor (SLURM) or the user set
    CUDA_VISIBLE_DEVICES to no more devices than the job asks for, it is left as it is.
    """
    env = os.environ if environ is None else environ
    if n <= 0:
        return []
    env[GPUS_GIVEN] = str(n)
    devices = host_gpus(env)
    if not devices or ("CUDA_VISIBLE_DEVICES" in env and len(devices) <= n):
        return devices
    folder = gpu_lock_dir(env)
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())
    chosen: list[str] = []
    try:
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "it is a file, not a folder")
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(MAX_JOBS_PER_GPU):
            for d in devices:
                if len(chosen) == n:
                    break
                if d in chosen:
                    continue
                fh = _try_lock(folder / f"{host}.gpu{re.sub(r'[^A-Za-z0-9_.-]', '_', d)}.{k}.lock")
                if fh is not None:
                    _held_slots.append(fh)
                    chosen.append(d)
    except OSError as err:
        where = f"${GPU_LOCK_DIR}" if env.get(GPU_LOCK_DIR) else "the default"
        raise LayergeomError(
            f"cannot keep the GPU slot locks in {folder} ({where}): {err.strerror or err}; set {GPU_LOCK_DIR} to a "
            "writable folder on this host's local disk"
        ) from None
    if len(chosen) < n:
        raise LayergeomError(
            f"no free GPU slot among {len(devices)} GPU(s) x {MAX_JOBS_PER_GPU} jobs in {folder}: lower --resources gpu"
        )
    env["CUDA_VISIBLE_DEVICES"] = ",".join(chosen)
    log.info(
        "gpu slot: CUDA_VISIBLE_DEVICES=%s (of %s; locks in %s)", env["CUDA_VISIBLE_DEVICES"], ",".join(devices), folder
    )
    return chosen


def gpus_given(environ=None) -> int:
    """How many GPUs this job was given: its ``gpu`` resource (``claim_gpus``), else CUDA_VISIBLE_DEVICES's count."""
    env = os.environ if environ is None else environ
    return int(env.get(GPUS_GIVEN) or 0) or len(gpus_assigned(env))


def check_given_gpus(environ=None) -> None:
    """A job given a GPU stops at once, with one line, when torch sees no CUDA device (a CPU build of torch, a
    build for another CUDA, no driver); LAYERGEOM_ALLOW_CPU_FALLBACK=1 makes it a warning."""
    env = os.environ if environ is None else environ
    if not gpus_given(env):
        return
    try:
        import torch
    except ImportError:  # an env without torch cannot use the GPU it was given either
        raise LayergeomError("this job was given a GPU but its environment has no torch") from None
    if torch.cuda.is_available():
        return
    build = "a CPU build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
    ids = gpus_assigned(env)
    given = f"GPU(s) {','.join(ids)} (CUDA_VISIBLE_DEVICES)" if ids else f"{gpus_given(env)} GPU(s) (its gpu resource)"
    msg = (
        f"this job was given {given} but torch {torch.__version__} ({build}) sees no CUDA device. "
        "Run the model rules in a CUDA build of torch (config `conda_torch: cuda` with --sdm conda, or "
        "install one into the environment), or set `device: cpu`."
    )
    if env.get(ALLOW_CPU_FALLBACK) != "1":
        raise LayergeomError(msg)
    log.warning("%s Running on the CPU (%s=1).", msg, ALLOW_CPU_FALLBACK)


def device_info(device: str = "cpu") -> dict:
    """The device a job computes on: kind, name, the torch build and the CUDA it was built for."""
    import platform

    import torch

    info = {
        "type": "cuda" if str(device).startswith("cuda") else "cpu",
        "name": None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }  # not which slot (CUDA_VISIBLE_DEVICES): that is logged, and two identical runs may differ in it
    if info["type"] == "cuda":
        idx = torch.device(device).index or 0
        info["name"] = torch.cuda.get_device_name(idx)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(idx)))
    else:
        info["name"] = platform.processor() or platform.machine()
    return info


def describe_device(info: dict) -> str:
    """One line for a log: ``cuda NVIDIA H200 (torch 2.x, CUDA build 12.8, CUDA_VISIBLE_DEVICES=1)``."""
    slot = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
    return f"{info['type']} {info['name']} (torch {info['torch']}, CUDA build {info['cuda'] or 'none'}, CUDA_VISIBLE_DEVICES={slot})"


# ---- a job's failure ends in its own log ---------------------------------------------------------------------
_failure_log: dict = {}  # "path": the log file uncaught errors go to; "fh": it, open for faulthandler


def failure_line(err: BaseException, rule: str | None = None) -> str:
    """The one line that ends a failed job's log: ``layergeom: rule X failed: TypeError: ...`` (the message's
    lines joined), or for a user's error (LayergeomError) its message as it is."""
    reason = " ".join(str(err).split())
    what = f"rule {rule} failed" if rule else "failed"
    if isinstance(err, LayergeomError):
        return f"layergeom: {reason}"
    if isinstance(err, KeyboardInterrupt):
        return f"layergeom: {what}: interrupted (KeyboardInterrupt)"
    return f"layergeom: {what}: {type(err).__name__}{': ' + reason if reason else ''}"


def write_failure(logfile, err: BaseException, rule: str | None = None) -> None:
    """Append `err`'s traceback and then its :func:`failure_line` (last) to `logfile`; never raises. An error
    written once (by ``workflow.job``) is not written again (by the hook of :func:`log_failures`)."""
    if getattr(err, "_layergeom_logged", False):
        return
    import traceback

    try:
        with open(logfile, "a") as fh:
            if not isinstance(err, LayergeomError):
                fh.write("".join(traceback.format_exception(type(err), err, err.__traceback__)))
            fh.write(failure_line(err, rule) + "\n")
        err._layergeom_logged = True
    except Exception:  # noqa: BLE001 -- an unwritable log must not hide the error itself
        pass


def log_failures(logfile: str | os.PathLike, rule: str | None = None) -> None:
    """From now on, an uncaught exception of this process ends in `logfile` as well as on stderr: the traceback,
    then its one-line reason last (:func:`write_failure`); a crash (segmentation fault, bus error, abort) leaves
    Python's fatal-error report there (``faulthandler``). Called again, it moves both to the new file."""
    import faulthandler

    path = str(logfile)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    if _failure_log.get("path") != path:
        old = _failure_log.get("fh")
        _failure_log.update(path=path, rule=rule, fh=open(path, "a", buffering=1))  # noqa: SIM115 -- kept open
        faulthandler.enable(file=_failure_log["fh"], all_threads=True)
        if old is not None:
            old.close()
    _failure_log["rule"] = rule
    if getattr(sys.excepthook, "_layergeom", False):
        return
    previous = sys.excepthook

    def hook(kind, err, tb):
        if _failure_log.get("path") and not issubclass(kind, SystemExit):
            write_failure(_failure_log["path"], err, _failure_log.get("rule"))
        previous(kind, err, tb)

    hook._layergeom = True
    sys.excepthook = hook


def snakemake_script_job():
    """The ``snakemake`` object of the Snakemake script this process runs (its ``__main__``), else None."""
    obj = getattr(sys.modules.get("__main__"), "snakemake", None)
    kind = type(obj)
    if obj is None or kind.__name__ != "Snakemake" or not kind.__module__.startswith("snakemake"):
        return None
    return obj


def log_script_failures() -> None:
    """In a Snakemake script with a ``log:`` file, :func:`log_failures` into it: from the first ``layergeom``
    import on (``layergeom/__init__.py`` calls this), so a failing import (a broken environment) is in the job's
    log too, not only in Snakemake's console. Elsewhere (tests, notebooks, the workflow's DAG) it does nothing."""
    sm = snakemake_script_job()
    try:
        logs = list(sm.log) if sm is not None else []
    except Exception:  # noqa: BLE001 -- an object of another Snakemake version: no log to find
        logs = []
    if logs:
        log_failures(logs[0], getattr(sm, "rule", None))


def setup_logging(logfile: str | os.PathLike | None = None) -> None:
    """Send our logging, warnings and stderr to the rule's log file (or stderr).

    The file is emptied once, then every writer appends (the handler, the job's stderr, a failure's traceback):
    a handler that wrote from its own offset would overwrite what the others appended meanwhile."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if logfile:
        Path(logfile).parent.mkdir(parents=True, exist_ok=True)
        open(logfile, "w").close()
        handlers = [logging.FileHandler(logfile, mode="a")]
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", handlers=handlers, force=True
    )
    logging.captureWarnings(True)


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike, is_dir: bool = False):
    """Yield a temporary path next to `final`; move it into place only if the block succeeds.

    A failure leaves nothing at `final`, so no half-written output survives a crash or a bad input; the
    temporary is removed on any exception, and one left by a killed process (SIGKILL, SIGBUS, power loss)
    is removed when the same output is written again.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    target = tmp / final.name
    if is_dir:
        target.mkdir()
    try:
        yield target
        if final.exists():
            shutil.rmtree(final) if final.is_dir() else final.unlink()
        os.replace(target, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_stale_temporaries(final: str | os.PathLike) -> list[Path]:
    """Remove the temporaries `atomic_path` left next to `final` in an earlier, killed attempt at the same output.

    Only names of exactly that form (``.{name}.`` and the 8 characters `tempfile` draws) are touched, so the
    temporaries of other outputs in the same folder, written by jobs running now, are left alone.
    """
    final = Path(final)
    pattern = re.compile(rf"\.{re.escape(final.name)}\.[a-z0-9_]{{8}}")
    removed = []
    for p in final.parent.iterdir() if final.parent.is_dir() else ():
        if pattern.fullmatch(p.name) and p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    if removed:
        log.info("removed %d stale temporary output(s) of %s: %s", len(removed), final, ", ".join(map(str, removed)))
    return removed


def progress(iterable=None, **kwargs):
    """A tqdm progress bar on stderr (the rule log), quiet when not wanted."""
    from tqdm.auto import tqdm

    kwargs.setdefault("mininterval", 2.0)
    kwargs.setdefault("file", sys.stderr)
    return tqdm(iterable, **kwargs)


def prepend_pythonpath(path: str) -> None:
    """Put ``path`` first on PYTHONPATH for every process started from here (the workflow's jobs)."""
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != path]
    os.environ["PYTHONPATH"] = os.pathsep.join([path, *rest])
