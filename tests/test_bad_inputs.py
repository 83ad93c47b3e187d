"""Bad inputs stop the run with one clear line (the file or key named, what to do) and leave nothing half-written.

One test per case: wrong weights, stale inputs, `path:` on every source, overflowing tables, capped settings,
a full disk, killed jobs' temporaries, unreadable corpus and weight files, remote code, GGUF files, colliding
model names, typos in hf_config and an offline hub.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import ROOT, TINY, tiny_model
from safetensors.torch import load_file, save_file

from layergeom import config as lgconfig
from layergeom import corpus, fetch, io, materialize, models, network, runtime, store
from layergeom.adapters import adapter_class, get_adapter
from layergeom.runtime import LayergeomError


def _leftovers(folder: Path) -> list[str]:
    """Everything under `folder` (hidden temporaries included)."""
    return sorted(p.name for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    corpus.train_bpe(corpus.load_documents({"source": "python-docs"})[:20], 512, d)
    return d


def _local_dir(path: Path, tokenizer_dir: Path, family: str = "llama", seed: int = 11) -> Path:
    """A Hugging Face model directory: a tiny random model's safetensors, config and a BPE tokenizer."""
    model = tiny_model(family, seed=seed)
    model.save_pretrained(path)
    models.load_tokenizer(tokenizer_dir).save_pretrained(path)
    return path


def _local_cfg(path: Path, family: str = "llama", **over) -> dict:
    return {"source": "local", "family": family, "path": str(path), "n_layers": 2, "trust_remote_code": False,
            "checkpoints": {"trained": {}}, **over}  # fmt: skip


def _edit_weights(path: Path, fn) -> None:
    sd = load_file(path / models.WEIGHTS)
    fn(sd)
    save_file(sd, path / models.WEIGHTS, metadata={"format": "pt"})


# ---- weights that do not fill the architecture --------------------------------------------------------
@pytest.mark.parametrize(
    "edit, named",
    [
        (lambda sd: sd.pop("model.layers.1.mlp.up_proj.weight"), ["missing", "model.layers.1.mlp.up_proj.weight"]),
        (
            lambda sd: sd.update({"model.layers.0.mlp.up_prj.weight": sd.pop("model.layers.0.mlp.up_proj.weight")}),
            ["missing", "model.layers.0.mlp.up_proj.weight", "not in the architecture", "up_prj"],
        ),
        (
            lambda sd: sd.update({"model.norm.weight": torch.ones(7)}),
            ["wrong shape", "model.norm.weight"],
        ),
    ],
    ids=["missing", "garbled-name", "wrong-shape"],
)
def test_weights_that_do_not_match_the_architecture_are_refused(tmp_path, tokenizer_dir, edit, named):
    src = _local_dir(tmp_path / "hf", tokenizer_dir)
    _edit_weights(src, edit)
    with pytest.raises(LayergeomError) as err:
        materialize.materialize("loc", "trained", _local_cfg(src), tmp_path / "out" / "trained")
    for word in named:
        assert word in str(err.value)
    assert not (tmp_path / "out").exists() or _leftovers(tmp_path / "out") == []


def test_declared_tied_weights_may_be_absent(tmp_path, tokenizer_dir):
    """GPT-2 ties lm_head to the token embedding: its checkpoint has no lm_head tensor, and that is fine."""
    src = _local_dir(tmp_path / "hf", tokenizer_dir, family="gpt2")
    assert "lm_head.weight" not in load_file(src / models.WEIGHTS)
    info = materialize.materialize("g", "trained", _local_cfg(src, family="gpt2"), tmp_path / "out")
    assert info["weights_sha256"] == models.weights_sha256(tiny_model("gpt2", seed=11).state_dict())


def test_a_materialised_checkpoint_missing_a_tensor_is_refused_on_load(tmp_path):
    tiny_model("llama").save_pretrained(tmp_path / "ck")
    _edit_weights(tmp_path / "ck", lambda sd: sd.pop("model.layers.0.self_attn.q_proj.weight"))
    with pytest.raises(LayergeomError, match=r"missing from the checkpoint: model\.layers\.0\.self_attn\.q_proj"):
        models.load_model(tmp_path / "ck")


# ---- every file a result depends on is an input -------------------------------------------------------
def _job_counts(output: str) -> dict[str, int]:
    """The `Job stats` table of a snakemake run or dry run ({} when there is nothing to do)."""
    if "Job stats:" not in output:
        return {}
    rows = output.split("Job stats:")[1].strip().splitlines()[2:]
    counts = {}
    for row in rows:
        parts = row.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    counts.pop("total", None)
    return counts


