"""Hub models from the user's Hugging Face cache: a fake cache laid out like huggingface_hub's
(models--org--name/{blobs,refs,snapshots/<commit>}), HF_HUB_CACHE pointing at it. Offline (HF_HUB_OFFLINE=1) a
cached revision is linked, not copied, and materialises; a family that contradicts the config is refused before
any weights come down; `layergeom inspect` reads a hub id's config.json from the cache."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from conftest import tiny_model

from layergeom import cli, corpus, fetch, materialize, models, network
from layergeom.runtime import LayergeomError

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "org/tiny"


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> Path:
    """A tiny gpt_neox model with a trained BPE in the Hugging Face layout, and an old-format .bin beside it."""
    path = tmp_path_factory.mktemp("remote")
    tiny_model("gpt_neox", seed=5).save_pretrained(path)
    corpus.train_bpe(corpus.load_documents({"source": "python-docs"})[:20], 512, path / "_tok")
    models.load_tokenizer(path / "_tok").save_pretrained(path)
    (path / "pytorch_model.bin").write_bytes(b"old format: never linked")
    (path / "README.md").write_text("not needed")
    return path


def fill_cache(cache: Path, files: dict[str, Path], repo: str = REPO, commit: str = COMMIT, refs=("main",)) -> Path:
    """huggingface_hub's cache layout: blobs by content hash, snapshots/<commit>/<file> linking to them, refs."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    for name, src in files.items():
        data = src.read_bytes()
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = folder / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    for ref in refs:
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
    return folder / "snapshots" / commit


@pytest.fixture
def cache(tmp_path, monkeypatch):
    import huggingface_hub.constants

    path = tmp_path / "hf-cache"
    path.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(path))
    return path


@pytest.fixture
def offline(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def all_files(model_files: Path) -> dict[str, Path]:
    return {p.name: p for p in model_files.iterdir() if p.is_file()}


def test_offline_a_cached_revision_is_linked_and_materialises(tmp_path, cache, offline, model_files):
    snapshot = fill_cache(cache, all_files(model_files), refs=("main", "step0"))
    out = tmp_path / "resources" / "hub" / "p" / "step0"
    record = fetch.download_hub(REPO, "step0", out, name="p", family="gpt_neox", n_layers=2)
    assert record["commit"] == COMMIT and json.loads((out / fetch.DOWNLOAD_JSON).read_text()) == record
    linked = sorted(p.name for p in out.iterdir() if p.name != fetch.DOWNLOAD_JSON)
    assert "model.safetensors" in linked and "tokenizer.json" in linked and "config.json" in linked
    assert "pytorch_model.bin" not in linked and "README.md" not in linked
    for name in linked:  # no second copy: each a link into the cache's snapshot
        assert (out / name).is_symlink() and Path(os.readlink(out / name)) == snapshot / name
        assert (out / name).read_bytes() == (model_files / name).read_bytes()
    size = sum((out / n).lstat().st_size for n in linked)
    assert size < 10_000 < (model_files / "model.safetensors").stat().st_size

    mcfg = {"source": "hub", "family": "gpt_neox", "id": REPO, "n_layers": 2,
            "checkpoints": {"step0": {"revision": "step0"}}}  # fmt: skip
    info = materialize.materialize("p", "step0", mcfg, tmp_path / "m" / "step0", hub_dir=out)
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(model_files, local_files_only=True)
    assert info["weights_sha256"] == models.weights_sha256(ref.state_dict())
    assert info["hub_commit"] == COMMIT
    assert json.loads((tmp_path / "m" / "step0" / "source.json").read_text())["hub_commit"] == COMMIT


def test_offline_an_uncached_or_partly_cached_revision_is_one_clear_error(tmp_path, cache, offline, model_files):
    out = tmp_path / "hub" / "main"
    with pytest.raises(LayergeomError, match="not in the Hugging Face cache.*embedded default") as err:
        fetch.download_hub(REPO, None, out)
    assert "\n" not in str(err.value)
    fill_cache(cache, {"config.json": model_files / "config.json"})  # what `layergeom inspect` leaves there
    with pytest.raises(LayergeomError, match=r"holds only part of it \(no \*\.safetensors\)"):
        fetch.download_hub(REPO, None, out)
    assert not out.parent.exists() or not any(out.parent.iterdir())


def test_offline_a_sharded_revision_missing_a_shard_is_refused(tmp_path, cache, offline, model_files):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                                "b": "model-00002-of-00002.safetensors"}}))  # fmt: skip
    files = {"config.json": model_files / "config.json", index.name: index,
             "model-00001-of-00002.safetensors": model_files / "model.safetensors"}  # fmt: skip
    fill_cache(cache, files)
    with pytest.raises(LayergeomError, match="model-00002-of-00002.safetensors"):
        fetch.download_hub(REPO, None, tmp_path / "hub" / "main")


