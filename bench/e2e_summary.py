"""Per-rule summary of a workflow run's benchmark files (Snakemake `benchmark:` TSVs), as Markdown.

    python bench/e2e_summary.py [RUN_DIR] [--out bench/results/e2e.md] [--title "..."] [--wall SECONDS]

RUN_DIR is the run's working directory (default: the current one); every `benchmarks/<rule>/**/*.tsv`
below it is one job of <rule>. Per rule: jobs, total and max wall seconds (`s`), total CPU seconds
(`cpu_time`) and max RSS (`max_rss`, MB). Snakemake writes `NA` for values it could not sample (jobs
shorter than its ~1 s sampling interval); those count as missing, not as zero.
"""

from __future__ import annotations

import csv
import math
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness import RESULTS, parser, write_text


@dataclass
class RuleStats:
    rule: str
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)


def _num(value: str | None) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return math.nan
    return x


def read_benchmarks(run_dir: Path) -> dict[str, RuleStats]:
    """One RuleStats per rule from benchmarks/<rule>/**/*.tsv (a `repeat()`ed benchmark has several rows)."""
    bench = run_dir / "benchmarks"
    if not bench.is_dir():
        raise SystemExit(f"no benchmarks/ folder in {run_dir}: give the run's working directory (snakemake -d)")
    stats: dict[str, RuleStats] = {}
    for path in sorted(bench.rglob("*.tsv")):
        rule = path.relative_to(bench).parts[0]
        st = stats.setdefault(rule, RuleStats(rule))
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                st.seconds.append(_num(row.get("s")))
                st.cpu.append(_num(row.get("cpu_time")))
                st.rss.append(_num(row.get("max_rss")))
    return stats


def _sum(xs: list[float]) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return sum(vals) if vals else math.nan


def _max(xs: list[float]) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return max(vals) if vals else math.nan


def _fmt(x: float, digits: int = 1) -> str:
    return "NA" if math.isnan(x) else f"{x:,.{digits}f}"


def to_markdown(stats: dict[str, RuleStats], title: str, run_dir: Path, wall: float | None = None) -> str:
    rows = sorted(stats.values(), key=lambda s: -(_sum(s.seconds) if not math.isnan(_sum(s.seconds)) else 0))
    total_s = _sum([x for s in rows for x in s.seconds])
    total_cpu = _sum([x for s in rows for x in s.cpu])
    n_jobs = sum(len(s.seconds) for s in rows)
    lines = [
        f"# {title}",
        "",
        f"Run directory: `{run_dir}`. Machine: {platform.node()}, {platform.machine()}, "
        f"{os.cpu_count()} logical CPUs, Python {platform.python_version()}, {platform.system()} {platform.release()}.",
        f"{n_jobs} jobs of {len(rows)} rules; the sum of job wall times is {_fmt(total_s)} s "
        f"({_fmt(total_cpu)} CPU s)" + (f"; the run's wall-clock time was {wall:,.1f} s." if wall else "."),
        "Job times include each job's Python start-up (about 2 s on an idle 2-core machine, more under load).",
        "",
        "| rule | jobs | total s | share | max s | mean s | total CPU s | max RSS (MB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in rows:
        tot = _sum(s.seconds)
        share = tot / total_s * 100 if total_s and not math.isnan(tot) else math.nan
        mean = tot / len(s.seconds) if s.seconds and not math.isnan(tot) else math.nan
        lines.append(
            f"| {s.rule} | {len(s.seconds)} | {_fmt(tot)} | {_fmt(share)} % | {_fmt(_max(s.seconds))} | "
            f"{_fmt(mean)} | {_fmt(_sum(s.cpu))} | {_fmt(_max(s.rss), 0)} |"
        )
    lines.append(
        f"| **all** | {n_jobs} | {_fmt(total_s)} | 100.0 % | {_fmt(_max([x for s in rows for x in s.seconds]))} | "
        f"{_fmt(total_s / n_jobs if n_jobs else math.nan)} | {_fmt(total_cpu)} | "
        f"{_fmt(_max([x for s in rows for x in s.rss]), 0)} |"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__.split("\n")[0], out=RESULTS / "e2e.md")
    ap.add_argument("run_dir", nargs="?", default=".", type=Path, help="the run's working directory")
    ap.add_argument("--title", default="End-to-end run: time and memory per rule")
    ap.add_argument("--wall", type=float, default=None, help="the run's measured wall-clock seconds, if known")
    args = ap.parse_args(argv)
    run_dir = args.run_dir.resolve()
    stats = read_benchmarks(run_dir)
    if not stats:
        raise SystemExit(f"no benchmark files under {run_dir / 'benchmarks'}")
    md = to_markdown(stats, args.title, run_dir, args.wall)
    write_text(args.out, md, atomic=True)
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