@pytest.mark.dag
def test_editing_a_corpus_file_or_local_weights_reruns_what_reads_them_and_only_that(tmp_path, tokenizer_dir):
    """Snakemake wiring: a `files` corpus and a `local` model directory are inputs; new weights there rerun that
    checkpoint only (the windows and the `init` sibling read the directory's config and tokenizer, not its
    weights)."""
    from lg_runs import snakemake

    text = tmp_path / "corpus.txt"
    text.write_text("\n\n".join(corpus.load_documents({"source": "python-docs"})[:30]))
    src = _local_dir(tmp_path / "hf", tokenizer_dir)
    cfg = {
        "device": "cpu",
        "threads": 1,
        "corpus": {"source": "files", "paths": [str(text)], "window_tokens": 16, "n_windows": 4},
        "models": {"loc": _local_cfg(src, checkpoints={"trained": {}, "init": {"init": True, "seed": 1}})},
    }
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg))
    wd = tmp_path / "wd"
    targets = ["results/loc/windows.npz", "resources/models/loc/trained/source.json",
               "resources/models/loc/init/source.json"]  # fmt: skip

    def jobs(*args):
        res = snakemake(wd, *args, *targets, config=cfg_file)
        return _job_counts(res.stdout + res.stderr)

    assert jobs() == {"corpus": 1, "materialize": 2, "windows": 1}
    _edit_weights(src, lambda sd: sd["model.norm.weight"].mul_(2))
    assert jobs("-n") == {"materialize": 1}
    before = (wd / "resources/models/loc/init/source.json").read_text()
    assert jobs() == {"materialize": 1}
    assert (wd / "resources/models/loc/init/source.json").read_text() == before
    with open(text, "a") as f:
        f.write("\n\nOne more paragraph of the corpus.")
    assert jobs("-n") == {"corpus": 1, "windows": 1}


# ---- `path:` means one thing ------------------------------------------------------------------------------
def _test_config():
    return yaml.safe_load((ROOT / "config" / "test.yaml").read_text())


@pytest.mark.parametrize(
    "model, key",
    [
        ({"source": "hub", "id": "x/y", "n_layers": 2, "path": "/m", "checkpoints": {"main": {}}}, "models.m.path"),
        ({"source": "config", "hf_config": {}, "checkpoints": {"c": {"path": "/m"}}}, "models.m.checkpoints.c.path"),
        ({"source": "local", "n_layers": 2, "path": "/m", "checkpoints": {"c": {"revision": "v1"}}}, "c.revision"),
        ({"source": "local", "n_layers": 2, "checkpoints": {"c": {}}}, "models.m.checkpoints.c: source 'local'"),
    ],
)
def test_path_and_revision_are_refused_where_they_mean_nothing(model, key):
    cfg = _test_config()
    cfg["models"] = {"m": {"family": "llama", **model}}
    with pytest.raises(LayergeomError) as err:
        lgconfig.validate(cfg)
    assert key in str(err.value)


def test_gguf_source_reads_its_path(tmp_path):
    """`source: gguf` with a path reads that file (here: not a GGUF one, so it says so) instead of the default."""
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 a zip, not a model")
    mcfg = {"source": "gguf", "family": "llama", "path": str(bad), "n_layers": 2, "checkpoints": {"trained": {}}}
    lgconfig.validate({"models": {"g": mcfg}})
    with pytest.raises(LayergeomError, match=r"models\.g\.path: '.*model\.gguf' is not a GGUF file.*source: local"):
        materialize.materialize("g", "trained", mcfg, tmp_path / "out", download_dir=tmp_path / "never")
    assert not (tmp_path / "never").exists() and not (tmp_path / "out").exists()


def test_gguf_of_an_unsupported_architecture_is_named(tmp_path):
    from gguf import GGUFWriter

    path = tmp_path / "rwkv.gguf"
    w = GGUFWriter(str(path), "rwkv6")
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert materialize.gguf_architecture(path) == "rwkv6"
    with pytest.raises(LayergeomError, match=r"x\.path: .*architecture 'rwkv6', which transformers cannot load"):
        materialize.check_gguf_file(path, "x.path")
    path.write_bytes(path.read_bytes()[:20])  # truncated inside the header
    with pytest.raises(LayergeomError, match="not a readable GGUF file"):
        materialize.check_gguf_file(path, "x.path")


# ---- tables: overflow stops the job; capped settings are recorded --------------------------------------
def _table(**cols):
    return pd.DataFrame({"boundary": ["L0.attn", "L0.mlp", "L1.attn"], "layer": [0, 0, 1], **cols})


