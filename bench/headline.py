"""The README's headline tables computed from a run's tables, as Markdown: the numbers ("What the embedded model
shows") and the papers' claims ("The papers' claims: {model}", from claims.tsv).

    python bench/headline.py RESULTS_DIR [--model M] [--claims] [--check README.md | --update README.md]
                             [--heading H] [--claims-tsv TSV]

RESULTS_DIR is a run's `results/` folder (or its working directory). One column per checkpoint of the model
(in `checkpoints.tsv` order), one row per headline number; every cell is read from the tables of
docs/outputs.md, nothing is typed in:

- numerical rank and median condition number of the attention J̄_b (`spectra.tsv`);
- per boundary kind, Henrici departure, self-realignment and complex fraction: the mean over the first /
  middle / last third of the layers and the slope per unit of relative depth, with intervals (`trends.tsv`:
  thirds from the per-boundary jackknife intervals, slopes from the bootstrap over the kind's boundaries);
- cumulative erank at full depth, both variants (`cumulative.tsv`), and after Schur surgery at α = 0
  (`schur.tsv`; with the spread over eigenvalue orders where the table has it);
- FDR-significant coupling layers, any boundary and by the per-layer test (`coupling.tsv`);
- ρ(RelErr, KL) pooled over layers per class (`tokenwise/pooled.tsv`) and the median over layers of the
  low-rank class's residual and tokenwise angles (`tokenwise.tsv`).

The claims table (`--claims`) has a row per claim and its kind, class or variant and a column per checkpoint and
per trained-against-init pair, each cell the verdict with the estimate and its interval, read from
`results/{model}/claims.tsv` (docs/methods.md §5), and a last row counting each column's verdicts.

Without --check it prints the table (the claims table with --claims), ready to paste under the README's heading.
With --check README.md it compares the README's tables (the first table after each heading: --heading for the
numbers, "The papers' claims: {model}" for the claims, where the run has a claims.tsv or the README that heading)
with the run's, prints each row that differs, is missing or is not the run's, and exits 1 if any does (0 when all
match). --update README.md writes the run's tables into the README in place of those tables (the headings must
exist), so that regenerating the README's numbers from a run is one command. The shipped tables: the default
model's in README.md (the default --heading), Gemma-3-270M's in docs/runs.md (--heading "A second real family
offline (opt-in)"); tests/test_docs.py checks that each heading is there with its tables.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from harness import parser

from layergeom.io import read_tsv_if_exists

HEADING = "What the embedded model shows"
KIND_NAME = {"attn": "attention", "mlp": "MLP", "pli": "per-layer input", "block": "block"}
TREND_ROWS = [("henrici", "Henrici departure", 3), ("self_realign", "self-realignment SR{k}", 3),
              ("frac_complex", "complex fraction of the non-zero modes", 3)]  # fmt: skip
CLASSES = [("lowrank", "low-rank"), ("orthogonal", "orthogonal"), ("mlp", "MLP")]
NA = "n/a"
SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


class Missing(SystemExit):
    """A table the headline needs is absent: one line naming it."""


def num(x, digits: int = 1, signed: bool = False) -> str:
    """x with `digits` decimals (a true minus sign; + shown when `signed`), n/a when missing or not finite."""
    if x is None or not np.isfinite(x):
        return "inf" if x is not None and np.isinf(x) and x > 0 else NA
    x = round(float(x), digits) + 0.0  # + 0.0: no "−0.000"
    s = f"{x:+.{digits}f}" if signed and x != 0 else f"{x:.{digits}f}"
    return s.replace("-", "−")


def with_ci(x, lo, hi, digits: int = 1, signed: bool = False) -> str:
    """'x [lo, hi]', or 'x' alone when the interval is missing."""
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return num(x, digits, signed)
    return f"{num(x, digits, signed)} [{num(lo, digits, signed)}, {num(hi, digits, signed)}]"


def results_root(path: Path) -> Path:
    return path / "results" if (path / "results").is_dir() else path


def pick_model(results: Path, model: str | None) -> str:
    found = sorted(p.parent.parent.name for p in results.glob("*/*/spectra.tsv"))
    models = list(dict.fromkeys(found))
    if model is not None:
        if model not in models:
            raise Missing(f"no results/{model}/<checkpoint>/spectra.tsv under {results} (models: {models})")
        return model
    if len(models) != 1:
        raise Missing(f"{results} holds {len(models)} models ({', '.join(models) or 'none'}): choose one with --model")
    return models[0]


def checkpoint_order(model_dir: Path) -> list[str]:
    """The model's checkpoints in checkpoints.tsv order (config order), those with a spectra.tsv."""
    have = {p.parent.name for p in model_dir.glob("*/spectra.tsv")}
    listed = read_tsv_if_exists(model_dir / "checkpoints.tsv")
    order = list(listed["checkpoint"]) if listed is not None else sorted(have)
    return [c for c in order if c in have]


