"""The precision budget of the Paper B tables: how far the shipped methods move each column of schur.tsv,
cumulative.tsv and convergence.tsv, against how far float32 storage of J̄ moves it (run by hand; writes
bench/results/precision_budget.json and the "Precision budget" section of docs/precision.md).

For each reference set of mean Jacobians (the default run's SmolLM2-135M, trained and init; Gemma-3-270M's run;
synthetic d = 4096 boundaries shaped like an 8B model's) the tables are computed

- by the **reference** method: every singular value decomposition of a product full (the certified low-rank
  route of ``linalg.certified_svd`` off), the one way the tables were computed before it;
- by the **shipped** methods (``shipped``);
- by the reference method on J̄ **stored in float32** (Y): draw 0 rounds every J̄_b to float32, draws 1 and
  2 also move each entry of J̄_b and of its float32 group means by −1, 0 or +1 ulp of float32 at random.

The budget (docs/precision.md): a continuous column c passes when the largest deviation of the method over
the rows, max |Δ| (of log c for an erank or a condition number), is at most max(0.1·Y_c, 1e-12·max|ref_c|),
Y_c the median over the draws of their largest deviation; and every row within 1/100 of the half-width of its
interval (erank: its jackknife interval, on the log scale). A discrete column (ranks, mode counts, count
fractions) must be equal, except in rows that a float32 draw moves too (their margin to the threshold is
below the float32 shift): those are listed. The random control's rows are budgeted as columns of their own
(``[random]``): they are a continuous function of J̄ since the control's basis is canonical.

    python bench/precision_budget.py run [--sets smollm2-trained smollm2-init gemma3-trained gemma3-init synthetic]
        [--runs /work/runs/base/results] [--work DIR] [--d 4096 --layers 2]
        # resumable: each table is kept in DIR; runs of other sets may go beside it (a lock per set)
    python bench/precision_budget.py render                 # bench/results/precision_budget.json -> docs

A method is a context in which the tables are computed (``METHODS``); ``complex64`` (singular values of the
products in single precision) is there to show that the check fails a worse method (tests/test_precision.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
from harness import RESULTS as RESULTS_DIR
from harness import ROOT, machine, parser, save_boundary, write_json, write_text

from layergeom import config as lgconfig
from layergeom.names import boundaries_for

#: the tables a method can change, and their row keys
TABLES = {  # in the order they are computed (schur.tsv's α = 1 rows are cumulative.tsv's)
    "cumulative": ["variant", "depth"],
    "schur": ["variant", "control", "alpha", "depth"],
    "convergence": ["metric", "n_groups"],
}
#: the row group of count fractions in a table of mixed metrics (convergence.tsv's frac_* rows): discrete
COUNT = "[count]"
#: columns compared on the log scale (positive, scale-free quantities)
LOG_WORDS = ("erank", "cond")
#: discrete columns: counts and count fractions, equal or listed
DISCRETE = {"b_numerical_rank", "b_n_modes", "b_frac_complex", "b_frac_expansive", "b_frac_complex_d",
            "b_frac_expansive_d", "b_frac_complex_max", "b_sr_k", "n_samples", "n_groups", "depth"}  # fmt: skip
#: the interval of each column where it has one (low, high, scale)
INTERVALS = {"erank": ("erank_ci_low", "erank_ci_high", "log"), "value": ("ci_low", "ci_high", None)}
#: the fraction of float32's deviation a method may reach, the floor relative to the column's scale, and the
#: fraction of an interval's half-width a row may move
BUDGET_Y, BUDGET_FLOOR, BUDGET_HALF = 0.1, 1e-12, 0.01
DRAWS = 3
#: each pass folder's record of the seconds its tables took (table -> seconds), written as each is computed
SECONDS = "seconds.json"
#: the table jobs save their state this often (seconds) and a rerun resumes from it: a pass takes up to hours
SNAPSHOT_S = 300.0
RESULTS = RESULTS_DIR / "precision_budget.json"
DOC = ROOT / "docs" / "precision.md"
BEGIN, END = "<!-- precision-budget:begin -->", "<!-- precision-budget:end -->"


# ---- methods: the contexts the tables are computed in ---------------------------------------------------------
@contextlib.contextmanager
def method(name: str):
    """``reference`` (every product's SVD full), ``shipped`` (as the workflow runs), ``complex64`` (the products'
    singular values and vectors in single precision: a worse method, for the check's own test)."""
    from layergeom.spectral import cumulative

    saved = {k: getattr(cumulative, k) for k in ("certified_svd", "torch_svd", "torch_svdvals")}
    try:
        if name in ("reference", "complex64"):
            cumulative.certified_svd = lambda C, vectors, **kw: None
        if name == "complex64":
            cumulative.torch_svd = lambda C, *a, **k: _single(saved["torch_svd"], C, True)
            cumulative.torch_svdvals = lambda C: _single(saved["torch_svdvals"], C, False)
        elif name not in ("reference", "shipped"):
            raise ValueError(f"unknown method '{name}'")
        yield
    finally:
        for k, v in saved.items():
            setattr(cumulative, k, v)


def _single(fn, C, vectors: bool):
    """fn on C in single precision, the results back in C's precision."""
    import torch

    low = torch.complex64 if C.is_complex() else torch.float32
    out = fn(C.to(low))
    if not vectors:
        return out.to(C.real.dtype if C.is_complex() else C.dtype)
    U, s, Vh = out
    return U.to(C.dtype), s.to(C.real.dtype if C.is_complex() else C.dtype), Vh.to(C.dtype)


# ---- the J̄ files: a reference set and its float32 draws --------------------------------------------------------
def perturbed_folder(src: Path, names: list[str], dst: Path, draw: int) -> Path:
    """A folder of J̄ stored in float32. Draw 0: J̄ rounded to float32 (the group means, float32 already, linked).
    Draw k > 0: J̄ rounded, then every entry of J̄ and of the group means moved by −1, 0 or +1 float32 ulp
    (seeded by k): the convergence table, which averages the group means itself, is moved only by these."""
    done = dst / ".done"
    if done.exists():
        return dst
    dst.mkdir(parents=True, exist_ok=True)
    g = np.random.default_rng([20261206, draw])

    def ulps(x):
        return x + np.spacing(x) * g.integers(-1, 2, size=x.shape).astype(np.float32)

    for n in names:
        J32 = np.load(src / f"{n}.npy").astype(np.float32)
        np.save(dst / f"{n}.npy", (ulps(J32) if draw else J32).astype(np.float64))
        if draw:
            np.save(dst / f"{n}.groups.npy", ulps(np.load(src / f"{n}.groups.npy")))
        elif not (dst / f"{n}.groups.npy").exists():
            os.symlink((src / f"{n}.groups.npy").resolve(), dst / f"{n}.groups.npy")
        if not (dst / f"{n}.json").exists():
            os.symlink((src / f"{n}.json").resolve(), dst / f"{n}.json")
    done.write_text("ok\n")
    return dst


def boundary_files(folder: Path, names: list[str]):
    from layergeom.spectral.jobs.common import BoundaryFiles

    return BoundaryFiles(names, *([folder / f"{n}.{e}" for n in names] for e in ("npy", "groups.npy", "json")))


def compute_tables(folder: Path, names: list[str], cfg: dict, seed: int, out: Path, tables=tuple(TABLES)) -> dict:
    """The tables of one J̄ folder with the spectra section `cfg` (each kept in `out`: a resumed run reads it)."""
    from layergeom.io import read_tsv
    from layergeom.spectral.jobs.convergence import write_convergence
    from layergeom.spectral.jobs.cumulative import write_cumulative
    from layergeom.spectral.jobs.schur import write_schur

    out.mkdir(parents=True, exist_ok=True)
    files = boundary_files(folder, names)
    got = {}
    for t in tables:
        path = out / f"{t}.tsv"
        if not path.exists():
            start = time.perf_counter()
            tmp = out / f".{t}.tsv"
            if t == "schur":
                write_schur(files, tmp, out / "cumulative.tsv", alphas=cfg["alphas"], seed=seed, sr_k=cfg["sr_k"], dtype=cfg["dtype"],
                            rank_tol=cfg["rank_tol"], boundary_metrics=cfg["schur_boundary_metrics"],
                            orders=cfg["schur_orders"], order_alphas=cfg["schur_order_alphas"],
                            ci_level=cfg["ci_level"], ci_blocks=cfg["schur_ci_blocks"],
                            ci_controls=cfg["schur_ci_controls"], snapshot_s=SNAPSHOT_S)  # fmt: skip
            elif t == "cumulative":
                write_cumulative(
                    files, tmp, ci_level=cfg["ci_level"], ci_blocks=cfg["ci_blocks"], snapshot_s=SNAPSHOT_S
                )
            else:
                write_convergence(files, tmp, sizes=cfg["convergence_sizes"],
                                  n_edge=cfg["convergence_boundaries"], sr_k=cfg["sr_k"], dtype=cfg["dtype"],
                                  rank_tol=cfg["rank_tol"], ci_level=cfg["ci_level"], snapshot_s=SNAPSHOT_S)  # fmt: skip
            tmp.replace(path)
            spent = json.loads((out / SECONDS).read_text()) if (out / SECONDS).exists() else {}
            write_json(out / SECONDS, spent | {t: time.perf_counter() - start}, indent=1)
        got[t] = read_tsv(path)
    return got


def seconds_spent(out: Path, tables=tuple(TABLES)) -> float:
    """The seconds the kept tables of `out` took to compute (when they were computed, not read): nan unless every
    table's is recorded (``all``: the pass's total, recorded at once)."""
    spent = json.loads((out / SECONDS).read_text()) if (out / SECONDS).exists() else {}
    if "all" in spent:
        return float(spent["all"])
    return float(sum(spent[t] for t in tables)) if all(t in spent for t in tables) else float("nan")


# ---- the comparison ------------------------------------------------------------------------------------------------
def _scale(col: str, x: np.ndarray) -> np.ndarray:
    """x on the column's scale: log for an erank or a condition number (a group tag ``[erank]`` too)."""
    if any(w in col for w in LOG_WORDS):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(x)
    return x


def _pair(ref: pd.DataFrame, other: pd.DataFrame, keys: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The two tables' rows in the same order (sorted by `keys`), the same columns; their rows must match."""
    a = ref.set_index(keys).sort_index()
    b = other.set_index(keys).sort_index()
    if not a.index.equals(b.index):
        raise SystemExit(f"the tables' rows differ ({len(a)} vs {len(b)}): not the same computation")
    return a.reset_index(), b[a.columns].reset_index()


def column_groups(table: str, frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Row masks of the budget's columns: the schur.tsv rows of the random control at α > 0 apart (``[random]``),
    convergence.tsv's erank metrics apart from the others (``[erank]``: on the log scale) and its count fractions
    (``COUNT``: the frac_complex and frac_expansive metrics, discrete like schur.tsv's b_frac_*)."""
    every = np.ones(len(frame), dtype=bool)
    if table == "convergence":
        er = frame["metric"].str.contains("erank").to_numpy()
        count = frame["metric"].str.startswith("frac_").to_numpy()
        return {"": ~er & ~count, "[erank]": er, COUNT: count}
    if table != "schur":
        return {"": every}
    rand = ((frame["control"] == "random") & (frame["alpha"] > 0)).to_numpy()
    return {"": ~rand, "[random]": rand}


def deviations(table: str, ref: pd.DataFrame, other: pd.DataFrame) -> dict[str, float]:
    """Per continuous column (and row group), max over rows of |Δ| on the column's scale; nan-equal rows count 0,
    a nan on one side only counts inf."""
    keys = TABLES[table]
    ref, oth = _pair(ref, other, keys)
    out = {}
    for col in ref.columns:
        if col in keys or col in DISCRETE or not pd.api.types.is_numeric_dtype(ref[col]):
            continue
        for tag, mask in column_groups(table, ref).items():
            if tag == COUNT:  # discrete rows: discrete_rows
                continue
            xs = _scale(col + tag, ref[col].to_numpy(float)[mask])
            ys = _scale(col + tag, oth[col].to_numpy(float)[mask])
            same = (xs == ys) | (np.isnan(xs) & np.isnan(ys))  # equal infinities too (cond_full of a singular J̄)
            with np.errstate(invalid="ignore"):
                d = np.where(same, 0.0, np.abs(xs - ys))
            d = np.where(np.isnan(d), np.inf, d)
            if len(d):
                out[f"{col}{tag}"] = float(d.max())
    return out


def scale_of(table: str, ref: pd.DataFrame) -> dict[str, float]:
    """max|ref_c| on the column's scale (the budget's floor is 1e-12 of it)."""
    out = {}
    for col in ref.columns:
        if col in TABLES[table] or col in DISCRETE or not pd.api.types.is_numeric_dtype(ref[col]):
            continue
        for tag, mask in column_groups(table, ref).items():
            if tag == COUNT:
                continue
            v = np.abs(_scale(col + tag, ref[col].to_numpy(float)[mask]))
            v = v[np.isfinite(v)]
            if len(v):
                out[f"{col}{tag}"] = float(v.max())
    return out


def row_interval_excess(table: str, ref: pd.DataFrame, other: pd.DataFrame) -> dict[str, float]:
    """Per column with an interval: max over rows of |Δ| / (half-width/100) (≤ 1 passes)."""
    ref, oth = _pair(ref, other, TABLES[table])
    out = {}
    for col, (lo, hi, scale) in INTERVALS.items():
        if col not in ref or lo not in ref:
            continue
        logs = np.full(len(ref), scale == "log")
        if table == "convergence":  # the erank metrics' intervals are on the log scale, the others' linear
            logs = ref["metric"].str.contains("erank").to_numpy()

        def f(v, logs=logs):
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(logs, np.log(v), v)

        half = (f(ref[hi].to_numpy(float)) - f(ref[lo].to_numpy(float))) / 2
        d = np.abs(f(ref[col].to_numpy(float)) - f(oth[col].to_numpy(float)))
        ok = np.isfinite(half) & (half > 0) & np.isfinite(d)
        if ok.any():
            out[col] = float(np.max(d[ok] / (BUDGET_HALF * half[ok])))
    return out


def discrete_rows(table: str, ref: pd.DataFrame, other: pd.DataFrame, draws: list[pd.DataFrame]) -> dict:
    """Per discrete column: the rows the method changes, those of them no float32 draw changes (``unexplained``:
    over budget), and how many rows a float32 draw changes (``float32_moved``: the margin to the threshold is
    below the float32 shift there). Columns that neither moves are left out."""
    keys = TABLES[table]
    a, b = _pair(ref, other, keys)
    ds = [_pair(ref, d, keys)[1] for d in draws]
    index = a.set_index(keys).index
    count = column_groups(table, a).get(COUNT)
    columns = [(c, "", None) for c in a.columns if c in DISCRETE and c not in keys]
    if count is not None:  # the count-fraction rows of every numeric column (value and its interval)
        columns += [(c, COUNT, count) for c in a.columns if c not in keys and c not in DISCRETE
                    and pd.api.types.is_numeric_dtype(a[c])]  # fmt: skip
    out = {}
    for col, tag, rows in columns:
        x, y = a[col].to_numpy(float), b[col].to_numpy(float)
        diff = ~((x == y) | (np.isnan(x) & np.isnan(y)))
        shifted = np.zeros(len(x), dtype=bool)
        for d in ds:
            z = d[col].to_numpy(float)
            shifted |= ~((x == z) | (np.isnan(x) & np.isnan(z)))
        if rows is not None:
            diff &= rows
            shifted &= rows
        if not (diff.any() or shifted.any()):
            continue
        out[col + tag] = {"changed": [str(i) for i in index[diff]], "float32_moved": int(shifted.sum()),
                          "unexplained": [str(i) for i in index[diff & ~shifted]]}  # fmt: skip
    return out


def budget(ref: dict, method_tables: dict, draws: list[dict]) -> dict:
    """The budget check of one method on one reference set: per table and column, Y (median over the draws), the
    method's deviation, the budget, the row-interval excess, and pass/fail; discrete columns' changed rows."""
    report = {}
    for t in ref:
        y = [deviations(t, ref[t], d[t]) for d in draws]
        m = deviations(t, ref[t], method_tables[t])
        scale = scale_of(t, ref[t])
        rows = row_interval_excess(t, ref[t], method_tables[t])
        cols = {}
        for col, dev in m.items():
            Y = float(np.median([yy.get(col, 0.0) for yy in y]))
            allowed = max(BUDGET_Y * Y, BUDGET_FLOOR * scale.get(col, 0.0))
            base = col.split("[")[0]
            excess = rows.get(base) if not col.endswith("]") else None
            ok = dev <= allowed and (excess is None or excess <= 1.0)
            cols[col] = {"Y": Y, "deviation": dev, "budget": allowed, "row_interval_excess": excess, "ok": bool(ok)}
        report[t] = {"columns": cols, "discrete": discrete_rows(t, ref[t], method_tables[t], [d[t] for d in draws])}
        report[t]["ok"] = all(c["ok"] for c in cols.values()) and not any(
            v["unexplained"] for v in report[t]["discrete"].values()
        )
    return report


def passes(report: dict) -> bool:
    return all(t["ok"] for t in report.values())


# ---- the reference sets ---------------------------------------------------------------------------------------------
def config_spectra(path: Path, model: str) -> tuple[dict, int]:
    config = lgconfig.load(path)
    s = lgconfig.model_section(config, model, "spectra")
    seed = config["seed"] if s["schur_control_seed"] is None else s["schur_control_seed"]
    return s, seed


def run_sets(runs: Path) -> dict:
    """name -> (J̄ folder, boundary names, spectra section, seed) of the reference sets from runs of the configs."""
    sets = {}
    for model, cfg_file, family, layers in (("smollm2-135m", "config.yaml", "llama", 30),
                                            ("gemma3-270m", "gemma3.yaml", "gemma3", 18)):  # fmt: skip
        s, seed = config_spectra(ROOT / "config" / cfg_file, model)
        names = boundaries_for(family, layers)
        for ckpt in ("trained", "init"):
            sets[f"{model.split('-')[0]}-{ckpt}"] = (runs / model / ckpt / "jacobians", names, s, seed)
    return sets


def synthetic_label(d: int, n_layers: int) -> str:
    """The synthetic set's name (and its folder under the work folder): 2 blocks unmarked, as first published."""
    return f"synthetic-d{d}" + (f"-L{n_layers}" if n_layers != 2 else "")


def synthetic_set(work: Path, d: int = 4096, n_layers: int = 2, rank: int = 1024, seed: int = 0):
    """Boundaries shaped like an 8B model's: attention J̄ of rank `rank` (grouped-query: n_kv·d_head) in float32
    with the float32 tail of a real one, MLP J̄ full rank and non-normal (Henrici 0.6–0.9), 16 group means each."""
    folder = work / synthetic_label(d, n_layers) / "jac"
    names = boundaries_for("llama", n_layers)
    if not (folder / ".done").exists():
        folder.mkdir(parents=True, exist_ok=True)
        g = np.random.default_rng(seed)
        G, per = 16, 8000
        counts = np.full(G, per)
        for n in names:
            if n.endswith("attn"):
                A = g.standard_normal((d, rank)) / np.sqrt(d)
                B = g.standard_normal((rank, d)) / np.sqrt(rank)
                groups = np.stack([A @ (B + 0.05 * g.standard_normal((rank, d)) / np.sqrt(rank)) for _ in range(G)])
            else:
                Q = np.linalg.qr(g.standard_normal((d, d)))[0]
                T = np.diag(g.uniform(0.1, 0.6, d)) + np.triu(g.standard_normal((d, d)), 1) * (0.9 / np.sqrt(d))
                M = Q @ T @ Q.T
                groups = np.stack([M + 0.02 * g.standard_normal((d, d)) / np.sqrt(d) for _ in range(G)])
            groups = groups.astype(np.float32)
            mean = np.tensordot(counts / counts.sum(), groups.astype(np.float64), axes=1)
            save_boundary(folder, n, mean, groups, counts, boundary=n)
            del groups
        (folder / ".done").write_text("ok\n")
    s, seed = config_spectra(ROOT / "config" / "papers.yaml", "llama-3.1-8b")
    # the papers' settings, trimmed to what this machine computes five times over in hours: two α, two orders
    s = s | {"alphas": [0, 1], "schur_orders": 2, "schur_boundary_metrics": "none", "convergence_sizes": [8, 16]}
    return folder, names, s, seed


def henrici(J: np.ndarray) -> float:
    lam = np.linalg.eigvals(J)
    fro2 = float(np.sum(J**2))
    return float(np.sqrt(max(0.0, fro2 - float(np.sum(np.abs(lam) ** 2))) / fro2))


def evaluate(name: str, folder: Path, names: list[str], cfg: dict, seed: int, work: Path, methods=("shipped",),
             tables=tuple(TABLES)) -> dict:  # fmt: skip
    """The budget of `methods` on one reference set (tables kept under work/name)."""
    base = work / name
    times = {}

    def tables_by(how: str, jac: Path, into: Path) -> dict:  # the tables computed by a method, timed
        with method(how):
            got = compute_tables(jac, names, cfg, seed, into, tables)
        times[into.name] = seconds_spent(into, tables)  # as computed (a repeated evaluation reads the tables)
        return got

    ref = tables_by("reference", folder, base / "reference")
    draws = []
    for k in range(DRAWS):
        jac = perturbed_folder(folder, names, base / f"float32-{k}" / "jac", k)
        draws.append(tables_by("reference", jac, base / f"float32-{k}"))
    out = {"boundaries": len(names), "d": int(np.load(folder / f"{names[0]}.npy", mmap_mode="r").shape[0]),
           "settings": {k: cfg[k] for k in ("alphas", "schur_orders", "schur_order_alphas", "schur_ci_blocks",
                                             "ci_blocks", "convergence_sizes")}, "methods": {}}  # fmt: skip
    for m in methods:
        out["methods"][m] = budget(ref, tables_by(m, folder, base / m), draws)
    out["seconds"] = times
    return out


# ---- the report --------------------------------------------------------------------------------------------------
def fmt(x) -> str:
    if x is None:
        return "—"
    if not np.isfinite(x):
        return str(x)
    return "0" if x == 0 else f"{x:.1e}"


def render(results: dict) -> str:
    lines = [BEGIN, "", "Generated by `python bench/precision_budget.py render` from `bench/results/precision_budget.json`"
             f" ({results.get('date', '?')}). Per reference set, table and column: Y, the largest deviation float32"
             " storage of J̄ causes (median of the draws); the shipped methods' largest deviation; the budget"
             " max(0.1·Y, 1e-12·max|ref|); the largest deviation of a row in units of 1/100 of its interval's"
             " half-width (≤ 1 passes). Log scale for erank and cond columns. `[random]`: the random control's rows"
             " at α > 0. A discrete column (ranks, mode counts, count fractions; `[count]`: convergence.tsv's"
             " frac_* metrics) lists the rows a float32 draw moves, the rows the shipped methods change, and how"
             " many of those no draw moves (over budget).", ""]  # fmt: skip
    for name, res in results["sets"].items():
        shipped = res["methods"]["shipped"]
        ok = passes(shipped)
        lines += [f"### {name}: d = {res['d']}, {res['boundaries']} boundaries — {'passes' if ok else 'FAILS'}", ""]
        lines += [f"Settings: {json.dumps(res['settings'])}; seconds per method: "
                  + ", ".join(f"{k} {v:.0f}" for k, v in res["seconds"].items()), ""]  # fmt: skip
        lines += ["| table | column | float32 Y | shipped | budget | row / (half-width/100) | |",
                  "|---|---|---:|---:|---:|---:|---|"]  # fmt: skip
        for t, rep in shipped.items():
            for col, c in sorted(rep["columns"].items(), key=lambda kv: -kv[1]["Y"]):
                if c["Y"] == 0 and c["deviation"] == 0:
                    continue
                lines.append(f"| {t} | `{col}` | {fmt(c['Y'])} | {fmt(c['deviation'])} | {fmt(c['budget'])} | "
                             f"{fmt(c['row_interval_excess'])} | {'ok' if c['ok'] else '**over**'} |")  # fmt: skip
            for col, v in rep["discrete"].items():
                moved = v.get("float32_moved")
                lines.append(f"| {t} | `{col}` (discrete) | {'—' if moved is None else f'{moved} rows moved'} | "
                             f"{len(v['changed'])} rows changed | | {len(v['unexplained'])} not moved by float32 | "
                             f"{'ok' if not v['unexplained'] else '**over**'} |")  # fmt: skip
        same = [t for t, rep in shipped.items() if all(c["deviation"] == 0 for c in rep["columns"].values())]
        if same:
            lines += ["", f"Identical to the reference method, bit for bit: {', '.join(same)}."]
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def write_doc(text: str) -> None:
    doc = DOC.read_text()
    if BEGIN in doc:
        doc = doc[: doc.index(BEGIN)] + text + doc[doc.index(END) + len(END) :]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text + "\n"
    write_text(DOC, doc)


def main():
    ap = parser(__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run")
    run.add_argument("--sets", nargs="+", default=["smollm2-trained", "smollm2-init", "gemma3-trained", "gemma3-init",
                                                    "synthetic"])  # fmt: skip
    run.add_argument("--runs", type=Path, default=Path("/work/runs/base/results"),
                     help="results/ of runs of config/config.yaml and config/gemma3.yaml")  # fmt: skip
    run.add_argument("--work", type=Path, default=Path("/work/runs/budget"), help="tables kept here (resumable)")
    run.add_argument("--d", type=int, default=4096, help="width of the synthetic set")
    run.add_argument("--layers", type=int, default=2,
                     help="blocks of the synthetic set (two boundaries each: attention, MLP); its first boundaries "
                          "are the same matrices whatever the count")  # fmt: skip
    run.add_argument("--orders", type=int, default=2,
                     help="spectra.schur_orders of the runs' sets (each random order is one more chain of the same "
                          "kind; the configs' 8 would take four times as long); the synthetic set takes 2")  # fmt: skip
    sub.add_parser("render")
    args = ap.parse_args()
    if args.cmd == "render":
        write_doc(render(json.loads(RESULTS.read_text())))
        return
    sets = run_sets(args.runs)
    args.work.mkdir(parents=True, exist_ok=True)
    for name in args.sets:
        if name == "synthetic":
            folder, names, cfg, seed = synthetic_set(args.work, args.d, args.layers)
            label = synthetic_label(args.d, args.layers)
            hen = {n: henrici(np.load(folder / f"{n}.npy")) for n in names if n.endswith("mlp")}
        else:
            folder, names, cfg, seed = sets[name]
            cfg = cfg | {"schur_orders": args.orders}
            label, hen = name, None
            if not (folder / f"{names[-1]}.npy").exists():
                print(f"{name}: no J̄ in {folder} (run its config first); skipped", flush=True)
                continue
        lock = open(args.work / f"{label}.lock", "w")  # noqa: SIM115 (held until the set is written)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"{label}: computed by another run of this script now (its lock is held); skipped", flush=True)
            continue
        print(f"{label}: start {time.strftime('%H:%M:%S')}", flush=True)
        res = evaluate(label, folder, names, cfg, seed, args.work)
        if hen:
            res["henrici_mlp"] = hen
        # read again just before writing: another run of this script (another set) may have added its own
        results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"sets": {}}
        results["sets"][label] = res
        results["date"] = time.strftime("%Y-%m-%d")
        results["machine"] = machine("cpus", "numpy")
        write_json(RESULTS, results, indent=1, default=float)
        print(f"{label}: {'passes' if passes(res['methods']['shipped']) else 'FAILS'} ({res['seconds']})", flush=True)
        lock.close()
    if RESULTS.exists():
        write_doc(render(json.loads(RESULTS.read_text())))


if __name__ == "__main__":
    main()