@pytest.mark.parametrize(
    "col, values, bad",
    [
        ("relerr", [0.1, np.inf, 0.2], "inf in column 'relerr'"),
        ("trace", [1.0, 2.0, -np.inf], "-inf in column 'trace'"),
        ("kl", [0.1, np.nan, 0.2], "nan in column 'kl'"),
        ("cond", [1.0, -np.inf, 2.0], "-inf in column 'cond'"),
        ("log_norm", [0.0, np.inf, 1.0], "inf in column 'log_norm'"),
    ],
)
def test_overflowing_values_stop_the_table_with_stage_boundary_and_value(tmp_path, col, values, bad):
    path = tmp_path / "results" / "m" / "c" / "spectra.tsv"
    with pytest.raises(LayergeomError) as err:
        io.write_tsv(_table(**{col: values}), path)
    msg = str(err.value)
    i = int(np.flatnonzero(~np.isfinite(values))[0])
    assert bad in msg and "stage spectra" in msg and f"boundary={['L0.attn', 'L0.mlp', 'L1.attn'][i]}" in msg
    assert not path.parent.exists() or _leftovers(path.parent) == []


def test_undefined_values_and_infinite_definitions_are_written(tmp_path):
    """nan where a quantity is undefined; +inf condition numbers and -inf log norms are what they mean."""
    df = _table(spearman_rho=[np.nan, 0.5, 0.1], cond=[np.inf, 3.0, 1.0], log_norm=[0.0, -np.inf, np.nan])
    io.write_tsv(df, tmp_path / "t.tsv")
    back = io.read_tsv(tmp_path / "t.tsv")
    pd.testing.assert_frame_equal(back, df)


def test_overflowing_activations_stop_the_dump(tmp_path):
    """Finite activations whose squared norm exceeds float32's range would make every float32 norm inf."""
    model = tiny_model("llama")
    with torch.no_grad():
        model.model.embed_tokens.weight[3].fill_(1e19)  # |h|^2 = 32 * 1e38 > float32 max, h itself finite
    windows = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    with pytest.raises(LayergeomError, match=r"activations overflow float32 at boundary L0\.attn, window 0"):
        store.dump_activations(get_adapter(model), windows, tmp_path / "acts")
    assert _leftovers(tmp_path) == []


def test_capped_lowrank_rank_is_logged_and_recorded(tmp_path, caplog):
    """tokenwise.rank > d: the fit uses min(rank, k, d), says so, and the tables carry rank_used."""
    from test_tokenwise_kl import tokenwise_cfg

    from layergeom.tokenwise.pipeline import fit_layer

    windows = np.random.default_rng(0).integers(0, 512, (8, 12))
    store.dump_activations(get_adapter(tiny_model("llama", seed=2)), windows, tmp_path / "acts")
    d = 32
    small = dict(classes=["lowrank", "identity"], k=40, n_anchors=12)
    with caplog.at_level(logging.WARNING, logger="layergeom"):
        big, _ = fit_layer(tmp_path / "acts", 1, tokenwise_cfg(rank=5 * d, **small), seed=0)
    assert (big["rank_used"] == d).all()
    assert f"tokenwise.rank={5 * d} is capped at {d}" in caplog.text
    at_d, _ = fit_layer(tmp_path / "acts", 1, tokenwise_cfg(rank=d, **small), seed=0)
    pd.testing.assert_frame_equal(big, at_d)  # the cap is the rank actually fitted
    lower, _ = fit_layer(tmp_path / "acts", 1, tokenwise_cfg(rank=4, **small), seed=0)
    assert (lower["rank_used"] == 4).all()
    lr = lower["class"] == "lowrank"
    assert not np.allclose(lower.loc[lr, "relerr"], big.loc[lr, "relerr"])


# ---- temporaries: a full disk, a killed job ------------------------------------------------------------
def test_full_disk_is_found_before_the_dump(tmp_path, monkeypatch):
    import shutil

    real = shutil.disk_usage
    monkeypatch.setattr(
        store.shutil, "disk_usage", lambda p: real(p)._replace(free=1000)
    )  # 1 kB free: the store needs 5 windows x 12 tokens x 32 x 4 bytes x 5 files
    windows = np.zeros((5, 12), dtype=np.int64)
    with pytest.raises(LayergeomError, match=r"disk full at .*acts: the activation store needs ~[0-9.e-]+ GB"):
        store.dump_activations(get_adapter(tiny_model("llama")), windows, tmp_path / "acts")
    assert _leftovers(tmp_path) == []


