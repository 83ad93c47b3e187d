"""Many Snakemake command lines from one Python that imports Snakemake once: each command runs in a process
forked from it (so no state passes between them), `jobs` at a time. Used by lg_runs.snakemake_many: a
command costs its parse and DAG only, not the ~1.5 s of Python start-up and imports.

    python snakemake_forks.py JOBS OUTDIR   (stdin: a JSON list of argument lists, without "snakemake")

Writes OUTDIR/<i>.out (stdout), <i>.err (stderr) and <i>.rc (exit code) for the i-th command.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import snakemake.cli


def child(argv: list[str], out: Path) -> None:
    for fd, suffix in ((1, ".out"), (2, ".err")):
        os.dup2(os.open(out.with_suffix(suffix), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    code = 1
    try:
        snakemake.cli.main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    jobs, outdir = int(sys.argv[1]), Path(sys.argv[2])
    commands = json.load(sys.stdin)
    running: dict[int, int] = {}  # pid -> command index
    todo = list(enumerate(commands))
    while todo or running:
        while todo and len(running) < jobs:
            i, argv = todo.pop(0)
            pid = os.fork()
            if pid == 0:
                child(argv, outdir / str(i))
            running[pid] = i
        pid, status = os.wait()
        (outdir / f"{running.pop(pid)}.rc").write_text(str(os.waitstatus_to_exitcode(status)))


if __name__ == "__main__":
    main()
