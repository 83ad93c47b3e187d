"""What a model is, from its config alone: model type, adapter family, layers, width, boundaries, parameters.

Read by ``layergeom inspect`` (:mod:`layergeom.cli`) and, at DAG time, by the workflow (``rules/common.smk``),
which fills in ``family`` and ``n_layers`` where the user left them out and refuses a family that contradicts the
model's type before anything is downloaded. Reads ``config.json`` only (a local directory's, the Hugging Face
cache's, or the hub's through ``hf_hub_download`` of that one file), or a GGUF file's metadata; importable
without torch, numpy or huggingface_hub (each is imported where it is used).
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

from .names import FAMILY_KINDS, boundaries_for
from .runtime import LayergeomError

#: model_type -> the family whose adapter handles it; equal to ``layergeom.adapters.MODEL_TYPES`` (a test
#: checks it), kept here so that the workflow's DAG is built without importing torch
MODEL_TYPE_FAMILY: dict[str, str] = {
    "gpt2": "gpt2",
    "gpt_neox": "gpt_neox",
    **dict.fromkeys(("llama", "qwen2", "qwen3", "mistral", "olmo", "olmo2", "olmo3", "smollm3"), "llama"),
    "gemma3_text": "gemma3",
    "gemma4_text": "gemma4",
    "gemma4": "gemma4",
    "mamba": "mamba",
}
#: GGUF ``general.architecture`` -> transformers model_type, where the two differ
GGUF_MODEL_TYPES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gemma3": "gemma3_text", "gptneox": "gpt_neox"}
#: bytes per weight of each dtype a checkpoint can be materialised in (``models.<m>.dtype``)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_WIDTH_KEYS = ("hidden_size", "n_embd", "d_model")


# ---- the config dict -------------------------------------------------------------------------------------
def text_config(cfg: dict) -> dict:
    """The decoder's settings: ``text_config`` of a multimodal wrapper (Gemma-4), else the config itself."""
    inner = cfg.get("text_config")
    return inner if isinstance(inner, dict) and any(k in inner for k in _LAYER_KEYS) else cfg


def _first(cfg: dict, keys) -> int | None:
    """The first of ``keys`` that the decoder's config sets, as an int."""
    text = text_config(cfg)
    return next((int(text[k]) for k in keys if text.get(k) is not None), None)


def family_of_type(model_type: str | None, where: str = "the model") -> str:
    """The family whose adapter handles ``model_type``; a type no adapter handles is refused."""
    if model_type not in MODEL_TYPE_FAMILY:
        raise LayergeomError(
            f"{where} is a '{model_type}' model, which no layergeom adapter handles; supported model types: "
            f"{', '.join(f'{t} ({f})' for t, f in MODEL_TYPE_FAMILY.items())}"
        )
    return MODEL_TYPE_FAMILY[model_type]


def summary(cfg: dict, where: str = "the model") -> dict:
    """model_type, family, n_layers, d_model and the boundary names of a config dict (``config.json``)."""
    model_type = cfg.get("model_type")
    family = family_of_type(model_type, where)
    n_layers, d_model = _first(cfg, _LAYER_KEYS), _first(cfg, _WIDTH_KEYS)
    if n_layers is None:
        raise LayergeomError(f"{where}: its config names no layer count ({', '.join(_LAYER_KEYS)})")
    return {
        "model_type": model_type,
        "family": family,
        "n_layers": n_layers,
        "d_model": d_model,
        "kinds": list(FAMILY_KINDS[family]),
        "boundaries": boundaries_for(family, n_layers),
    }


def check_family(name: str, family: str | None, model_type: str | None, where: str) -> None:
    """Refuse a configured family that contradicts the model's type (``models.{name}.family``)."""
    if family is None or model_type not in MODEL_TYPE_FAMILY or MODEL_TYPE_FAMILY[model_type] == family:
        return
    raise LayergeomError(
        f"models.{name}: family '{family}' contradicts {where}, a '{model_type}' model, whose family is "
        f"'{MODEL_TYPE_FAMILY[model_type]}': set family: {MODEL_TYPE_FAMILY[model_type]} (or leave family out)"
    )


def check_n_layers(name: str, n_layers: int | None, cfg_layers: int | None, where: str) -> None:
    """Refuse a configured n_layers that contradicts the model's config."""
    if n_layers is None or cfg_layers is None or int(n_layers) == int(cfg_layers):
        return
    raise LayergeomError(
        f"models.{name}: n_layers {n_layers} contradicts {where}, which has {cfg_layers} layers "
        f"(set n_layers: {cfg_layers}, or leave it out)"
    )


