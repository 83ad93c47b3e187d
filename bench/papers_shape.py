"""Each job of a run against its request: wall time, CPU time and peak RSS against `runtime` and `mem_mb`.

For the run of bench/configs/papers_shape.yaml (Llama-3.1-8B's shapes, 2 blocks, the papers' settings), by hand:

    mkdir -p /work/runs/papers_shape
    nice -n 10 python bench/papers_shape.py monitor /work/runs/papers_shape &          # exact peaks, see below
    nice -n 10 snakemake --configfile bench/configs/papers_shape.yaml -d /work/runs/papers_shape \\
        --cores 2 --keep-going --rerun-incomplete
    python bench/papers_shape.py report /work/runs/papers_shape   # -> bench/results/papers_shape.md

What is read:
- the job's benchmark file (`benchmarks/<rule>/...tsv`, Snakemake's `benchmark:`): `s` (wall seconds), `cpu_time`
  (user + system seconds of the job's processes) and `max_rss` (MiB). Snakemake samples the RSS every 0.5 s for
  the first 30 s, then every 30 s, so a longer job's short peak can fall between two samples;
- the job's request, as Snakemake evaluated it when it scheduled the job: the `resources:` line that the run's
  logs (`.snakemake/log/*.snakemake.log`, every invocation) print for each job, matched by its benchmark path
  (the last invocation that ran it wins); `runtime` in minutes, `mem_mib` (`mem_mb` in MiB, as `max_rss`);
- with `monitor` running beside the run, each job process's kernel high-water mark (VmHWM in
  /proc/<pid>/status, the largest RSS the process ever had: no sampling gap), written to `<run>/peaks.jsonl`
  when the process ends; a job's peak is the largest VmHWM of the processes of its script that ran within its
  benchmark window (its file's mtime minus `s`, to its mtime).

A job is flagged when its wall time exceeds its `runtime` or its peak (the larger of the two measures) exceeds
its `mem_mb`. Jobs without a request (local rules, or one not in the logs) are listed without a verdict.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness import RESULTS, parser, status_kb, write_text

#: a job's script as Snakemake runs it: `.snakemake/scripts/tmpXXXXXXXX.<script>.py`
SCRIPT = re.compile(r"\.snakemake/scripts/tmp[^/.]+\.([A-Za-z0-9_]+)\.py$")


# ---- the monitor: each job process's peak RSS ------------------------------------------------------------------
def _job_processes(run_dir: Path) -> dict[int, dict]:
    """The live processes running a job script of `run_dir`: pid -> script name, start time (epoch s), cmdline."""
    out = {}
    clk = os.sysconf("SC_CLK_TCK")
    boot = None
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            script = next((m.group(1) for a in cmd if (m := SCRIPT.search(a.decode(errors="replace")))), None)
            if script is None or Path(os.readlink(f"/proc/{pid}/cwd")).resolve() != run_dir:
                continue
            if boot is None:
                boot = next(float(x.split()[1]) for x in open("/proc/stat") if x.startswith("btime"))
            start = boot + int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]) / clk
        except (OSError, ValueError, StopIteration):
            continue
        out[pid] = {"script": script, "start": start}
    return out


def monitor(run_dir: Path, interval: float = 2.0, once: bool = False) -> None:
    """Every `interval` s, read the VmHWM (the kernel's peak RSS, files mapped into memory included) and the
    anonymous RSS (RssAnon: the job's own arrays, its largest sample kept) of each job process of `run_dir`; append
    its record to peaks.jsonl when the process is gone. Runs until killed (a killed monitor loses only the live
    processes' records)."""
    run_dir = run_dir.resolve()
    seen: dict[tuple[int, float], dict] = {}
    out = run_dir / "peaks.jsonl"
    while True:
        live = _job_processes(run_dir)
        now = time.time()
        for pid, p in live.items():
            rec = seen.setdefault((pid, p["start"]), {"pid": pid, **p, "hwm_mib": 0.0, "anon_mib": 0.0})
            for key, field in (("VmHWM", "hwm_mib"), ("RssAnon", "anon_mib")):
                kb = status_kb(pid, key)
                if kb is not None:
                    rec[field] = max(rec[field], kb / 1024)
            rec["last_seen"] = now
        gone = [k for k in seen if k[0] not in live or (k[0], live[k[0]]["start"]) != k]
        if gone:
            with open(out, "a") as fh:
                for k in gone:
                    fh.write(json.dumps(seen.pop(k)) + "\n")
        if once:
            return
        time.sleep(interval)


# ---- the report ---------------------------------------------------------------------------------------------
@dataclass
class Job:
    rule: str
    bench: str  # benchmarks/... relative to the run directory
    seconds: float
    cpu: float
    rss: float  # Snakemake's sampled max_rss (MiB)
    end: float  # the benchmark file's mtime
    hwm: float = math.nan  # the monitor's peak (MiB)
    anon: float = math.nan  # the monitor's largest anonymous RSS (MiB)
    runtime: float = math.nan  # requested minutes
    mem_mib: float = math.nan  # requested memory (MiB)

    @property
    def peak(self) -> float:
        vals = [x for x in (self.rss, self.hwm) if not math.isnan(x)]
        return max(vals) if vals else math.nan

    @property
    def over(self) -> list[str]:
        out = []
        if not math.isnan(self.runtime) and self.seconds > 60 * self.runtime:
            out.append("runtime")
        if not math.isnan(self.mem_mib) and self.peak > self.mem_mib:
            # over by pages of files it maps (the activation store it writes, the arrays it reads), which the
            # kernel can drop or write back under a memory limit, or by its own arrays
            out.append("mem_mb" if not self.anon <= self.mem_mib else "mem_mb (mapped files)")
        return out


def _num(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def read_jobs(run_dir: Path) -> list[Job]:
    """One Job per benchmark file (the last row of a repeated benchmark)."""
    bench = run_dir / "benchmarks"
    if not bench.is_dir():
        raise SystemExit(f"no benchmarks/ folder in {run_dir}: give the run's working directory (snakemake -d)")
    jobs = []
    for path in sorted(bench.rglob("*.tsv")):
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        if not rows:
            continue
        row = rows[-1]
        jobs.append(Job(path.relative_to(bench).parts[0], str(path.relative_to(run_dir)), _num(row.get("s")),
                        _num(row.get("cpu_time")), _num(row.get("max_rss")), path.stat().st_mtime))  # fmt: skip
    return jobs


def read_requests(run_dir: Path) -> dict[str, dict[str, str]]:
    """benchmark path -> the resources of the job that wrote it, from every Snakemake log of the run (oldest first,
    so the last scheduling of a job wins)."""
    logs = sorted((run_dir / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda p: p.stat().st_mtime)
    out: dict[str, dict[str, str]] = {}
    for log in logs:
        bench = None
        for line in log.read_text(errors="replace").splitlines():
            if re.match(r"^(local)?rule \S+:$", line):
                bench = None
            m = re.match(r"^\s+benchmark: (\S+)$", line)
            if m:
                bench = m.group(1)
            m = re.match(r"^\s+resources: (.*)$", line)
            if m and bench:
                out[bench] = dict(kv.split("=", 1) for kv in m.group(1).split(", ") if "=" in kv)
    return out


def read_peaks(run_dir: Path) -> list[dict]:
    path = run_dir / "peaks.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def script_of(rule: str) -> str:
    """The script a rule runs (the per-model rules share their stage's script)."""
    for stage in ("spectra_jacobians", "topology_graph"):
        if rule.startswith(stage + "_"):
            return stage
    return rule


def attach(jobs: list[Job], requests: dict, peaks: list[dict], slack: float = 5.0) -> None:
    for j in jobs:
        r = requests.get(j.bench, {})
        j.runtime, j.mem_mib = _num(r.get("runtime")), _num(r.get("mem_mib"))
        start = j.end - j.seconds
        mine = [p for p in peaks if p["script"] == script_of(j.rule)
                and p["start"] >= start - slack and p["start"] <= j.end + slack]  # fmt: skip
        j.hwm = max((p["hwm_mib"] for p in mine), default=math.nan)
        j.anon = max((p.get("anon_mib", math.nan) for p in mine), default=math.nan)


def _fmt(x: float, digits: int = 0) -> str:
    return "—" if math.isnan(x) else f"{x:,.{digits}f}"


def _job_name(j: Job) -> str:
    return j.bench.removeprefix("benchmarks/").removesuffix(".tsv")


def to_markdown(jobs: list[Job], run_dir: Path, n_peaks: int) -> str:
    over = [j for j in jobs if j.over]
    asked = [j for j in jobs if not math.isnan(j.mem_mib)]
    total_s = sum(j.seconds for j in jobs if not math.isnan(j.seconds))
    total_cpu = sum(j.cpu for j in jobs if not math.isnan(j.cpu))
    lines = [
        "# The papers' width end to end: each job against its request (bench/papers_shape.py)",
        "",
        f"Run directory `{run_dir}` (config `bench/configs/papers_shape.yaml`: Llama-3.1-8B's shapes, 2 blocks, "
        f"random weights). Machine: {platform.machine()}, {os.cpu_count()} logical CPUs (shared with other work), "
        f"{platform.system()} {platform.release()}.",
        f"{len(jobs)} jobs; sum of their wall times {total_s / 3600:.2f} h, CPU time {total_cpu / 3600:.2f} h. "
        f"{len(asked)} jobs carry a request; **{len(over)} exceed it**"
        + (": " + ", ".join(f"`{_job_name(j)}` ({' and '.join(j.over)})" for j in over) if over else "")
        + ".",
        f"Peak RSS: the larger of Snakemake's sampled `max_rss` and the kernel's high-water mark (VmHWM) of the "
        f"job's processes ({n_peaks} process records from `bench/papers_shape.py monitor`; `—` where none); both "
        "count the pages of files a job maps (the activation store it writes, the group means it reads), as "
        "`layergeom.resources` does. Anon: the largest anonymous RSS the monitor sampled (every 2 s), the job's "
        "own arrays; a job over its mem_mb by mapped pages alone is marked so. Memory in MiB; `mem_mb` shown as "
        "MiB (`mem_mib`).",
        "",
        "| job | wall s | runtime (min) | wall / runtime | CPU s | peak RSS (MiB) | sampled max_rss | anon "
        "| mem_mb (MiB) | peak / mem | over |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for j in sorted(jobs, key=lambda j: j.end - j.seconds):
        wr = j.seconds / (60 * j.runtime) if j.runtime else math.nan
        mr = j.peak / j.mem_mib if j.mem_mib else math.nan
        lines.append(
            f"| `{_job_name(j)}` | {_fmt(j.seconds)} | {_fmt(j.runtime)} | {_fmt(wr, 2)} | {_fmt(j.cpu)} | "
            f"{_fmt(j.peak)} | {_fmt(j.rss)} | {_fmt(j.anon)} | {_fmt(j.mem_mib)} | {_fmt(mr, 2)} | "
            f"{'**' + ', '.join(j.over) + '**' if j.over else ''} |"
        )
    return "\n".join(lines) + "\n"


def report(run_dir: Path, out: Path) -> int:
    run_dir = run_dir.resolve()
    jobs = read_jobs(run_dir)
    if not jobs:
        raise SystemExit(f"no benchmark files under {run_dir / 'benchmarks'}")
    peaks = read_peaks(run_dir)
    attach(jobs, read_requests(run_dir), peaks)
    md = to_markdown(jobs, run_dir, len(peaks))
    write_text(out, md, atomic=True)
    sys.stdout.write(md)
    return 1 if any(j.over for j in jobs) else 0


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("monitor", help="record each job process's peak RSS into <run>/peaks.jsonl (until killed)")
    m.add_argument("run_dir", type=Path)
    m.add_argument("--interval", type=float, default=2.0)
    r = sub.add_parser("report", help="write the table; exit status 1 when a job exceeds its request")
    r.add_argument("run_dir", type=Path)
    r.add_argument("--out", type=Path, default=RESULTS / "papers_shape.md")
    args = ap.parse_args(argv)
    if args.cmd == "monitor":
        monitor(args.run_dir, args.interval)
        return 0
    return report(args.run_dir, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
