"""layergeom.results.load on result folders written by the library's own writers (io.write_tsv)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from layergeom import results
from layergeom.io import read_tsv, write_tsv
from layergeom.runtime import LayergeomError

# (model, checkpoint) -> the manifest's revision (None: no manifest written)
RUNS = {
    ("tiny-a", "step100"): "step100",
    ("tiny-a", "init"): "seed=0",
    ("hub-b", "main"): "step143000",  # the step comes from the manifest's revision
    ("hub-b", "local"): None,
}


def _table(seed: int) -> pd.DataFrame:
    """A spectra table (every column of results.COLUMNS["spectra"]) with a float, a nan, an inf where allowed, a
    boolean and a string column."""
    rng = np.random.default_rng(seed)
    n = 2 + seed % 3
    df = pd.DataFrame(
        {
            "boundary": [f"L{i}.attn" for i in range(n)],
            "cond": np.r_[rng.random(n - 1) * 10, np.inf],
            "erank": np.r_[np.nan, rng.random(n - 1)],
            "significant": rng.random(n) > 0.5,
        }
    )
    for col in results.COLUMNS["spectra"]:
        if col not in df:
            df[col] = rng.random(n)
    return df


@pytest.fixture
def results_dir(tmp_path):
    root = tmp_path / "results"
    for i, ((model, ck), revision) in enumerate(RUNS.items()):
        write_tsv(_table(i), root / model / ck / "spectra.tsv")
        write_tsv(_table(i + 10), root / model / ck / "tokenwise" / "kl.tsv")
        write_tsv(_table(i + 20), root / model / ck / "tokenwise" / "L0.tsv")
        if revision is not None:
            manifest = {"model": model, "checkpoint": ck, "revision": revision, "boundaries": ["L0.attn"], "seed": i}
            (root / model / ck / "manifest.json").write_text(json.dumps(manifest))
    write_tsv(pd.DataFrame({"checkpoint": ["step100"], "step": [100], "loss": [1.5]}), root / "tiny-a" / "training.tsv")
    (root / "figures").mkdir()
    write_tsv(_table(99), root / "figures" / "coupling_significant_layers.tsv")
    (root / "tiny-a" / "step100" / ".spectra.tsv.abcdefgh").mkdir()  # a temporary: not a result
    write_tsv(_table(98), root / "tiny-a" / "step100" / ".spectra.tsv.abcdefgh" / "spectra.tsv")
    return root


def test_load_is_every_table_with_its_model_and_checkpoint(results_dir):
    df = results.load("spectra", results_dir)
    assert list(df.columns[:3]) == ["model", "checkpoint", "step"]
    assert len(df) == sum(len(_table(i)) for i in range(len(RUNS)))
    for i, (model, ck) in enumerate(RUNS):  # per-run loop: each table back whole, in order, under its keys
        part = df[(df.model == model) & (df.checkpoint == ck)].drop(columns=["model", "checkpoint", "step"])
        pd.testing.assert_frame_equal(part.reset_index(drop=True), _table(i))
        pd.testing.assert_frame_equal(part.reset_index(drop=True), read_tsv(results_dir / model / ck / "spectra.tsv"))


def test_step_from_the_checkpoint_key_else_the_manifest(results_dir):
    df = results.load("spectra.tsv", results_dir).drop_duplicates(["model", "checkpoint"]).set_index("checkpoint")
    assert str(df["step"].dtype) == "Int64"
    assert df.loc["step100", "step"] == 100 and df.loc["main", "step"] == 143000
    assert pd.isna(df.loc["init", "step"]) and pd.isna(df.loc["local", "step"])


def test_subfolder_tables_manifests_and_per_model_tables(results_dir):
    kl = results.load("tokenwise/kl", results_dir)
    assert len(kl) == sum(len(_table(i + 10)) for i in range(len(RUNS)))
    with pytest.raises(
        LayergeomError, match=r"1 checkpoint folder\(s\) under .* have no manifest table yet \(hub-b/local\)"
    ):
        results.load("manifest", results_dir)
    with pytest.warns(UserWarning, match=r"no manifest table yet \(hub-b/local\): their rows are not in the table"):
        m = results.load("manifest", results_dir, missing="skip")
    assert sorted(zip(m.model, m.checkpoint)) == sorted(k for k, v in RUNS.items() if v is not None)
    assert list(m.columns[:3]) == ["model", "checkpoint", "step"] and m.boundaries.iloc[0] == ["L0.attn"]
    assert m.set_index("checkpoint").loc["main", "step"] == 143000
    tr = results.load("training", results_dir)
    assert list(tr.columns[:3]) == ["model", "checkpoint", "step"] and tr.model.tolist() == ["tiny-a"]
    with pytest.raises(LayergeomError, match="no 'coupling_significant_layers' table"):  # figures/ is no model
        results.load("coupling_significant_layers", results_dir)


def test_available_names_the_tables(results_dir):
    names = results.available(results_dir)
    assert {"spectra", "manifest", "tokenwise/kl", "training"} <= set(names)
    assert not any(n.startswith("tokenwise/L") for n in names)


@pytest.mark.parametrize("table", ["nosuch", "../spectra", ""])
def test_a_missing_table_is_one_clear_error(results_dir, table):
    with pytest.raises(LayergeomError, match="table") as err:
        results.load(table, results_dir)
    assert "\n" not in str(err.value)


def test_a_missing_results_folder_is_an_error(tmp_path):
    with pytest.raises(LayergeomError, match="does not exist"):
        results.load("spectra", tmp_path / "nowhere")


def test_read_tsv_exact_gives_back_every_float_written(tmp_path):
    """``io.read_tsv(exact=True)`` returns the very floats ``write_tsv`` wrote (bit for bit), other columns as the
    plain read has them; a test that fails where a parser misses by an ulp."""
    import numpy as np
    import pandas as pd

    from layergeom import io

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-300, 300, 2000), [np.nan, 0.0, -0.0]])
    df = pd.DataFrame({"x": x, "k": np.arange(x.size), "flag": np.arange(x.size) % 2 == 0, "name": "a"})
    io.write_tsv(df, tmp_path / "t.tsv", stage="test")
    back = io.read_tsv(tmp_path / "t.tsv", exact=True)
    assert back["x"].to_numpy().view(np.int64)[:-3].tolist() == x.view(np.int64)[:-3].tolist()
    assert np.isnan(back["x"].iloc[-3])
    assert back["k"].dtype == np.int64 and back["flag"].dtype == bool and (back["name"] == "a").all()


# ---- nothing lost or made up without a word ------------------------------------------------------------------
def test_a_file_with_another_tables_columns_is_refused_by_name(results_dir):
    cumulative = pd.DataFrame({"variant": ["update"], "depth": [1], "boundary": ["L0.attn"], "erank": [2.0],
                               "erank_ci_low": [1.0], "erank_ci_high": [3.0]})  # fmt: skip
    write_tsv(cumulative, results_dir / "hub-b" / "main" / "spectra.tsv")
    with pytest.raises(LayergeomError) as err:
        results.load("spectra", results_dir)
    msg = str(err.value)
    assert "hub-b/main/spectra.tsv is not a spectra table: it lacks layer, kind, n_samples" in msg
    assert "(its columns: variant, depth, boundary, erank" in msg and "\n" not in msg


def test_a_checkpoint_without_the_table_is_named_not_left_out(results_dir):
    (results_dir / "hub-b" / "main" / "spectra.tsv").unlink()
    (results_dir / "tiny-a" / "step200" / "activations").mkdir(parents=True)  # a checkpoint whose jobs run now
    with pytest.raises(LayergeomError) as err:
        results.load("spectra", results_dir)
    msg = str(err.value)
    assert "2 checkpoint folder(s) under" in msg and "(hub-b/main, tiny-a/step200)" in msg and "\n" not in msg
    with pytest.warns(UserWarning, match=r"\(hub-b/main, tiny-a/step200\): their rows are not in the table"):
        df = results.load("spectra", results_dir, missing="skip")
    assert set(zip(df.model, df.checkpoint)) == set(RUNS) - {("hub-b", "main")}
    with pytest.raises(LayergeomError, match="missing='ignore': one of error, skip"):
        results.load("spectra", results_dir, missing="ignore")


@pytest.mark.parametrize(
    "content,expect",
    [
        (b"{", "not a readable manifest (JSONDecodeError"),
        (b'{"revision": "\xff"}', "(UnicodeDecodeError"),
        (b"[1, 2]", "is not a manifest (a JSON list, not an object)"),
    ],  # fmt: skip
    ids=["cut", "not-utf8", "a-list"],
)
def test_a_damaged_manifest_is_one_line_for_the_manifests_and_the_tables_steps(results_dir, content, expect):
    (results_dir / "hub-b" / "main" / "manifest.json").write_bytes(content)  # main: its step is its manifest's
    for table in ("manifest", "spectra"):
        with pytest.raises(LayergeomError) as err, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # hub-b/local has no manifest
            results.load(table, results_dir, missing="skip")
        assert "hub-b/main/manifest.json" in str(err.value) and expect in str(err.value)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "content,expect",
    [
        (b"boundary\tcond\nL0.attn\t\xff\n", "(UnicodeDecodeError"),
        (b"", "(EmptyDataError"),
        (b"boundary\tcond\nL0.attn\t1\nL1.attn\t1\t2\t3\n", "(ParserError"),
    ],  # fmt: skip
    ids=["not-utf8", "empty", "ragged"],
)
def test_a_table_that_is_not_utf8_tsv_is_one_line(results_dir, content, expect):
    (results_dir / "tiny-a" / "init" / "spectra.tsv").write_bytes(content)
    with pytest.raises(LayergeomError) as err:
        results.load("spectra", results_dir)
    msg = str(err.value)
    assert "tiny-a/init/spectra.tsv is not a readable table" in msg and expect in msg and "\n" not in msg


def test_the_columns_load_checks_are_those_docs_outputs_names():
    """results.COLUMNS is docs/outputs.md's "columns" cell of each per-checkpoint table (the names, not the values
    in parentheses), so a column the docs drop or add shows up here."""
    import re

    from conftest import ROOT

    text = (ROOT / "docs" / "outputs.md").read_text()
    section = text.split("## Per model and checkpoint", 1)[1].split("\n## ", 1)[0]
    documented = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0].endswith(".tsv`"):
            cell = cells[2]
            while re.search(r"\([^()]*\)", cell):
                cell = re.sub(r"\([^()]*\)", "", cell)
            documented[cells[0].strip("`").removesuffix(".tsv")] = tuple(re.findall(r"`([a-z_]+)`", cell))
    assert documented == results.COLUMNS