class Checkpoint:
    """The tables of one checkpoint, read once."""

    def __init__(self, path: Path):
        self.path = path
        self.spectra = read_tsv_if_exists(path / "spectra.tsv")
        self.trends = read_tsv_if_exists(path / "trends.tsv")
        self.cumulative = read_tsv_if_exists(path / "cumulative.tsv")
        self.schur = read_tsv_if_exists(path / "schur.tsv")
        self.coupling = read_tsv_if_exists(path / "coupling.tsv")
        self.tokenwise = read_tsv_if_exists(path / "tokenwise.tsv")
        self.pooled = read_tsv_if_exists(path / "tokenwise" / "pooled.tsv")
        manifest = path / "manifest.json"
        self.d_model = json.loads(manifest.read_text()).get("d_model") if manifest.exists() else None


def rank_cell(ck: Checkpoint, kind: str) -> str:
    sp = ck.spectra[ck.spectra["kind"] == kind]
    ranks = sorted(set(sp["numerical_rank"].astype(int)))
    of = f" of {ck.d_model}" if ck.d_model else ""
    return (f"{ranks[0]}" if len(ranks) == 1 else f"{ranks[0]}–{ranks[-1]}") + of


def cond_cell(ck: Checkpoint, kind: str) -> str:
    sp = ck.spectra[ck.spectra["kind"] == kind]
    med = float(np.median(sp["cond"]))
    full = float(np.median(sp["cond_full"])) if "cond_full" in sp else math.nan
    if not np.isfinite(full) or full <= 0:
        return num(med)
    return f"{num(med)} (σ₁/σ_d ~1e{round(math.log10(full))})"


def trend_cell(ck: Checkpoint, kind: str, metric: str, digits: int) -> str:
    t = ck.trends
    r = t[(t["kind"] == kind) & (t["metric"] == metric)] if t is not None else []
    if not len(r):
        return NA
    r = r.iloc[0]
    first = with_ci(r["first_third"], r["first_third_ci_low"], r["first_third_ci_high"], digits)
    last = with_ci(r["last_third"], r["last_third_ci_low"], r["last_third_ci_high"], digits)
    slope = with_ci(r["slope"], r["slope_ci_low"], r["slope_ci_high"], digits, signed=True)
    return f"{first} / {num(r['middle_third'], digits)} / {last}; slope {slope}"


def full_depth(table: pd.DataFrame | None, **where) -> pd.Series | None:
    """The row at the largest depth of `table` restricted to column == value for each of `where`."""
    if table is None:
        return None
    t = table
    for col, val in where.items():
        if col not in t:
            return None
        t = t[np.isclose(t[col], val)] if isinstance(val, float) else t[t[col] == val]
    return t.loc[t["depth"].idxmax()] if len(t) else None


def erank_cell(row: pd.Series | None) -> str:
    if row is None:
        return NA
    cell = with_ci(row["erank"], row.get("erank_ci_low"), row.get("erank_ci_high"), 1)
    if "erank_order_min" in row and np.isfinite(row["erank_order_min"]):
        cell += f" (orders {num(row['erank_order_min'])}–{num(row['erank_order_max'])})"
    return cell


