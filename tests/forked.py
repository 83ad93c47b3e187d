"""Run a Python script as a fresh process that starts in milliseconds, for the tests that SIGKILL a job mid-run.

``run(script)`` is ``subprocess.run([sys.executable, "-c", script], capture_output=True)`` without the ~3 s a
new interpreter spends importing torch, scipy, pandas and layergeom: the script runs in a child of a fork
server (multiprocessing's ``forkserver``) that imported those modules once, before any thread pool started.
The child is a real process of its own: the script's ``os.kill(os.getpid(), SIGKILL)`` kills it alone, its
exit status is a subprocess's (−9), and what it wrote to disk is all that survives. Its stdout and stderr go
to files read back into ``stdout`` and ``stderr``. The fork server's module state is fresh imports only, so a child sees
what a new interpreter would (the script's own monkeypatching stays in the child).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import runpy
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: imported once by the fork server (an import error here is ignored there and happens in the child instead)
PRELOAD = [
    "numpy",
    "scipy.linalg",
    "pandas",
    "torch",
    "layergeom.resume.snapshots",
    "layergeom.spectral.jobs.jacobians",
    "layergeom.spectral.jobs.table",
    "layergeom.spectral.jobs.cumulative",
    "layergeom.spectral.jobs.schur",
    "layergeom.spectral.jobs.convergence",
    "layergeom.topology.pipeline",
    "layergeom.store",
    "transformers",
    "layergeom.adapters",
    "layergeom.models",
    "layergeom.materialize",
    # the tests' own modules the scripts import (tests/ is on the fork server's sys.path, as on pytest's)
    "conftest",
    "test_spectral",
    "test_resume",
    "test_fanout",
]

_CONTEXT: list = []


def _context():
    if not _CONTEXT:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        _CONTEXT.append(ctx)
    return _CONTEXT[0]


@dataclass
class Result:
    returncode: int  # −signal for a killed child, as subprocess's
    stdout: str
    stderr: str


def _child(script: str | None, path: str | None, args: list[str], cwd: str, env: dict, out: str, err: str) -> None:
    for fd, name in ((1, out), (2, err)):
        f = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (the process's own streams)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    if path is None:
        exec(compile(script, "<forked script>", "exec"), {"__name__": "__main__"})
    else:  # python path args...: the script as __main__ with its arguments
        sys.argv = [path, *args]
        sys.path.insert(0, str(Path(path).parent))  # as `python path` puts the script's folder first
        runpy.run_path(path, run_name="__main__")


def run(script: str | None = None, *, path=None, args=(), timeout: float = 600, env: dict | None = None) -> Result:
    """Run `script` (Python source), or the file `path` with `args`, in a forked fresh process (cwd and
    environment: the caller's, or `env`) and wait for it."""
    if (script is None) == (path is None):
        raise ValueError("forked.run: give a script or a path")
    with tempfile.TemporaryDirectory(prefix="forked-") as tmp:
        out, err = str(Path(tmp) / "stdout"), str(Path(tmp) / "stderr")
        env = dict(os.environ if env is None else env)
        p = _context().Process(
            target=_child,
            args=(script, None if path is None else str(path), [str(a) for a in args], os.getcwd(), env, out, err),
        )
        p.start()
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join()
            raise TimeoutError(f"the forked script ran past {timeout} s")
        read = lambda name: Path(name).read_text(errors="replace")  # noqa: E731
        return Result(returncode=p.exitcode, stdout=read(out), stderr=read(err))