def check_d_model(name: str, d_model: int | None, cfg_width: int | None, where: str) -> None:
    """Refuse a configured d_model (the width that sizes jobs before the config is at hand) that contradicts the
    model's config."""
    if d_model is None or cfg_width is None or int(d_model) == int(cfg_width):
        return
    raise LayergeomError(
        f"models.{name}: d_model {d_model} contradicts {where}, whose hidden width is {cfg_width} "
        f"(set d_model: {cfg_width}, or leave it out)"
    )


# ---- where a config is read from ---------------------------------------------------------------------------
def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise LayergeomError(f"{path} is not a readable config.json ({type(err).__name__}: {err})") from None


def hub_config_path(model_id: str, revision: str | None = None, *, cached_only: bool = False) -> Path | None:
    """The path of a hub model's config.json: from the Hugging Face cache when it is there, else (unless
    ``cached_only``) fetched into that cache with ``hf_hub_download`` (that one file); None when not cached."""
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    cached = try_to_load_from_cache(model_id, "config.json", revision=revision)
    if isinstance(cached, str):
        return Path(cached)
    if cached_only:
        return None
    from .fetch import hub_unreachable, offline_error

    offline = hub_unreachable()
    what = f"config.json of '{model_id}' revision '{revision or 'main'}'"
    if offline:
        raise offline_error(what, ConnectionError(offline), f"{offline}, and it is not in the Hugging Face cache")
    try:
        return Path(hf_hub_download(model_id, "config.json", revision=revision))
    except Exception as err:  # unknown id or revision, gated, no network
        raise offline_error(what, err) from err


# ---- GGUF metadata -----------------------------------------------------------------------------------------
_GGUF_FIXED = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_metadata(path: str | os.PathLike, tensors: bool = False) -> dict:
    """A GGUF (v2, v3) file's metadata, from its header alone: scalars and strings as values, arrays as their
    length (``tokenizer.ggml.tokens`` -> the vocabulary size); with ``tensors``, also ``__n_params__``: the
    element count over its tensor infos."""
    out: dict = {}
    with open(path, "rb") as f:

        def read(fmt):
            size = struct.calcsize(fmt)
            data = f.read(size)
            if len(data) < size:
                raise ValueError("the header ends early")
            return struct.unpack(fmt, data)

        def string():
            (n,) = read("<Q")
            return f.read(n).decode()

        def value(kind):
            if kind == 8:
                return string()
            if kind == 9:
                item, count = read("<IQ")
                if item in _GGUF_FIXED:
                    f.seek(struct.calcsize(_GGUF_FIXED[item]) * count, 1)
                else:
                    for _ in range(count):
                        value(item)
                return count
            if kind in _GGUF_FIXED:
                return read(_GGUF_FIXED[kind])[0]
            raise ValueError(f"unknown metadata type {kind}")

        magic, version = read("<4sI")
        if magic != b"GGUF" or version < 2:
            raise ValueError(f"magic {magic!r} version {version}: not a GGUF v2/v3 file")
        n_tensors, n_kv = read("<QQ")
        for _ in range(n_kv):
            name = string()
            (kind,) = read("<I")
            out[name] = value(kind)
        if tensors:
            total = 0
            for _ in range(n_tensors):
                string()
                (n_dims,) = read("<I")
                numel = 1
                for d in read(f"<{n_dims}Q"):
                    numel *= d
                read("<IQ")  # type, offset
                total += numel
            out["__n_params__"] = total
    return out


def gguf_config(path: str | os.PathLike) -> dict:
    """The config.json keys a GGUF file's metadata gives: model_type, num_hidden_layers, hidden_size, vocab_size."""
    try:
        meta = gguf_metadata(path)
    except (OSError, ValueError, struct.error, UnicodeDecodeError) as err:
        raise LayergeomError(f"'{path}' is not a readable GGUF file ({type(err).__name__}: {err})") from None
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise LayergeomError(f"'{path}': no general.architecture in its GGUF metadata")
    cfg = {"model_type": GGUF_MODEL_TYPES.get(arch, arch.replace("-", "_"))}
    for key, gguf_key in (("num_hidden_layers", "block_count"), ("hidden_size", "embedding_length")):
        if f"{arch}.{gguf_key}" in meta:
            cfg[key] = int(meta[f"{arch}.{gguf_key}"])
    if "tokenizer.ggml.tokens" in meta:
        cfg["vocab_size"] = int(meta["tokenizer.ggml.tokens"])
    return cfg