def test_disk_full_while_dumping_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """Space that runs out after the check (another job) raises ENOSPC when the blocks are reserved."""
    if not hasattr(os, "posix_fallocate"):
        pytest.skip("no posix_fallocate here")
    calls = []

    def fallocate(fd, offset, length):
        calls.append(length)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.os, "posix_fallocate", fallocate)
    windows = np.zeros((3, 8), dtype=np.int64)
    with pytest.raises(LayergeomError, match=r"disk full at .*acts: the activation store needs ~"):
        store.dump_activations(get_adapter(tiny_model("gpt2")), windows, tmp_path / "acts")
    assert _leftovers(tmp_path) == []


def test_stale_temporaries_of_a_killed_job_are_removed_on_rerun(tmp_path):
    """A SIGKILL (or SIGBUS) skips every `finally`: the next write of the same output removes what it left."""
    stale = tmp_path / ".acts.k1ll3d_x"
    (stale / "acts").mkdir(parents=True)
    (stale / "acts" / "L0.attn.npy").write_bytes(b"\0" * 1000)
    other = tmp_path / ".acts.tsv.abcdefgh"  # another output's temporary, perhaps being written now
    other.mkdir()
    windows = np.zeros((2, 6), dtype=np.int64)
    store.dump_activations(get_adapter(tiny_model("llama")), windows, tmp_path / "acts")
    assert not stale.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".acts.tsv.abcdefgh", "acts"]
    assert runtime.remove_stale_temporaries(tmp_path / "acts") == []


# ---- unreadable inputs: one line each -----------------------------------------------------------------
def test_non_utf8_corpus_file_is_named(tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes("Caf\u00e9 cr\u00e8me.\n\nSecond paragraph.".encode("latin-1"))
    with pytest.raises(LayergeomError, match=r"corpus file '.*latin1\.txt' is not UTF-8 text .*offset 3.*iconv"):
        corpus.load_documents({"source": "files", "paths": [str(f)]})


def test_parquet_text_column_of_integers_is_named(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [1, 2, 3]}), tmp_path / "ints.parquet")
    with pytest.raises(LayergeomError, match=r"ints\.parquet': column 'text' holds int64, not strings"):
        corpus.load_documents({"source": "files", "paths": [str(tmp_path / "ints.parquet")]})
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(LayergeomError, match=r"junk\.parquet' is not a readable parquet file"):
        corpus.load_documents({"source": "files", "paths": [str(tmp_path / "junk.parquet")]})


