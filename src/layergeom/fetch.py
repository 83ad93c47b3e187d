"""Hub downloads, on the host that has the network (the workflow's local `download` rule), without torch.

Compute nodes are often offline, so ``materialize`` reads hub weights only from the directory this module
fills, ``resources/hub/{model}/{checkpoint}/``: one revision's files in the user's Hugging Face cache
(``HF_HUB_CACHE``, by default ``~/.cache/huggingface/hub``), restricted to what loading needs (the weights in
one format, configs, tokenizer files), fetched into that cache where they are not there yet and linked from
the directory (no second copy), with ``download.json`` recording the commit the revision pointed at. Offline
(``HF_HUB_OFFLINE=1`` or no network) a revision the cache holds whole is used as it is.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import shutil
from pathlib import Path

from . import network
from .modelinfo import _LAYER_KEYS, _first, check_family, check_n_layers, hub_config_path, read_json
from .runtime import LayergeomError, atomic_path

log = logging.getLogger("layergeom")

#: weight files that are Python pickles: loading one can run arbitrary code, so they are refused
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
#: files of a model directory that hold weights (the rest: config, tokenizer, generation settings)
WEIGHT_SUFFIXES = (".safetensors", ".gguf", *PICKLE_SUFFIXES)
DOWNLOAD_JSON = "download.json"
# configs, generation settings and every tokenizer format transformers reads
META_PATTERNS = ["*.json", "tokenizer*", "*.model", "*.tiktoken", "merges.txt", "vocab.txt", "*.vocab"]
WEIGHT_FORMATS = [["*.safetensors"], ["pytorch_model*.bin"]]  # safetensors when a revision has them


def hub_patterns(files: list[str], trust_remote_code: bool = False) -> list[str]:
    """The files of one revision to fetch: one weight format (safetensors, else .bin) and what loading reads."""
    weights = next(
        (pats for pats in WEIGHT_FORMATS if any(fnmatch.fnmatch(f, p) for f in files for p in pats)),
        None,
    )
    if weights is None:
        raise LayergeomError(f"no safetensors or pytorch_model*.bin weights among the revision's files: {files[:20]}")
    return [*weights, *META_PATTERNS, *(["*.py"] if trust_remote_code else [])]


def download_hub(
    model_id: str,
    revision: str | None,
    out_dir: str | os.PathLike,
    *,
    trust_remote_code: bool = False,
    name: str | None = None,
    family: str | None = None,
    n_layers: int | None = None,
) -> dict:
    """One revision of a hub model from the user's Hugging Face cache, fetched into that cache where it is not
    there yet; out_dir gets a link to each file loading reads (no second copy) and download.json, the record
    returned. Offline (HF_HUB_OFFLINE, no network) a revision the cache holds whole is used as it is.

    The revision's config.json is read first (one small file): a ``family`` or ``n_layers`` that contradicts it
    is refused before any weights come down. Nothing is left at out_dir on failure; an interrupted download
    resumes from what the cache holds.
    """
    from huggingface_hub import snapshot_download

    out_dir = Path(out_dir)
    what = f"'{model_id}' revision '{revision or 'main'}'"
    offline = network.hub_unreachable()  # fail at once rather than after the hub client's retries
    if offline:
        snapshot = cached_snapshot(model_id, revision)
        if snapshot is None:
            raise network.offline_error(
                what, ConnectionError(offline), f"{offline}, and it is not in the Hugging Face cache"
            )
        files = snapshot_files(snapshot)
        _check_config(name or model_id, family, n_layers, snapshot / "config.json")
        try:
            patterns = hub_patterns(files, trust_remote_code)
        except LayergeomError:  # e.g. only the config.json that `layergeom inspect` fetched
            patterns = WEIGHT_FORMATS[0]
        missing = missing_weights(snapshot, patterns)
        if missing:
            raise network.offline_error(
                what,
                ConnectionError(offline),
                f"{offline}, and the Hugging Face cache holds only part of it (no {missing})",
            )
        log.info("using %s from the Hugging Face cache (offline: %s): %s", what, offline, snapshot)
    else:
        try:  # any failure to reach the hub (no network, unknown id or revision, gated) is the user's to fix
            from huggingface_hub import HfApi

            info = HfApi().model_info(model_id, revision=revision)
            files = sorted(s.rfilename for s in info.siblings or [])
            patterns = hub_patterns(files, trust_remote_code)
            if "config.json" in files:
                _check_config(name or model_id, family, n_layers, hub_config_path(model_id, info.sha))
            log.info("fetching %s (commit %s) into the Hugging Face cache: %s", what, info.sha, ", ".join(patterns))
            snapshot = Path(snapshot_download(model_id, revision=revision, allow_patterns=patterns))
        except LayergeomError:
            raise
        except Exception as err:
            raise network.offline_error(what, err) from err
        missing = missing_weights(snapshot, patterns)
        if missing:
            raise LayergeomError(f"fetching {what} brought no {missing} into {snapshot}")
    record = {
        "id": model_id,
        "revision": revision,
        "commit": snapshot.name,  # the cache's snapshot folder is named by the commit
        "cache": str(snapshot),
        "files": [f for f in snapshot_files(snapshot) if any(fnmatch.fnmatch(f, p) for p in patterns)],
    }
    with atomic_path(out_dir, is_dir=True) as tmp:
        for f in record["files"]:
            link_file(snapshot / f, tmp / f)
        (tmp / DOWNLOAD_JSON).write_text(json.dumps(record, indent=2) + "\n")
    log.info(
        "linked %s (commit %s, %d files) from %s into %s",
        what,
        record["commit"],
        len(record["files"]),
        snapshot,
        out_dir,
    )
    return record


def _check_config(name: str, family: str | None, n_layers: int | None, config: Path | None) -> None:
    """The revision's config.json against the configured family and n_layers (layergeom.modelinfo)."""
    if config is None or not Path(config).is_file():
        return
    cfg = read_json(config)
    check_family(name, family, cfg.get("model_type"), f"the hub's {config.name}")
    check_n_layers(name, n_layers, _first(cfg, _LAYER_KEYS), f"the hub's {config.name}")


