"""What the bench scripts share, so that each script holds only what it measures: the repository's paths (src/ on
sys.path), wall and CPU timers, the machine a bench ran on, progress lines with the time and the load, a run's
record, its command line and writing its results (JSON, Markdown).

A script under bench/ runs as ``python bench/x.py`` (bench/ is then first on sys.path) and starts with
``import harness``; the tests import a script the same way (``conftest.load_script``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: where the benches write their results by default
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT / "src"))


def importable(*folders: str) -> None:
    """Put these folders of the repository (e.g. ``tests``, for its reference implementations) first on sys.path."""
    for folder in folders:
        sys.path.insert(0, str(ROOT / folder))


# ---- timers ----------------------------------------------------------------------------------------------------
class Seconds(float):
    """Wall seconds of a timed call, with the process's CPU seconds in it (every thread: ``time.process_time``) as
    ``cpu``. Sums, differences and scalings keep both, so that a result built from timings has a CPU twin
    (``cpu_twin``): on a shared machine the wall time grows with the load, the CPU time far less."""

    def __new__(cls, wall: float, cpu: float):
        obj = super().__new__(cls, wall)
        obj.cpu = float(cpu)
        return obj

    def __add__(self, other):
        return Seconds(float(self) + float(other), self.cpu + getattr(other, "cpu", float(other)))

    __radd__ = __add__

    def __sub__(self, other):
        return Seconds(float(self) - float(other), self.cpu - getattr(other, "cpu", float(other)))

    def __mul__(self, k):
        return Seconds(float(self) * float(k), self.cpu * float(k))

    __rmul__ = __mul__

    def __truediv__(self, k):
        return Seconds(float(self) / float(k), self.cpu / float(k))


class Clock:
    """Wall and CPU seconds of a block (``with Clock() as c: ...``; then ``c.wall``, ``c.cpu``, ``c.seconds``); `sync`
    (e.g. ``torch.cuda.synchronize``) is called at both ends, so that a device's queued work is counted."""

    def __init__(self, sync=None):
        self.sync = sync

    def __enter__(self):
        if self.sync:
            self.sync()
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        if self.sync:
            self.sync()
        self.wall, self.cpu = time.perf_counter() - self.w, time.process_time() - self.c
        self.seconds = Seconds(self.wall, self.cpu)


def timed(fn, *args, sync=None, **kwargs):
    """(fn's result, its ``Seconds``); `sync` as ``Clock``'s."""
    with Clock(sync) as c:
        out = fn(*args, **kwargs)
    return out, c.seconds


def seconds(fn, *args, sync=None, **kwargs) -> Seconds:
    """The ``Seconds`` of one call of fn (its result dropped)."""
    return timed(fn, *args, sync=sync, **kwargs)[1]


def best(fn, repeats: int = 1, *, warmup: bool = False, sync=None):
    """(fn()'s last result, the shortest of `repeats` timed calls' ``Seconds``), after one untimed call (`warmup`)."""
    if warmup:
        fn()
    runs = [timed(fn, sync=sync) for _ in range(repeats)]
    return runs[-1][0], min((t for _, t in runs), key=float)


def mean(xs) -> Seconds | float:
    """The mean of timings, keeping their CPU seconds."""
    xs = list(xs)
    return sum(xs[1:], xs[0]) / len(xs)


def cpu_twin(tree):
    """The CPU seconds of every ``Seconds`` in a results tree (dicts of timings), in the same shape; None where a
    branch holds none."""
    if isinstance(tree, Seconds):
        return tree.cpu
    if isinstance(tree, dict):
        out = {k: cpu_twin(v) for k, v in tree.items() if k != "cpu"}
        out = {k: v for k, v in out.items() if v is not None}
        return out or None
    return None


def with_cpu(entry: dict) -> dict:
    """A result entry with its CPU twin under ``cpu`` (kept through the JSON file, which stores plain floats)."""
    twin = cpu_twin(entry)
    return entry | ({"cpu": twin} if twin else {})


# ---- the machine -----------------------------------------------------------------------------------------------
def processor() -> str:
    return platform.processor() or platform.machine()


def _version(module: str):
    return lambda: __import__(module).__version__


def _env(var: str):
    return lambda: os.environ.get(var, "unset")


