"""``python -m layergeom.claims RESULTS_DIR [--model M ...] [--out DIR]``: the claims tables of a finished run.

The workflow's `claims` rule writes ``results/{model}/claims.tsv``; this reads a results folder as it is — a run
made before the rule existed, a copy — and writes the same table for each model to ``{out}/{model}/claims.tsv``
(default: into the results folder), with the schema's default thresholds. A model's checkpoints are those of its
``checkpoints.tsv`` (else every folder with a ``spectra.tsv``), its null models those whose ``manifest.json``
says ``source: init`` (or a step 0).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import schema_defaults
from ..io import read_tsv_if_exists, write_tsv
from ..runtime import LayergeomError
from .table import Settings, model_claims


def run_checkpoints(model_dir: Path) -> tuple[list[str], list[str]]:
    """(checkpoints in config order, the random-init ones) of a model's results folder."""
    have = sorted(p.parent.name for p in model_dir.glob("*/spectra.tsv"))
    listed = read_tsv_if_exists(model_dir / "checkpoints.tsv")
    names = [c for c in listed["checkpoint"] if c in have] if listed is not None else have
    nulls = []
    for c in names:
        manifest = model_dir / c / "manifest.json"
        if manifest.exists() and json.loads(manifest.read_text()).get("source") == "init":
            nulls.append(c)
    return names, nulls


def default_settings(seed: int) -> Settings:
    s = {"seed": seed, "claims": schema_defaults("claims"), "tokenwise": schema_defaults("tokenwise"),
         "spectra": schema_defaults("spectra")}  # fmt: skip
    return Settings.from_job(s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m layergeom.claims", description=__doc__.split("\n")[0])
    ap.add_argument("results", type=Path, help="a run's results/ folder")
    ap.add_argument("--model", action="append", default=None, help="a model (repeatable; default: every model)")
    ap.add_argument("--out", type=Path, default=None, help="where {model}/claims.tsv go (default: the results folder)")
    ap.add_argument("--seed", type=int, default=0, help="the run's seed (the bootstraps' streams)")
    args = ap.parse_args(argv)
    try:
        models = args.model or sorted({p.parent.parent.name for p in args.results.glob("*/*/spectra.tsv")})
        if not models:
            raise LayergeomError(f"no results/{{model}}/{{checkpoint}}/spectra.tsv under {args.results}")
        for model in models:
            names, nulls = run_checkpoints(args.results / model)
            table = model_claims(args.results / model, names, nulls, default_settings(args.seed), model=model)
            out = (args.out or args.results) / model / "claims.tsv"
            write_tsv(table, out)
            counts = table["verdict"].value_counts().to_dict()
            print(f"{out}: {len(table)} claims ({', '.join(f'{n} {v}' for v, n in counts.items())})")
    except LayergeomError as err:
        print(f"claims: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