@pytest.mark.parametrize("keep", [0, 60, 0.5], ids=["empty", "header-cut", "half"])
def test_truncated_safetensors_is_named(tmp_path, tokenizer_dir, keep):
    src = _local_dir(tmp_path / "hf", tokenizer_dir)
    data = (src / models.WEIGHTS).read_bytes()
    (src / models.WEIGHTS).write_bytes(data[: int(keep * len(data)) if isinstance(keep, float) else keep])
    with pytest.raises(LayergeomError, match=r"hf/model\.safetensors is not a readable safetensors file .*truncated"):
        materialize.materialize("loc", "trained", _local_cfg(src), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_pickle_weights_are_refused_unread(tmp_path, tokenizer_dir):
    """A `.bin` is never unpickled (it could run code): the file is named with the way to convert it."""
    src = _local_dir(tmp_path / "hf", tokenizer_dir)
    (src / models.WEIGHTS).unlink()
    torch.save(tiny_model("llama", seed=11).state_dict(), src / "pytorch_model.bin")
    with pytest.raises(
        LayergeomError, match=r"hf/pytorch_model\.bin is a pickle checkpoint.*convert it to safetensors"
    ):
        materialize.materialize("loc", "trained", _local_cfg(src), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_remote_code_names_the_config_key(tmp_path, tokenizer_dir):
    import json

    src = _local_dir(tmp_path / "hf", tokenizer_dir)
    c = json.loads((src / "config.json").read_text())
    c["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomModel"}
    (src / "config.json").write_text(json.dumps(c))
    t0 = time.perf_counter()
    with pytest.raises(LayergeomError, match=r"custom Python code.*models\.loc\.trust_remote_code: true"):
        materialize.materialize("loc", "trained", _local_cfg(src), tmp_path / "out")
    assert time.perf_counter() - t0 < 5  # refused before transformers could ask on a terminal
    assert not (tmp_path / "out").exists()


def test_colliding_rule_names_are_refused_at_validation():
    cfg = _test_config()
    cfg["models"]["tiny.gpt2"] = cfg["models"]["tiny-gpt2"]
    with pytest.raises(LayergeomError, match=r"'tiny-gpt2' and 'tiny.gpt2' differ only in"):
        lgconfig.validate(cfg)


def test_hf_config_typo_names_the_key_and_close_matches(tmp_path):
    mcfg = {**TINY["gpt2"], "hf_config": {**TINY["gpt2"]["hf_config"], "n_hed": 4}}
    mcfg["checkpoints"] = {"init": {"init": True, "seed": 1}}
    with pytest.raises(LayergeomError, match=r"models\.t\.hf_config\.n_hed: not a setting of gpt2 .*n_head"):
        materialize.materialize("t", "init", mcfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    for family, m in TINY.items():  # every key of the test models is a setting of their config class
        models.check_hf_config(adapter_class(family).model_types[0], m["hf_config"])


def test_offline_hub_fails_within_seconds_without_hf_hub_offline(tmp_path, monkeypatch):
    """No HF_HUB_OFFLINE: one short connection attempt decides, instead of the hub client's retries."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: connection refused at once
    assert "127.0.0.1:9" in network.hub_unreachable()
    t0 = time.perf_counter()
    with pytest.raises(LayergeomError, match=r"no network: 127\.0\.0\.1:9 unreachable.*embedded default"):
        fetch.download_hub("EleutherAI/pythia-14m", "step0", tmp_path / "out")  # the `download` rule's work
    assert time.perf_counter() - t0 < 10
    assert os.listdir(tmp_path) == []


# ---- degenerate but legitimate inputs ----------------------------------------------------------------------
def test_a_zero_update_gives_nan_relerr_delta_not_an_overflow(tmp_path):
    """A pruned or identity block (h_{l+1} = h_l): RelErr_Δ = ‖r‖/‖0‖ is undefined (nan, like the cosines), and the
    table is written; RelErr = ‖r‖/‖y‖ is unchanged, checked against numpy from the patched states."""
    from test_tokenwise_kl import tokenwise_cfg

    from layergeom.tokenwise.pipeline import fit_layer

    windows = np.random.default_rng(0).integers(0, 512, (6, 10))
    store.dump_activations(get_adapter(tiny_model("llama", seed=2)), windows, tmp_path / "acts")
    st = store.ActivationStore(tmp_path / "acts")
    names = st.block_inputs()
    np.save(tmp_path / "acts" / f"{names[1]}.npy", np.load(tmp_path / "acts" / f"{names[0]}.npy"))  # block 0: identity
    cfg = tokenwise_cfg(classes=["lowrank", "identity"], k=12, n_anchors=10)
    table, patches = fit_layer(tmp_path / "acts", 0, cfg, seed=0)
    assert table["relerr_delta"].isna().all() and table["cos_full_tok"].isna().all()
    y = np.asarray(st.states(names[1])[patches["rows"]], dtype=np.float64)  # (m, d)
    for i, name in enumerate(patches["classes"]):
        expect = np.linalg.norm(y - patches["t"][i], axis=1) / np.linalg.norm(y, axis=1)
        got = table.loc[table["class"] == name, "relerr"].to_numpy()
        eps = float(np.finfo(np.float32).eps)  # t is stored in float32: its rounding, relative to ‖y‖
        np.testing.assert_allclose(got, expect, rtol=4 * eps, atol=4 * eps)
    io.write_tsv(table, tmp_path / "tokenwise" / "L0.tsv")  # no overflow refusal
    assert io.read_tsv(tmp_path / "tokenwise" / "L0.tsv")["relerr_delta"].isna().all()


def test_a_corpus_of_one_repeated_word_warns_of_degenerate_neighbourhoods(tmp_path, caplog):
    """Every window the same token: at h_0 every state is the same, every kNN radius is 0 and the neighbours come
    from tie-breaking. The fit says so (logged) and the table's knn_radius shows it; distinct tokens do not warn."""
    from test_tokenwise_kl import tokenwise_cfg

    from layergeom.tokenwise.pipeline import fit_layer

    cfg = tokenwise_cfg(classes=["identity"], k=8, n_anchors=10)
    adapter = get_adapter(tiny_model("llama", seed=2))
    store.dump_activations(adapter, np.full((4, 8), 17), tmp_path / "same")
    with caplog.at_level(logging.WARNING, logger="layergeom"):
        table, _ = fit_layer(tmp_path / "same", 0, cfg, seed=0)
    assert (table["knn_radius"] == 0).all()
    assert "layer 0: 10 of 10 anchors have all k=8 neighbours at distance 0" in caplog.text
    caplog.clear()
    store.dump_activations(adapter, np.random.default_rng(1).integers(0, 512, (4, 8)), tmp_path / "varied")
    with caplog.at_level(logging.WARNING, logger="layergeom"):
        table, _ = fit_layer(tmp_path / "varied", 0, cfg, seed=0)
    assert (table["knn_radius"] > 0).all() and "distance 0" not in caplog.text
