"""layergeom.results.load on result folders written by the library's own writers (io.write_tsv)."""

from __future__ import annotations

import json

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
    """A spectra-like table with a float, a nan, an inf where allowed, a boolean and a string column."""
    rng = np.random.default_rng(seed)
    n = 2 + seed % 3
    return pd.DataFrame(
        {
            "boundary": [f"L{i}.attn" for i in range(n)],
            "cond": np.r_[rng.random(n - 1) * 10, np.inf],
            "erank": np.r_[np.nan, rng.random(n - 1)],
            "significant": rng.random(n) > 0.5,
        }
    )


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
    m = results.load("manifest", results_dir)
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
