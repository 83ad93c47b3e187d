"""Seeds, threads, devices and atomic outputs: the one place where run-time determinism is set.

Importable without torch or numpy (the workflow's DAG is built with this module loaded): both are imported
where they are used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shutil
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

    A job that was given a GPU (CUDA_VISIBLE_DEVICES names one) but whose torch sees no CUDA device stops
    here, unless it pinned ``cpu``: on a cluster that is a CPU build of torch in a GPU job, which would
    otherwise run for hours on the CPU. LAYERGEOM_ALLOW_CPU_FALLBACK=1 lets it run on the CPU instead (test
    clusters whose GPUs are fake).
    """
    import torch

    if name == "cpu":
        return name
    available = torch.cuda.is_available()
    assigned = gpus_assigned()
    if assigned and not available:
        msg = (
            f"this job was given GPU(s) {','.join(assigned)} (CUDA_VISIBLE_DEVICES) but torch {torch.__version__} "
            f"sees no CUDA device ({'a CPU build' if torch.version.cuda is None else f'built for CUDA {torch.version.cuda}'}"
            "). Run the model rules in a CUDA build of torch (config `conda_torch: cuda` with --sdm conda, or "
            "install one into the environment), or set `device: cpu`."
        )
        if os.environ.get(ALLOW_CPU_FALLBACK) != "1":
            raise LayergeomError(msg)
        log.warning("%s Running on the CPU (%s=1).", msg, ALLOW_CPU_FALLBACK)
    if name == "auto":
        return "cuda" if available else "cpu"
    if name.startswith("cuda") and not available:
        raise LayergeomError(f"device: '{name}' was asked for but no CUDA device is visible; use 'auto' or 'cpu'")
    return name


def setup_logging(logfile: str | os.PathLike | None = None) -> None:
    """Send our logging, warnings and stderr to the rule's log file (or stderr)."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if logfile:
        Path(logfile).parent.mkdir(parents=True, exist_ok=True)
        handlers = [logging.FileHandler(logfile, mode="w")]
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
