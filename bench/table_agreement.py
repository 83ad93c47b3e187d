"""Recompute spectra.tsv and eigenvalues.tsv of a finished run with this checkout's ``write_spectra`` and compare
them numerically.

For every results/<model>/<checkpoint>/spectra.tsv under RUN (a finished run of the workflow), rebuilds the
table (and eigenvalues.tsv, when the run has it) from that checkpoint's jacobians/ inputs with the settings of CONFIG (validated, the model's overrides
merged, as the spectra_table rule passes them) into a temporary directory, and compares every numeric cell:
relative difference |new − old| / max(|old|, tiny), nan where nan, inf where inf. Exits 1 when any cell differs
by more than --rtol (default 1e-9) or a column or row differs; --columns prints the largest difference of every
column over all tables; --device computes on that torch device.

    PYTHONPATH=src python bench/table_agreement.py RUN [--config config/test.yaml] [--rtol 1e-9] [--columns]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from harness import ROOT, parser

from layergeom import config as lgconfig
from layergeom.spectral.jobs.common import BoundaryFiles
from layergeom.spectral.jobs.table import write_spectra


def recompute(folder: Path, spectra: dict, out: Path, device: str = "cpu") -> pd.DataFrame:
    """spectra.tsv of one checkpoint folder (its jacobians/ and the old table's boundary order)."""
    names = pd.read_csv(folder / "spectra.tsv", sep="\t")["boundary"].tolist()
    jac = folder / "jacobians"
    files = BoundaryFiles(
        names,
        [jac / f"{n}.npy" for n in names],
        [jac / f"{n}.groups.npy" for n in names],
        [jac / f"{n}.json" for n in names],
    )
    kw = {k: spectra[k] for k in ("sr_k", "dtype", "rank_tol", "ci_level", "ci_method", "ci_blocks")}
    return write_spectra(files, out / "spectra.tsv", out / "eigenvalues.tsv", **kw, device=device)


def compare(old: pd.DataFrame, new: pd.DataFrame, per_column: dict | None = None) -> tuple[float, str, list[str]]:
    """(max relative difference over the numeric cells, where, problems: column/row/nan/inf mismatches); each
    column's largest difference goes into `per_column` (when given)."""
    problems = []
    if list(old.columns) != list(new.columns):
        problems.append(f"columns differ: {sorted(set(old.columns) ^ set(new.columns))}")
    if len(old) != len(new) or not (old["boundary"].values == new["boundary"].values).all():
        problems.append("rows differ")
        return np.nan, "", problems
    worst, where = 0.0, ""
    for col in old.columns:
        if not pd.api.types.is_numeric_dtype(old[col]):
            if not (old[col].astype(str).values == new[col].astype(str).values).all():
                problems.append(f"{col}: text differs")
            continue
        a, b = old[col].to_numpy(np.float64), new[col].to_numpy(np.float64)
        same_special = (np.isnan(a) == np.isnan(b)) & (np.isinf(a) == np.isinf(b))
        if not same_special.all():
            problems.append(f"{col}: nan/inf at different rows {np.flatnonzero(~same_special).tolist()}")
        fin = np.isfinite(a) & np.isfinite(b)
        if np.any(np.isinf(a) & (a != b)):
            problems.append(f"{col}: inf of another sign")
        if fin.any():
            rel = np.abs(a[fin] - b[fin]) / np.maximum(np.abs(a[fin]), np.finfo(np.float64).tiny)
            rel = np.where(a[fin] == b[fin], 0.0, rel)
            i = int(np.argmax(rel))
            if per_column is not None:
                per_column[col] = max(per_column.get(col, 0.0), float(rel[i]))
            if rel[i] > worst:
                worst, where = float(rel[i]), f"{col} @ {old['boundary'].to_numpy()[fin][i]}"
    return worst, where, problems


def main():
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a finished run's directory (holding results/)")
    ap.add_argument("--config", type=Path, default=ROOT / "config" / "test.yaml")
    ap.add_argument("--rtol", type=float, default=1e-9)
    ap.add_argument("--device", default="cpu", help="torch device of the recomputation (default cpu)")
    ap.add_argument("--columns", action="store_true", help="print every column's largest difference")
    args = ap.parse_args()
    columns = {"spectra.tsv": {}, "eigenvalues.tsv": {}}
    cfg = lgconfig.load(args.config)
    tables = sorted((args.run / "results").glob("*/*/spectra.tsv"))
    if not tables:
        sys.exit(f"no results/<model>/<checkpoint>/spectra.tsv under {args.run}")
    overall, failed = 0.0, False
    with tempfile.TemporaryDirectory() as tmp:
        for path in tables:
            folder = path.parent
            model = folder.parent.name
            out = Path(tmp) / model / folder.name
            out.mkdir(parents=True)
            recompute(folder, lgconfig.model_section(cfg, model, "spectra"), out, args.device)
            old = pd.read_csv(path, sep="\t")
            new = pd.read_csv(out / "spectra.tsv", sep="\t")
            worst, where, problems = compare(old, new, columns["spectra.tsv"])
            if (folder / "eigenvalues.tsv").is_file():
                old_e = pd.read_csv(folder / "eigenvalues.tsv", sep="\t")
                new_e = pd.read_csv(out / "eigenvalues.tsv", sep="\t")
                worst_e, where_e, problems_e = compare(old_e, new_e, columns["eigenvalues.tsv"])
                problems += [f"eigenvalues.tsv {p}" for p in problems_e]
                if worst_e > worst:
                    worst, where = worst_e, f"eigenvalues.tsv {where_e}"
            overall = max(overall, worst)
            bad = problems or not worst <= args.rtol
            failed |= bool(bad)
            print(f"{model}/{folder.name}: {len(old)} rows, max rel diff {worst:.3g} ({where})"
                  + (f"  PROBLEMS: {problems}" if problems else ""))  # fmt: skip
    if args.columns:
        for table, cols in columns.items():
            for col, worst in cols.items():
                print(f"  {table} {col}: {worst:.3g}")
    print(f"max relative difference over {len(tables)} tables: {overall:.3g} (tolerance {args.rtol:g})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