def coupling_cell(ck: Checkpoint) -> str:
    co = ck.coupling
    if co is None:
        return NA
    sig = co["significant"].astype(bool)
    n_layers = co["layer"].nunique()
    cell = f"{co.loc[sig, 'layer'].nunique()} of {n_layers} ({int(sig.sum())} of {len(co)})"
    if "significant_layer" in co:
        cell += f" / {co.loc[co['significant_layer'].astype(bool), 'layer'].nunique()} of {n_layers}"
    return cell


def rho_cell(ck: Checkpoint) -> str:
    p = ck.pooled
    vals = []
    for cls, _ in CLASSES:
        r = p[p["class"] == cls] if p is not None else []
        vals.append(num(float(r["spearman_rho"].iloc[0]), 2) if len(r) else NA)
    return " / ".join(vals)


def angle_cell(ck: Checkpoint, cls: str = "lowrank") -> str:
    t = ck.tokenwise
    t = t[t["class"] == cls] if t is not None else []
    if not len(t):
        return NA
    return f"{num(float(np.nanmedian(t['angle_res_deg'])), 0)}° / {num(float(np.nanmedian(t['angle_tok_deg'])), 0)}°"


def headline_rows(results: Path, model: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(checkpoints, [(row label, one cell per checkpoint)]) of the headline table of one model."""
    model_dir = results / model
    names = checkpoint_order(model_dir)
    if not names:
        raise Missing(f"no checkpoint of {model} has a spectra.tsv under {model_dir}")
    cks = [Checkpoint(model_dir / c) for c in names]
    for ck in cks:
        if ck.trends is None:
            raise Missing(f"{ck.path / 'trends.tsv'} is missing: run the workflow's spectra_trends rule first")
    kinds = list(dict.fromkeys(k for ck in cks for k in ck.spectra["kind"]))
    first = "attn" if "attn" in kinds else kinds[0]
    sr_k = int(cks[0].spectra["sr_k"].iloc[0]) if "sr_k" in cks[0].spectra else 64
    name = KIND_NAME.get(first, first)
    rows = [
        (f"numerical rank of every {name} J̄_b", [rank_cell(ck, first) for ck in cks]),
        (f"condition number of {name} J̄_b over its non-zero modes (median)", [cond_cell(ck, first) for ck in cks]),
    ]
    for metric, label, digits in TREND_ROWS:
        label = label.format(k=str(sr_k).translate(SUBSCRIPT))
        for kind in kinds:
            rows.append((f"{label}, {KIND_NAME.get(kind, kind)}: first / middle / last third (mean); slope per unit "
                         "depth", [trend_cell(ck, kind, metric, digits) for ck in cks]))  # fmt: skip
    rows += [
        ("cumulative erank at full depth, `update` (products of J̄_b)",
         [erank_cell(full_depth(ck.cumulative, variant="update")) for ck in cks]),
        ("the same, `full` (products of I + J̄_b)", [erank_cell(full_depth(ck.cumulative, variant="full")) for ck in cks]),
        ("after Schur surgery at α = 0, `update` / `full`",
         [" / ".join(erank_cell(full_depth(ck.schur, alpha=0.0, control="none", variant=v)) for v in ("update", "full"))
          for ck in cks]),
        ("FDR-significant coupling layers: any boundary (boundaries) / per-layer test", [coupling_cell(ck) for ck in cks]),
        ("ρ(RelErr, KL) pooled over layers: " + " / ".join(n for _, n in CLASSES) + " class",
         [rho_cell(ck) for ck in cks]),
        ("angle of the residual / of the tokenwise part to the update (low-rank, median over layers)",
         [angle_cell(ck) for ck in cks]),
    ]  # fmt: skip
    return names, rows


CLAIMS_HEADING = "The papers' claims: {model}"
VERDICT_WORDS = ("holds", "fails", "reversed", "inconclusive", "not applicable")


def claims_heading(model: str) -> str:
    return CLAIMS_HEADING.format(model=model)


def sig(x, count: bool = False) -> str:
    """x to 3 significant digits (a count as the integer it is), a true minus sign; n/a when missing."""
    if x is None or pd.isna(x) or not np.isfinite(x):
        return NA
    x = float(x) + 0.0  # no "−0"
    text = f"{x:.0f}" if count and x == round(x) else f"{x:#.3g}".rstrip(".")
    if "e" in text:
        text = f"{x:.2e}"
    return text.replace("-", "−")


def read_claims(results: Path, model: str, path: Path | None = None) -> pd.DataFrame | None:
    """The model's claims.tsv (or its rows of results/claims.tsv; or the file `path`), None when there is none."""
    table = read_tsv_if_exists(path or results / model / "claims.tsv")
    if table is None:
        both = read_tsv_if_exists(results / "claims.tsv")
        table = both[both["model"] == model] if both is not None else None
    return table if table is not None and len(table) else None


def _text(row: pd.Series, col: str) -> str:
    v = row.get(col)
    return v if isinstance(v, str) else ""


def claim_cell(row: pd.Series) -> str:
    """'verdict estimate [lo, hi]', a count with what it was compared with, or the verdict alone."""
    verdict = row["verdict"].replace("_", " ")
    if row["verdict"] == "not_applicable" or sig(row["estimate"]) == NA:
        return verdict
    if sig(row["ci_low"]) != NA and sig(row["ci_high"]) != NA:
        return f"{verdict} {sig(row['estimate'])} [{sig(row['ci_low'])}, {sig(row['ci_high'])}]"
    cell = f"{verdict} {sig(row['estimate'], count=True)}"  # no interval: a count
    against = _text(row, "compared_with")
    if against not in ("", "0", "threshold") and sig(row["reference"]) != NA:
        cell += f" ({against} {sig(row['reference'], count=True)})"
    return cell


def claims_rows(table: pd.DataFrame) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(columns, [(row label, cells)]) of a model's claims: a column per checkpoint in the table's (axis) order, then
    per pair ('trained vs init'); a row per claim and its kind, class or variant."""
    cols, rows, cells = {}, {}, {}
    for _, r in table.iterrows():
        ck, base = _text(r, "checkpoint") or "—", _text(r, "baseline")
        col = f"{ck} vs {base}" if base else ck
        scope = " · ".join(x for x in (_text(r, "kind"), _text(r, "class"), _text(r, "variant")) if x)
        label = f"`{r['claim']}`" + (f" {scope}" if scope else "")
        cols.setdefault(col, " vs " in col)
        rows.setdefault(label, None)
        cells[(label, col)] = claim_cell(r)
    names = [c for pair in (False, True) for c, is_pair in cols.items() if is_pair == pair]
    out = [(label, [cells.get((label, c), "") for c in names]) for label in rows]
    tally = [" / ".join(str(sum(cells.get((label, c), "").startswith(v) for label in rows)) for v in VERDICT_WORDS)
             for c in names]  # fmt: skip
    return names, [*out, ("verdicts: " + " / ".join(VERDICT_WORDS), tally)]


def to_markdown(names: list[str], rows: list[tuple[str, list[str]]]) -> str:
    lines = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return "\n".join(lines) + "\n"


def split_row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def readme_table(text: str, heading: str = HEADING) -> tuple[list[str], dict[str, list[str]]]:
    """The first Markdown table after the heading `## {heading}`: (header cells, row label -> cells)."""
    lines = text.splitlines()
    i, j = table_span(lines, heading)
    table = lines[i:j]
    header = split_row(table[0])[1:]
    rows = {}
    for line in table[2:]:
        cells = split_row(line)
        rows[cells[0]] = cells[1:]
    return header, rows


def table_span(lines: list[str], heading: str, insert: bool = False) -> tuple[int, int]:
    """[start, end) of the lines of the first Markdown table after the heading `heading` (a section without a table,
    with `insert`: the empty span after its text, where a table goes)."""
    starts = [i for i, line in enumerate(lines) if line.lstrip("#").strip() == heading and line.startswith("#")]
    if not starts:
        raise Missing(f"no heading '{heading}' in the README")
    i = starts[0] + 1
    while i < len(lines) and not lines[i].startswith("|") and not lines[i].startswith("#"):
        i += 1
    if i == len(lines) or lines[i].startswith("#"):
        if not insert:
            raise Missing(f"no table under the heading '{heading}'")
        while i > starts[0] + 1 and not lines[i - 1].strip():
            i -= 1
        return i, i
    j = i
    while j < len(lines) and lines[j].startswith("|"):
        j += 1
    if j - i < 2:
        raise Missing(f"no table under the heading '{heading}'")
    return i, j


def replace_table(text: str, heading: str, markdown: str) -> str:
    """`text` with the first table under `heading` replaced by `markdown` (added after the section's text where it
    has no table)."""
    lines = text.splitlines()
    i, j = table_span(lines, heading, insert=True)
    table = markdown.rstrip("\n").splitlines()
    out = lines[:i] + (table if i < j else ["", *table]) + lines[j:]
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def check(readme: Path, names: list[str], rows: list[tuple[str, list[str]]], heading: str = HEADING) -> list[str]:
    """Every difference between the README's headline table and the run's, one line each (none: they match)."""
    header, have = readme_table(readme.read_text(), heading)
    problems = []
    if header != names:
        problems.append(f"{readme}: header: the README has {' | '.join(header)}, the run has {' | '.join(names)}")
    for label, cells in rows:
        if label not in have:
            problems.append(f"{readme}: row '{label}' is missing; the run gives: {' | '.join(cells)}")
        elif have[label] != cells:
            problems.append(f"{readme}: row '{label}' differs: the README has {' | '.join(have[label])}; "
                            f"the run gives {' | '.join(cells)}")  # fmt: skip
    ours = {label for label, _ in rows}
    problems += [f"{readme}: row '{label}' is not a number of the run" for label in have if label not in ours]
    return problems


def tables(results: Path, model: str, heading: str, claims_tsv: Path | None = None
           ) -> list[tuple[str, list[str], list[tuple[str, list[str]]]]]:  # fmt: skip
    """The README's tables of one run: (heading, columns, rows), the numbers and, where the run has them, the claims."""
    out = [(heading, *headline_rows(results, model))]
    claims = read_claims(results, model, claims_tsv)
    if claims is not None:
        out.append((claims_heading(model), *claims_rows(claims)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__.split("\n")[0])
    ap.add_argument("results", type=Path, help="the run's results/ folder (or its working directory)")
    ap.add_argument("--model", default=None, help="the model (default: the only one in the results)")
    ap.add_argument("--claims", action="store_true", help="print the claims table (from claims.tsv) instead")
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--check", type=Path, default=None, metavar="README", help="compare with this README's tables")
    what.add_argument("--update", type=Path, default=None, metavar="README", help="write the tables into this README")
    ap.add_argument("--heading", default=HEADING, help="the README section whose first table is the headline")
    ap.add_argument(
        "--claims-tsv",
        type=Path,
        default=None,
        metavar="TSV",
        help="read the claims from this file (python -m layergeom.claims writes one for an older run)",
    )
    args = ap.parse_args(argv)
    try:
        results = results_root(args.results)
        model = pick_model(results, args.model)
        if args.check is None and args.update is None:
            if args.claims:
                claims = read_claims(results, model, args.claims_tsv)
                if claims is None:
                    raise Missing(f"no {results / model / 'claims.tsv'}: run the workflow's claims rule first")
                names, rows = claims_rows(claims)
            else:
                names, rows = headline_rows(results, model)
            sys.stdout.write(to_markdown(names, rows))
            return 0
        found = tables(results, model, args.heading, args.claims_tsv)
        readme = args.check or args.update
        text = readme.read_text()
        if args.update is not None:
            for heading, names, rows in found:
                text = replace_table(text, heading, to_markdown(names, rows))
            readme.write_text(text)
        problems = [p for heading, names, rows in found for p in check(readme, names, rows, heading)]
        if len(found) == 1 and any(line.lstrip("#").strip() == claims_heading(model) for line in text.splitlines()):
            problems.append(f"{readme}: '{claims_heading(model)}' has a table, but the run has no claims.tsv")
    except Missing as err:
        print(f"headline: {err.code}", file=sys.stderr)
        return 2
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    n = sum(len(rows) for _, _, rows in found)
    print(
        f"{readme}: {'wrote' if args.update else 'the headline tables match'} the run's {len(found)} table(s) ({n} rows)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
