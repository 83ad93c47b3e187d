"""layergeom.results.load on the shared test run (tests/lg_runs.py): every row of every checkpoint's table,
under its model and checkpoint, and one manifest per checkpoint."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import TEST_CONFIG

from layergeom import results
from layergeom.io import read_tsv

pytest_plugins = ["lg_runs"]

TABLES = ("spectra", "cumulative", "schur", "tokenwise", "coupling", "convergence", "tokenwise_convergence")


@pytest.mark.parametrize("table", TABLES)
def test_load_returns_every_row_of_every_checkpoint(reference_run, table):
    df = results.load(table, reference_run / "results")
    files = sorted((reference_run / "results").glob(f"*/*/{table}.tsv"))
    assert files and len(df) == sum(len(read_tsv(f)) for f in files)
    for f in files:  # each file back whole under its model and checkpoint
        model, ck = f.parent.parent.name, f.parent.name
        want = read_tsv(f)
        part = df[(df.model == model) & (df.checkpoint == ck)].reset_index(drop=True)
        others = part.drop(columns=[*want.columns, "model", "checkpoint", "step"])
        assert others.isna().all().all(), f"{f}: columns of other checkpoints filled in"
        # concatenation widens dtypes where another checkpoint lacks a column (int -> float): values compared
        pd.testing.assert_frame_equal(part[list(want.columns)], want, check_dtype=False)


def test_load_manifest_has_one_row_per_configured_checkpoint(reference_run):
    m = results.load("manifest", reference_run / "results")
    expected = {(name, ck) for name, mc in TEST_CONFIG["models"].items() for ck in (mc.get("checkpoints") or {})}
    got = set(zip(m.model, m.checkpoint))
    assert expected <= got, f"manifests missing: {sorted(expected - got)}"
    trained = m[m.checkpoint.str.startswith("step")]
    assert (trained.step == trained.checkpoint.str.removeprefix("step").astype(int)).all()