def test_a_contradicting_family_is_refused_from_the_cached_config(tmp_path, cache, offline, model_files):
    fill_cache(cache, all_files(model_files))
    with pytest.raises(LayergeomError, match=r"models\.p: family 'llama' contradicts .*'gpt_neox'.*family: gpt_neox"):
        fetch.download_hub(REPO, None, tmp_path / "hub" / "main", name="p", family="llama")
    with pytest.raises(LayergeomError, match=r"models\.p: n_layers 6 contradicts .* 2 layers"):
        fetch.download_hub(REPO, None, tmp_path / "hub" / "main", name="p", family="gpt_neox", n_layers=6)
    assert not (tmp_path / "hub" / "main").exists()


class FakeHub:
    """The hub's API over a local folder: model_info, hf_hub_download and snapshot_download fill the fake cache."""

    def __init__(self, remote: Path, cache: Path):
        self.remote, self.cache, self.calls = remote, cache, []

    def model_info(self, repo_id, revision=None):
        files = sorted(p.name for p in self.remote.iterdir() if p.is_file())
        return type("Info", (), {"sha": COMMIT, "siblings": [type("S", (), {"rfilename": f}) for f in files]})

    def hf_hub_download(self, repo_id, filename, revision=None, **kw):
        self.calls.append(("hf_hub_download", filename))
        return str(fill_cache(self.cache, {filename: self.remote / filename}) / filename)

    def snapshot_download(self, repo_id, revision=None, allow_patterns=None, **kw):
        import fnmatch

        self.calls.append(("snapshot_download", tuple(allow_patterns)))
        wanted = {p.name: p for p in self.remote.iterdir() if any(fnmatch.fnmatch(p.name, a) for a in allow_patterns)}
        snapshot = self.cache / f"models--{repo_id.replace('/', '--')}" / "snapshots" / COMMIT
        return str(fill_cache(self.cache, {n: p for n, p in wanted.items() if not (snapshot / n).exists()}))


@pytest.fixture
def hub(cache, monkeypatch, model_files):
    import huggingface_hub

    fake = FakeHub(model_files, cache)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(network, "hub_unreachable", lambda: None)  # the fake hub answers
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, *a, **k: fake.model_info(*a, **k))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake.hf_hub_download)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake.snapshot_download)
    return fake


def test_online_the_family_is_checked_before_any_weights_come_down(tmp_path, hub):
    with pytest.raises(LayergeomError, match="'llama' contradicts"):
        fetch.download_hub(REPO, None, tmp_path / "hub" / "main", name="p", family="llama")
    assert hub.calls == [("hf_hub_download", "config.json")]  # the config only, never the weights
    record = fetch.download_hub(REPO, None, tmp_path / "hub" / "main", name="p", family="gpt_neox")
    assert hub.calls[-1][0] == "snapshot_download" and "*.safetensors" in hub.calls[-1][1]
    assert record["commit"] == COMMIT and (tmp_path / "hub" / "main" / "model.safetensors").is_symlink()


def test_inspect_reads_a_hub_config_from_the_cache(cache, offline, model_files, capsys):
    fill_cache(cache, {"config.json": model_files / "config.json"})
    assert cli.main(["inspect", REPO]) == 0
    out = capsys.readouterr().out
    assert "family      gpt_neox" in out and "n_layers    2" in out and f"id: {REPO}" in out
    assert cli.main(["inspect", "org/not-cached"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not in the Hugging Face cache" in err


def test_the_workflow_reads_a_cached_hub_config_at_dag_time(cache, offline, model_files):
    from layergeom import modelinfo

    hub = {"source": "hub", "id": REPO, "checkpoints": {"main": {"revision": "main"}, "init": {"init": True}}}
    with pytest.raises(LayergeomError, match="set family and n_layers"):  # nothing cached: the user must say
        modelinfo.complete_model("p", dict(hub))
    fill_cache(cache, {"config.json": model_files / "config.json"})
    m = modelinfo.complete_model("p", dict(hub))
    assert m["family"] == "gpt_neox" and m["n_layers"] == 2
    with pytest.raises(LayergeomError, match=r"models\.p: family 'llama' contradicts .*Hugging Face cache"):
        modelinfo.complete_model("p", {**hub, "family": "llama"})