#: what ``machine`` can report, by name
FACTS = {
    "platform": platform.platform,
    "processor": processor,
    "cpus": os.cpu_count,
    "python": platform.python_version,
    "numpy": _version("numpy"),
    "scipy": _version("scipy"),
    "torch": _version("torch"),
    "torch_threads": lambda: __import__("torch").get_num_threads(),
    "OMP_NUM_THREADS": _env("OMP_NUM_THREADS"),
    "OMP_WAIT_POLICY": _env("OMP_WAIT_POLICY"),
    "load_average": os.getloadavg,
}


def machine(*names: str, **renamed: str) -> dict:
    """The machine a bench runs on: each fact of ``FACTS`` named (``renamed``: under another key, key=fact), in
    that order."""
    return {n: FACTS[n]() for n in names} | {key: FACTS[fact]() for key, fact in renamed.items()}


def machine_info(threads: int) -> dict:
    """The machine a bench ran on: platform, processor, torch version, threads."""
    return machine("platform", "processor", "torch") | {"threads": threads}


def status_kb(pid: int | str, key: str) -> int | None:
    """A field of /proc/<pid>/status in kB (``VmRSS``, ``VmHWM``, ``RssAnon``); None where the process or the
    field is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


# ---- progress and a run's record -------------------------------------------------------------------------------
LOAD_MAX = [0.0]  # the highest 1-min load average seen at a log line


def log(msg: str) -> None:
    """A progress line with the time and the 1-min load average (the highest one is kept in ``LOAD_MAX``)."""
    load = os.getloadavg()[0]
    LOAD_MAX[0] = max(LOAD_MAX[0], load)
    print(f"[{time.strftime('%H:%M:%S')}] {msg} (load {load:.1f})", flush=True)


class Run:
    """One run of a bench: ``record`` holds what it ran (`fields`), when it started and the load averages at its
    start; ``end()`` adds those at its end, the highest 1-min load of its ``log`` lines and its wall seconds."""

    def __init__(self, **fields):
        self.record = {**fields, "started": time.strftime("%Y-%m-%d %H:%M"), "load_average_at_start": os.getloadavg()}
        self.t0 = time.perf_counter()
        LOAD_MAX[0] = 0.0

    def end(self) -> dict:
        return self.record | {"load_average_at_end": os.getloadavg(), "load_average_1min_max": LOAD_MAX[0],
                              "wall_s": time.perf_counter() - self.t0}  # fmt: skip


# ---- the command line and the results ----------------------------------------------------------------------------
def parser(description: str | None = None, *, raw: bool = False, out: Path | str | None = None,
           out_help: str | None = None) -> argparse.ArgumentParser:  # fmt: skip
    """The bench's argument parser: `description` (``raw``: printed as written, e.g. the whole docstring), and
    ``--out`` (a path; default `out`) where the bench writes its results."""
    kw = {"formatter_class": argparse.RawDescriptionHelpFormatter} if raw else {}
    ap = argparse.ArgumentParser(description=description, **kw)
    if out is not None:
        ap.add_argument("--out", type=Path, default=Path(out), help=out_help or f"where to write (default {out})")
    return ap


def write_json(path: Path | str, obj, indent: int = 2, **kw) -> Path:
    """`obj` as indented JSON with a final newline (its folder made)."""
    return write_text(path, json.dumps(obj, indent=indent, **kw) + "\n")


def write_text(path: Path | str, text: str, *, atomic: bool = False) -> Path:
    """`text` into `path` (its folder made); `atomic`: through a temporary file beside it, so that a reader never
    sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not atomic:
        path.write_text(text)
        return path
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def save_boundary(folder: Path, name: str, mean, groups, counts, **meta) -> None:
    """One boundary's Jacobian files as the Jacobian job writes them: J̄ (``<name>.npy``), its group means
    (``<name>.groups.npy``) and ``<name>.json`` (`meta`, the samples and the group counts)."""
    import numpy as np

    np.save(folder / f"{name}.npy", mean)
    np.save(folder / f"{name}.groups.npy", groups)
    counts = [int(c) for c in counts]
    (folder / f"{name}.json").write_text(json.dumps(meta | {"n_samples": sum(counts), "group_counts": counts}))


def schema_defaults(section: str) -> dict:
    """A config section's settings at their schema defaults (config/schema/<section>.schema.yaml)."""
    from layergeom import config as lgconfig

    return {k: v["default"] for k, v in lgconfig.load_schema(section)["properties"].items() if "default" in v}


def default_seed() -> int:
    """The workflow's seed at its schema default."""
    from layergeom import config as lgconfig

    return lgconfig.load_schema("config")["properties"]["seed"]["default"]
