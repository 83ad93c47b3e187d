"""How far the result tables of two runs of one config differ (e.g. models in float32 vs bfloat16), as Markdown.

    python bench/dtype_agreement.py RUN_A RUN_B [--labels float32 bfloat16] [--out report.md] [--glob ...]

Every per-checkpoint table (RUN_A/results/<model>/<checkpoint>/*.tsv, or --glob) is compared with RUN_B's, row
by row (both runs write rows in the same order, and their text columns must agree), per numeric column: the
largest absolute difference, and that difference relative to the largest |value| of the column in RUN_A (so
columns near zero do not blow up). Exit status 1 when a table is missing from RUN_B or its rows do not match;
the differences themselves are reported, not judged: the tolerance of a dtype is stated by the test that owns it.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

from harness import parser


def read(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return (list(rows[0]) if rows else []), rows


def as_float(v: str) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def compare(a: Path, b: Path) -> tuple[list[tuple[str, int, float, float]], str | None]:
    """(column, rows, max |a - b|, that over max |a|) per numeric column; or an error."""
    cols, ra = read(a)
    cols_b, rb = read(b)
    if cols != cols_b or len(ra) != len(rb):
        return [], f"columns or row counts differ ({len(ra)} vs {len(rb)} rows)"
    numeric = [c for c in cols if all(as_float(r[c]) is not None or r[c] in ("", "nan", "NA") for r in ra)]
    text = [c for c in cols if c not in numeric]
    for i, (x, y) in enumerate(zip(ra, rb)):  # both runs write rows in the same order
        if any(x[c] != y[c] for c in text):
            return [], f"row {i}: text columns differ ({[x[c] for c in text]} vs {[y[c] for c in text]})"
    out = []
    for c in numeric:
        diff, scale, n = 0.0, 0.0, 0
        for x, y in ((as_float(r[c]), as_float(o[c])) for r, o in zip(ra, rb)):
            if x is None or y is None or math.isnan(x) or math.isnan(y):
                continue
            diff, scale, n = max(diff, abs(x - y)), max(scale, abs(x)), n + 1
        if n:
            out.append((c, n, diff, diff / scale if scale > 0 else 0.0))
    return out, None


def main(argv=None) -> int:
    ap = parser(__doc__.split("\n")[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--labels", nargs=2, default=["A", "B"])
    ap.add_argument("--out", type=Path, help="append the Markdown table to this file")
    ap.add_argument("--glob", default="results/*/*/*.tsv", help="tables to compare, relative to the runs")
    args = ap.parse_args(argv)
    lines = [f"## {args.labels[0]} vs {args.labels[1]}: result tables", "",
             "| table | column | rows | max abs diff | relative to max abs |", "|---|---|---|---|---|"]  # fmt: skip
    errors = []
    tables = sorted(args.run_a.glob(args.glob))
    for t in tables:
        rel = t.relative_to(args.run_a)
        other = args.run_b / rel
        if not other.exists():
            errors.append(f"{rel}: missing from {args.run_b}")
            continue
        cols, err = compare(t, other)
        if err:
            errors.append(f"{rel}: {err}")
        for c, n, d, r in cols:
            lines.append(f"| {rel} | {c} | {n} | {d:.3g} | {r:.3g} |")
    if not tables:
        errors.append(f"no tables {args.glob} under {args.run_a}")
    lines += ["", *[f"- FAIL: {e}" for e in errors]]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "a") as fh:
            fh.write(text)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
