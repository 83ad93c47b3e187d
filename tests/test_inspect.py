"""`layergeom inspect` on every tiny model type and on a GGUF file, and the workflow's use of the same reading:
family and n_layers from the model's config where left out, a contradicting family refused at DAG time."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import yaml
from conftest import MODEL_TYPE_LIST, ROOT, TINY_CONFIGS, tiny_model

from layergeom import cli, modelinfo
from layergeom.adapters import MODEL_TYPES, get_adapter
from layergeom.names import FAMILY_KINDS


def test_the_torch_free_table_is_the_adapters():
    assert modelinfo.MODEL_TYPE_FAMILY == MODEL_TYPES


def report(capsys, *argv) -> tuple[int, dict, dict]:
    """Exit status, the label/value lines and the parsed models: stanza of one `layergeom inspect`."""
    rc = cli.main(["inspect", *map(str, argv)])
    out = capsys.readouterr().out
    head, _, stanza = out.partition("\n\n")
    rows = dict(line.split(None, 1) for line in head.splitlines()) if rc == 0 else {}
    return rc, rows, yaml.safe_load(stanza) if rc == 0 else {}


@pytest.mark.parametrize("model_type", MODEL_TYPE_LIST)
def test_inspect_every_tiny_model_type(tmp_path, capsys, model_type):
    model = tiny_model(MODEL_TYPES[model_type], model_type=model_type)
    model.config.save_pretrained(tmp_path / "m")  # the config.json alone: no weights to read
    rc, rows, stanza = report(capsys, tmp_path / "m")
    assert rc == 0
    n_layers = get_adapter(model).n_layers  # counted by the adapter on the built model
    d_model = model.get_input_embeddings().weight.shape[1]
    n_params = sum(p.numel() for p in model.parameters())
    assert rows["model_type"] == model_type and rows["family"] == MODEL_TYPES[model_type]
    assert int(rows["n_layers"]) == n_layers and int(rows["d_model"]) == d_model
    assert int(rows["parameters"].replace(",", "")) == n_params
    assert rows["boundaries"].startswith(", ".join(f"L{{l}}.{k}" for k in FAMILY_KINDS[MODEL_TYPES[model_type]]))
    assert f": {n_layers * len(FAMILY_KINDS[MODEL_TYPES[model_type]])} in all" in rows["boundaries"]
    m = stanza["models"]["m"]
    assert m["family"] == MODEL_TYPES[model_type] and m["n_layers"] == n_layers and m["source"] == "local"


def test_parameters_and_memory_of_a_llama_by_formula(tmp_path, capsys):
    V, d, L, H, kv, ff = 512, 32, 3, 4, 2, 64
    cfg = dict(TINY_CONFIGS["qwen2"], vocab_size=V, hidden_size=d, num_hidden_layers=L, num_attention_heads=H,
               num_key_value_heads=kv, intermediate_size=ff, tie_word_embeddings=False)  # fmt: skip
    from transformers import AutoConfig

    AutoConfig.for_model(**cfg).save_pretrained(tmp_path / "q")
    hd = d // H
    per_layer = d * d + d + 2 * (d * kv * hd + kv * hd) + d * d + 3 * d * ff + 2 * d  # qwen2: q, k, v biases
    n = 2 * V * d + L * per_layer + d
    rc, rows, _ = report(capsys, tmp_path / "q")
    assert rc == 0 and int(rows["parameters"].replace(",", "")) == n
    assert (
        f"float32 {n * 4 / 2**10:.1f} KiB" in rows["weights"] and f"bfloat16 {n * 2 / 2**10:.1f} KiB" in rows["weights"]
    )


def test_inspect_refuses_a_type_no_adapter_handles(tmp_path, capsys):
    from transformers import AutoConfig

    AutoConfig.for_model("bert", vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32).save_pretrained(tmp_path / "b")  # fmt: skip
    assert cli.main(["inspect", str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'bert' model, which no layergeom adapter handles" in err
    assert cli.main(["inspect", str(tmp_path / "nowhere")]) == 1
    assert "neither a model directory" in capsys.readouterr().err


def write_gguf(path, arch: str, n_layers: int, d: int, tensors: dict[str, tuple[int, ...]]):
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(n_layers)
    w.add_embedding_length(d)
    w.add_token_list([f"t{i}" for i in range(50)])
    for name, shape in tensors.items():
        w.add_tensor(name, np.zeros(shape, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_inspect_a_gguf_file_reads_its_header(tmp_path, capsys):
    shapes = {"token_embd.weight": (50, 16), "blk.0.attn_q.weight": (16, 16), "output_norm.weight": (16,)}
    write_gguf(tmp_path / "m.gguf", "llama", 3, 16, shapes)
    rc, rows, stanza = report(capsys, tmp_path / "m.gguf")
    assert rc == 0 and rows["family"] == "llama" and rows["n_layers"] == "3" and rows["d_model"] == "16"
    assert int(rows["parameters"].replace(",", "")) == sum(int(np.prod(s)) for s in shapes.values())
    assert stanza["models"]["m"]["source"] == "gguf"
    assert modelinfo.gguf_config(tmp_path / "m.gguf") == {"model_type": "llama", "num_hidden_layers": 3,
                                                         "hidden_size": 16, "vocab_size": 50}  # fmt: skip


# ---- malformed inputs: one line naming the file and what is wrong, exit 1, never a traceback ------------------
def refused(capsys, source) -> str:
    """The one line `layergeom inspect` writes for a source it refuses (exit status 1)."""
    rc = cli.main(["inspect", str(source)])
    captured = capsys.readouterr()
    assert rc == 1 and captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith("layergeom inspect: ")
    return captured.err


LLAMA = {"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64}  # fmt: skip


@pytest.mark.parametrize(
    "content,expect",
    [
        ("[1, 2]", "a JSON object of settings is wanted, not a list"),
        ('"llama"', "a JSON object of settings is wanted, not a str"),
        ("{", "not a readable config.json (JSONDecodeError"),
        (b'{"model_type": "\xff"}', "not a readable config.json (UnicodeDecodeError"),
        ({**LLAMA, "num_hidden_layers": 0}, "num_hidden_layers is 0, not a positive whole number"),
        ({**LLAMA, "num_hidden_layers": -2}, "num_hidden_layers is -2, not a positive whole number"),
        ({**LLAMA, "num_hidden_layers": "two"}, "num_hidden_layers is 'two', not a positive whole number"),
        ({**LLAMA, "num_hidden_layers": 2.5}, "num_hidden_layers is 2.5, not a positive whole number"),
        (
            {**LLAMA, "num_hidden_layers": 10**12},
            f"1000000000000 layers is more than any language model has (at most {modelinfo.MAX_LAYERS})",
        ),  # fmt: skip
        ({**LLAMA, "hidden_size": 30}, "hidden_size 30 is not a multiple of num_attention_heads 4"),
        ({**LLAMA, "num_key_value_heads": 3}, "num_attention_heads 4 is not a multiple of num_key_value_heads 3"),
        ({**LLAMA, "num_attention_heads": 0}, "num_attention_heads is 0, not a positive whole number"),
        ({**LLAMA, "vocab_size": -1}, "vocab_size is -1, not a positive whole number"),
        ({**LLAMA, "rms_norm_eps": "tiny"}, "transformers cannot build a 'llama' model from it"),
    ],
    ids=[
        "list",
        "string",
        "cut-json",
        "not-utf8",
        "zero-layers",
        "negative-layers",
        "text-layers",
        "half-layer",
        "a-trillion-layers",
        "width-heads",
        "kv-heads",
        "zero-heads",
        "negative-vocab",
        "transformers-refuses",
    ],
)
def test_inspect_refuses_a_malformed_config_json_in_one_line(tmp_path, capsys, content, expect):
    import json

    (tmp_path / "m").mkdir()
    path = tmp_path / "m" / "config.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    err = refused(capsys, tmp_path / "m")
    assert str(path) in err and expect in err, err


def test_head_dim_lets_heads_not_split_the_width(tmp_path, capsys):
    import json

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({**LLAMA, "hidden_size": 36, "head_dim": 8}))
    rc, rows, _ = report(capsys, tmp_path / "m")
    assert rc == 0 and rows["d_model"] == "36"


def _gguf_bytes(tmp_path) -> bytes:
    shapes = {"token_embd.weight": (50, 16), "blk.0.attn_q.weight": (16, 16)}
    write_gguf(tmp_path / "ok.gguf", "llama", 3, 16, shapes)
    return (tmp_path / "ok.gguf").read_bytes()


def _patched(data: bytes, at: int, fmt: str, value) -> bytes:
    import struct

    return data[:at] + struct.pack(fmt, value) + data[at + struct.calcsize(fmt) :]


def _after(data: bytes, marker: bytes) -> int:
    """The offset just past the first occurrence of `marker` (a key or tensor name)."""
    return data.index(marker) + len(marker)


GGUF_DAMAGE = {  # name -> (bytes of a valid file -> damaged bytes, what the line says)
    "key-length": (lambda b: _patched(b, 24, "<Q", 2**62), "a string of 4,611,686,018,427,387,904 would need"),
    "metadata-count": (lambda b: _patched(b, 16, "<Q", 2**63), "a metadata table of 9,223,372,036,854,775,808"),
    "tensor-count": (lambda b: _patched(b, 8, "<Q", 2**62), "a tensor table of 4,611,686,018,427,387,904"),
    "array-count": (lambda b: _patched(b, _after(b, b"tokenizer.ggml.tokens") + 8, "<Q", 2**60), "an array of"),
    "dimensions": (lambda b: _patched(b, _after(b, b"token_embd.weight"), "<I", 9), "has 9 dimensions"),
    "offset": (
        lambda b: _patched(b, _after(b, b"token_embd.weight") + 4 + 16 + 4, "<Q", 2**40),
        "starts at byte 1,099,511,627,776 of the data, past the end of the file",
    ),  # fmt: skip
    "cut-tensor-table": (lambda b: b[: _after(b, b"blk.0.attn_q.weight") + 6], "the header ends early"),
}


@pytest.mark.parametrize("damage", list(GGUF_DAMAGE))
def test_inspect_refuses_a_damaged_gguf_in_one_line(tmp_path, capsys, damage):
    edit, expect = GGUF_DAMAGE[damage]
    good = _gguf_bytes(tmp_path)
    rc, rows, _ = report(capsys, tmp_path / "ok.gguf")
    assert rc == 0 and rows["n_layers"] == "3"  # the undamaged file reads
    (tmp_path / "bad.gguf").write_bytes(edit(good))
    err = refused(capsys, tmp_path / "bad.gguf")
    assert "bad.gguf' is not a readable GGUF file" in err and expect in err, err


def test_a_gguf_whose_layer_count_is_impossible_is_named(tmp_path, capsys):
    write_gguf(tmp_path / "z.gguf", "llama", 0, 16, {"token_embd.weight": (50, 16)})
    assert "num_hidden_layers is 0, not a positive whole number" in refused(capsys, tmp_path / "z.gguf")


# ---- the workflow: family and n_layers from the config, a wrong family refused before materialize ------------
def dry_run(tmp_path, models: dict) -> subprocess.CompletedProcess:
    cfg = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    cfg["models"] = models
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "snakemake", "-n", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path / "wd"),
           "--configfile", str(tmp_path / "config.yaml"), "--cores", "1"]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)


def test_complete_model_fills_in_and_refuses(tmp_path):
    tiny_model("llama", model_type="qwen2").config.save_pretrained(tmp_path / "q")
    m = modelinfo.complete_model("q", {"source": "local", "path": str(tmp_path / "q"), "checkpoints": {"t": {}}})
    assert m["family"] == "llama" and m["n_layers"] == 2
    with pytest.raises(modelinfo.LayergeomError, match=r"models\.q: family 'gpt_neox' contradicts .*'qwen2'"):
        modelinfo.complete_model("q", {"source": "local", "family": "gpt_neox", "path": str(tmp_path / "q"),
                                       "checkpoints": {"t": {}}})  # fmt: skip
    with pytest.raises(modelinfo.LayergeomError, match=r"models\.h: set family and n_layers .*layergeom inspect"):
        modelinfo.complete_model("h", {"source": "hub", "id": "org/not-cached-anywhere", "checkpoints": {"main": {}}})
    c = modelinfo.complete_model("c", {"source": "config", "hf_config": {"model_type": "gpt2"}, "checkpoints": {}})
    assert c["family"] == "gpt2"


@pytest.mark.dag
def test_workflow_infers_family_and_layers_and_refuses_a_wrong_family_at_dag_time(tmp_path):
    tiny_model("gpt2").save_pretrained(tmp_path / "g")
    local = {"source": "local", "path": str(tmp_path / "g"), "checkpoints": {"trained": {}},
             "tokenizer": {"from_model": "tiny-gpt2"}}  # fmt: skip
    tiny = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())["models"]["tiny-gpt2"]
    ok = dry_run(tmp_path, {"tiny-gpt2": tiny, "g": local})
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "results/g/trained/spectra.tsv" in ok.stdout + ok.stderr  # boundaries known: the DAG fanned out
    bad = dry_run(tmp_path, {"tiny-gpt2": tiny, "g": {**local, "family": "gpt_neox"}})
    assert bad.returncode != 0 and "models.g: family 'gpt_neox' contradicts" in bad.stdout + bad.stderr
    assert not (tmp_path / "wd" / "resources" / "models").exists()


def test_the_console_script_is_declared():
    import importlib
    import re

    section = (ROOT / "pyproject.toml").read_text().split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    module, func = re.search(r'^layergeom = "([\w.]+):(\w+)"$', section, flags=re.M).groups()
    assert getattr(importlib.import_module(module), func) is cli.main
    res = subprocess.run([sys.executable, "-m", "layergeom.cli", "inspect", "--help"], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}, timeout=120)  # fmt: skip
    assert res.returncode == 0 and "hub id" in res.stdout
