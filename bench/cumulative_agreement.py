"""Recompute cumulative.tsv (and convergence.tsv) of a finished run with this checkout and compare numerically.

The sibling of ``table_agreement.py`` for the product chains (``cumulative.ProductChain``): for every
results/<model>/<checkpoint>/cumulative.tsv under RUN, rebuilds the table from that checkpoint's jacobians/
with the settings of CONFIG (the model's overrides merged, as the spectra_cumulative rule passes them) on
--device, and compares every numeric cell (``table_agreement.compare``). ``--stage convergence`` does the same
for convergence.tsv, ``--stage schur`` for schur.tsv (one job, ``write_schur``). Exits 1 when a cell differs by more than --rtol or a column or row differs.

    PYTHONPATH=src python bench/cumulative_agreement.py RUN [--config config/test.yaml] [--stage cumulative]
        [--device cpu] [--rtol 1e-10]
    (--stage cumulative | convergence | schur)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pandas as pd
from harness import ROOT, parser
from table_agreement import compare

from layergeom import config as lgconfig
from layergeom.spectral.jobs.common import BoundaryFiles
from layergeom.spectral.jobs.convergence import write_convergence
from layergeom.spectral.jobs.cumulative import write_cumulative
from layergeom.spectral.jobs.schur import write_schur


def files_of(folder: Path) -> BoundaryFiles:
    """The checkpoint's Jacobian files, in spectra.tsv's boundary order (depth order)."""
    names = pd.read_csv(folder / "spectra.tsv", sep="\t")["boundary"].tolist()
    jac = folder / "jacobians"
    return BoundaryFiles(names, *([jac / f"{n}{ext}" for n in names] for ext in (".npy", ".groups.npy", ".json")))


def recompute(stage: str, folder: Path, cfg: dict, out: Path, device: str, seed: int) -> None:
    files = files_of(folder)
    if stage == "schur":  # as scripts/spectra_schur.py
        seed = seed if cfg["schur_control_seed"] is None else cfg["schur_control_seed"]
        write_schur(files, out, folder / "cumulative.tsv", alphas=cfg["alphas"], seed=seed, sr_k=cfg["sr_k"],
                    dtype=cfg["dtype"], rank_tol=cfg["rank_tol"], boundary_metrics=cfg["schur_boundary_metrics"],
                    orders=cfg["schur_orders"], order_alphas=cfg["schur_order_alphas"], ci_level=cfg["ci_level"], ci_blocks=cfg["schur_ci_blocks"],
                    ci_controls=cfg["schur_ci_controls"], device=device)  # fmt: skip
    elif stage == "cumulative":
        write_cumulative(files, out, ci_level=cfg["ci_level"], ci_blocks=cfg["ci_blocks"], device=device)
    else:
        write_convergence(files, out, sizes=cfg["convergence_sizes"], n_edge=cfg["convergence_boundaries"],
                          sr_k=cfg["sr_k"], dtype=cfg["dtype"], rank_tol=cfg["rank_tol"], ci_level=cfg["ci_level"],
                          device=device)  # fmt: skip


def main():
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a finished run's directory (holding results/)")
    ap.add_argument("--config", type=Path, default=ROOT / "config" / "test.yaml")
    ap.add_argument("--stage", choices=("cumulative", "convergence", "schur"), default="cumulative")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rtol", type=float, default=1e-10)
    args = ap.parse_args()
    cfg = lgconfig.load(args.config)
    tables = sorted((args.run / "results").glob(f"*/*/{args.stage}.tsv"))
    if not tables:
        sys.exit(f"no results/<model>/<checkpoint>/{args.stage}.tsv under {args.run}")
    overall, failed, cols = 0.0, False, {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in tables:
            folder = path.parent
            model = folder.parent.name
            out = Path(tmp) / model / folder.name / path.name
            out.parent.mkdir(parents=True)
            recompute(args.stage, folder, lgconfig.model_section(cfg, model, "spectra"), out, args.device, cfg["seed"])
            old, new = pd.read_csv(path, sep="\t"), pd.read_csv(out, sep="\t")
            key = "boundary" if "boundary" in old else "metric"
            old, new = old.rename(columns={key: "boundary"}), new.rename(columns={key: "boundary"})
            worst, where, problems = compare(old, new)
            for col in old.columns:  # the worst per column, for the report
                if col in new and pd.api.types.is_numeric_dtype(old[col]):
                    w, _, _ = compare(old[["boundary", col]], new[["boundary", col]])
                    cols[col] = max(cols.get(col, 0.0), w)
            overall = max(overall, worst)
            bad = problems or not worst <= args.rtol
            failed |= bool(bad)
            same = path.read_bytes() == out.read_bytes()
            print(f"{model}/{folder.name}: {len(old)} rows, max rel diff {worst:.3g} ({where}), bytes "
                  f"{'identical' if same else 'differ'}" + (f"  PROBLEMS: {problems}" if problems else ""))  # fmt: skip
    print("per column:", ", ".join(f"{c} {w:.3g}" for c, w in cols.items()))
    print(f"max relative difference over {len(tables)} tables: {overall:.3g} (tolerance {args.rtol:g})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