def cached_snapshot(model_id: str, revision: str | None) -> Path | None:
    """The Hugging Face cache's snapshot folder of a revision (models--org--name/snapshots/<commit>), or None."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(model_id, revision=revision, local_files_only=True))
    except Exception:  # LocalEntryNotFoundError and kin: not cached
        return None


def snapshot_files(snapshot: Path) -> list[str]:
    """The files of a snapshot folder, relative and sorted (links to the cache's blobs count; broken ones not)."""
    return sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file())


def missing_weights(snapshot: Path, patterns: list[str]) -> str | None:
    """What a snapshot lacks of its weights: none in the format ``patterns`` picks, or a shard its index names."""
    files = snapshot_files(snapshot)
    if not any(fnmatch.fnmatch(f, p) for f in files for p in patterns[:1]):
        return patterns[0]
    for index in (f for f in files if f.endswith((".safetensors.index.json", ".bin.index.json"))):
        shards = sorted(set(json.loads((snapshot / index).read_text()).get("weight_map", {}).values()))
        absent = [s for s in shards if s not in files]
        if absent:
            return f"{absent[0]} (named in {index})"
    return None


def link_file(target: Path, link: Path) -> None:
    """``link`` -> ``target`` as a symbolic link (absolute); a hard link, else a copy, where links are refused."""
    link.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.symlink(os.path.abspath(target), link)
    except OSError:
        try:
            os.link(os.path.realpath(target), link)
        except OSError:
            shutil.copy2(target, link)


# ---- the files of a local model directory (inputs of the workflow) ---------------------------------
def is_weight_file(path: Path) -> bool:
    return path.name.endswith(WEIGHT_SUFFIXES) or path.name.endswith(".safetensors.index.json")


#: files of a model directory that loading does not read (documentation, weights in formats not loaded)
_NOT_READ = (".md", ".gguf", ".h5", ".msgpack", ".onnx", *PICKLE_SUFFIXES)


def loaded_files(path: str | os.PathLike, weights: bool = True) -> list[Path]:
    """The files of a local model directory that materialising it reads: its config, safetensors weights,
    tokenizer and generation settings (not hidden files, documentation, pickles or other formats);
    ``weights=False``: all but the weights (what the config and the tokenizer are read from)."""
    return sorted(
        p
        for p in Path(path).iterdir()
        if p.is_file()
        and not p.name.startswith(".")
        and not p.name.endswith(_NOT_READ)
        and not p.name.upper().startswith(("README", "LICENSE", "NOTICE", "USE_POLICY"))
        and (weights or not is_weight_file(p))
    )