# ---- one model of the workflow's config ---------------------------------------------------------------------
def configured_source(name: str, mcfg: dict) -> tuple[dict | None, str | None]:
    """The config dict of a workflow model, where it is readable without a download, and where it came from:
    ``hf_config`` (sources config, train), the reference checkpoint's ``config.json`` (local), the GGUF
    metadata (gguf with a path), for hub the download rule's ``resources/hub/{name}/{checkpoint}/`` (relative to
    the working directory: what a cluster job that parses the workflow again sees), else the Hugging Face
    cache; (None, None) when none is at hand."""
    source = mcfg.get("source")
    cks = [c or {} for c in (mcfg.get("checkpoints") or {}).values()]
    ref = next((c for c in cks if not c.get("init")), {})
    if source in ("config", "train"):
        h = dict(mcfg.get("hf_config") or {})
        return (h, f"models.{name}.hf_config") if h.get("model_type") else (None, None)
    if source == "local":
        path = ref.get("path") or mcfg.get("path")
        cfg = Path(path) / "config.json" if path else None
        return (read_json(cfg), str(cfg)) if cfg is not None and cfg.is_file() else (None, None)
    if source == "gguf":
        path = ref.get("path") or mcfg.get("path")
        return (gguf_config(path), path) if path and Path(path).is_file() else (None, None)
    if source == "hub" and mcfg.get("id"):
        ref_key = next((k for k, c in (mcfg.get("checkpoints") or {}).items() if not (c or {}).get("init")), None)
        fetched = Path("resources/hub") / name / str(ref_key) / "config.json"  # the download rule's output
        if ref_key is not None and fetched.is_file():
            return read_json(fetched), str(fetched)
        try:
            cached = hub_config_path(mcfg["id"], ref.get("revision"), cached_only=True)
        except Exception:  # an id the hub client refuses: the download rule reports it
            return None, None
        return (
            (read_json(cached), f"'{mcfg['id']}' (its config.json in the Hugging Face cache)")
            if cached
            else (None, None)
        )
    return None, None


def complete_model(name: str, mcfg: dict) -> dict:
    """Fill in a workflow model's ``family`` and ``n_layers`` from its config where the user left them out, and
    refuse ones (and a ``d_model``) that contradict it; returns mcfg. Without a readable config, what is missing is asked for (a
    config that is there but unreadable is reported by materialize, which names the key that points at it)."""
    try:
        cfg, where = configured_source(name, mcfg)
    except LayergeomError:
        cfg, where = None, None
    if cfg is not None:
        model_type = cfg.get("model_type")
        if model_type in MODEL_TYPE_FAMILY:
            check_family(name, mcfg.get("family"), model_type, where)
            mcfg.setdefault("family", MODEL_TYPE_FAMILY[model_type])
        layers = _first(cfg, _LAYER_KEYS)
        check_n_layers(name, mcfg.get("n_layers"), layers, where)
        check_d_model(name, mcfg.get("d_model"), _first(cfg, _WIDTH_KEYS), where)
        if layers is not None and mcfg.get("source") in ("hub", "local", "gguf"):
            mcfg.setdefault("n_layers", layers)
    if mcfg.get("source") in ("config", "train") and not mcfg.get("family"):
        raise LayergeomError(f"models.{name}: set family, or hf_config.model_type to a supported model type")
    missing = [
        k for k in ("family", "n_layers") if mcfg.get(k) is None and mcfg.get("source") not in ("config", "train")
    ]
    if missing:
        hint = f"; `layergeom inspect {mcfg['id']}` reads it" if mcfg.get("id") else ""
        raise LayergeomError(
            f"models.{name}: set {' and '.join(missing)} (its config is not readable before the download{hint})"
        )
    return mcfg


def stanza_name(source: str) -> str:
    """A config key for a model: the last part of its id or path, lower case, without a .gguf suffix."""
    base = Path(source.rstrip("/")).name.removesuffix(".gguf").lower()
    return re.sub(r"[^a-z0-9_.-]+", "-", base).strip("-.") or "model"
