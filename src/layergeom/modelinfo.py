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

from . import network
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
_HEAD_KEYS = ("num_attention_heads", "n_head")
#: a layer count above this is a damaged config, not a model (the deepest published LMs have a few hundred): the
#: count is refused before anything builds that many layers or names that many boundaries
MAX_LAYERS = 10_000


# ---- the config dict -------------------------------------------------------------------------------------
def text_config(cfg: dict) -> dict:
    """The decoder's settings: ``text_config`` of a multimodal wrapper (Gemma-4), else the config itself."""
    inner = cfg.get("text_config")
    return inner if isinstance(inner, dict) and any(k in inner for k in _LAYER_KEYS) else cfg


def _first(cfg: dict, keys, where: str = "the model's config") -> int | None:
    """The first of ``keys`` that the decoder's config sets: a positive int (a whole float as its int), else one
    line naming the key."""
    text = text_config(cfg)
    key = next((k for k in keys if text.get(k) is not None), None)
    if key is None:
        return None
    value = text[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise LayergeomError(f"{where}: {key} is {value!r}, not a positive whole number")
    return value


def check_shape(cfg: dict, where: str = "the model's config") -> None:
    """Refuse a config whose sizes no model can have, with one line naming the keys: layers (positive, at most
    :data:`MAX_LAYERS`), width, vocabulary, heads that do not split the width (unless ``head_dim`` sets their
    size) and key/value heads that do not split the heads."""
    text = text_config(cfg)
    layers = _first(cfg, _LAYER_KEYS, where)
    if layers is not None and layers > MAX_LAYERS:
        raise LayergeomError(f"{where}: {layers} layers is more than any language model has (at most {MAX_LAYERS})")
    width = _first(cfg, _WIDTH_KEYS, where)
    _first(cfg, ("vocab_size",), where)
    _first(cfg, ("intermediate_size", "n_inner"), where)
    heads = _first(cfg, _HEAD_KEYS, where)
    if heads is None:
        return
    head_key = next(k for k in _HEAD_KEYS if text.get(k) is not None)
    width_key = next((k for k in _WIDTH_KEYS if text.get(k) is not None), None)
    if width is not None and text.get("head_dim") is None and width % heads:
        raise LayergeomError(f"{where}: {width_key} {width} is not a multiple of {head_key} {heads}, so the heads "
                             "cannot split the width (and no head_dim sets their size)")  # fmt: skip
    if text.get("head_dim") is not None:
        _first(cfg, ("head_dim",), where)
    kv = _first(cfg, ("num_key_value_heads",), where)
    if kv is not None and heads % kv:
        raise LayergeomError(f"{where}: {head_key} {heads} is not a multiple of num_key_value_heads {kv}, so the "
                             "query heads cannot share the key/value heads")  # fmt: skip


def family_of_type(model_type: str | None, where: str = "the model") -> str:
    """The family whose adapter handles ``model_type``; a type no adapter handles is refused."""
    if model_type not in MODEL_TYPE_FAMILY:
        raise LayergeomError(
            f"{where} is a '{model_type}' model, which no layergeom adapter handles; supported model types: "
            f"{', '.join(f'{t} ({f})' for t, f in MODEL_TYPE_FAMILY.items())}"
        )
    return MODEL_TYPE_FAMILY[model_type]


def summary(cfg: dict, where: str = "the model") -> dict:
    """model_type, family, n_layers, d_model and the boundary names of a config dict (``config.json``); sizes no
    model can have are refused (:func:`check_shape`)."""
    if not isinstance(cfg, dict):
        raise LayergeomError(f"{where}: a JSON object of settings is wanted, not a {type(cfg).__name__}")
    model_type = cfg.get("model_type")
    family = family_of_type(model_type, where)
    check_shape(cfg, where)
    n_layers, d_model = _first(cfg, _LAYER_KEYS, where), _first(cfg, _WIDTH_KEYS, where)
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
    """A config.json: a JSON object, else one line naming the file."""
    try:
        cfg = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:  # JSONDecodeError, UnicodeDecodeError
        raise LayergeomError(f"{path} is not a readable config.json ({type(err).__name__}: {err})") from None
    if not isinstance(cfg, dict):
        raise LayergeomError(f"{path} is not a config.json: a JSON object of settings is wanted, not a "
                             f"{type(cfg).__name__}")  # fmt: skip
    return cfg


def hub_config_path(model_id: str, revision: str | None = None, *, cached_only: bool = False) -> Path | None:
    """The path of a hub model's config.json: from the Hugging Face cache when it is there, else (unless
    ``cached_only``) fetched into that cache with ``hf_hub_download`` (that one file); None when not cached."""
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    cached = try_to_load_from_cache(model_id, "config.json", revision=revision)
    if isinstance(cached, str):
        return Path(cached)
    if cached_only:
        return None
    offline = network.hub_unreachable()
    what = f"config.json of '{model_id}' revision '{revision or 'main'}'"
    if offline:
        raise network.offline_error(
            what, ConnectionError(offline), f"{offline}, and it is not in the Hugging Face cache"
        )
    try:
        return Path(hf_hub_download(model_id, "config.json", revision=revision))
    except Exception as err:  # unknown id or revision, gated, no network
        raise network.offline_error(what, err) from err


# ---- GGUF metadata -----------------------------------------------------------------------------------------
_GGUF_FIXED = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
#: the most dimensions a GGUF tensor has (ggml's GGML_MAX_DIMS)
GGUF_MAX_DIMS = 4


def gguf_metadata(path: str | os.PathLike, tensors: bool = False) -> dict:
    """A GGUF (v2, v3) file's metadata, from its header alone: scalars and strings as values, arrays as their
    length (``tokenizer.ggml.tokens`` -> the vocabulary size); with ``tensors``, also ``__n_params__``: the
    element count over its tensor infos. Every length and count is checked against the bytes left in the file
    before it is used (ValueError naming it), so a damaged header is never read past the end or into memory."""
    out: dict = {}
    size = os.path.getsize(path)
    with open(path, "rb") as f:

        def left() -> int:
            return size - f.tell()

        def read(fmt):
            n = struct.calcsize(fmt)
            data = f.read(n)
            if len(data) < n:
                raise ValueError(f"the header ends early, at byte {f.tell()} of {size} (a cut file?)")
            return struct.unpack(fmt, data)

        def fits(count: int, each: int, what: str) -> None:
            if count * each > left():
                raise ValueError(f"{what} of {count:,} would need {count * each:,} bytes at byte {f.tell()}, but "
                                 f"the file has {left():,} left: an impossible length (a damaged header)")  # fmt: skip

        def string():
            (n,) = read("<Q")
            fits(n, 1, "a string")
            return f.read(n).decode()

        def value(kind):
            if kind == 8:
                return string()
            if kind == 9:
                item, count = read("<IQ")
                if item in _GGUF_FIXED:
                    fits(count, struct.calcsize(_GGUF_FIXED[item]), "an array")
                    f.seek(struct.calcsize(_GGUF_FIXED[item]) * count, 1)
                elif item in (8, 9):
                    fits(count, 8 if item == 8 else 12, "an array")
                    for _ in range(count):
                        value(item)
                else:
                    raise ValueError(f"unknown metadata type {item}")
                return count
            if kind in _GGUF_FIXED:
                return read(_GGUF_FIXED[kind])[0]
            raise ValueError(f"unknown metadata type {kind}")

        magic, version = read("<4sI")
        if magic != b"GGUF" or version < 2:
            raise ValueError(f"magic {magic!r} version {version}: not a GGUF v2/v3 file")
        n_tensors, n_kv = read("<QQ")
        fits(n_kv, 8 + 4 + 1, "a metadata table")  # each entry: a key length, a type and at least one byte
        for _ in range(n_kv):
            name = string()
            (kind,) = read("<I")
            out[name] = value(kind)
        if tensors:
            fits(n_tensors, 8 + 4 + 4 + 8, "a tensor table")  # name length, dims, type, offset
            total = 0
            for _ in range(n_tensors):
                name = string()
                (n_dims,) = read("<I")
                if n_dims > GGUF_MAX_DIMS:
                    raise ValueError(f"tensor '{name}' has {n_dims} dimensions (GGUF has at most {GGUF_MAX_DIMS})")
                numel = 1
                for d in read(f"<{n_dims}Q"):
                    numel *= d
                _, offset = read("<IQ")  # type, offset into the data
                if offset > size:
                    raise ValueError(f"tensor '{name}' starts at byte {offset:,} of the data, past the end of the "
                                     f"file ({size:,} bytes: a cut file?)")  # fmt: skip
                total += numel
            out["__n_params__"] = total
    return out


def read_gguf(path: str | os.PathLike, tensors: bool = False) -> dict:
    """:func:`gguf_metadata`, or one line naming the file and what is wrong with it."""
    try:
        return gguf_metadata(path, tensors=tensors)
    except (OSError, ValueError, struct.error, UnicodeDecodeError, OverflowError, MemoryError) as err:
        raise LayergeomError(f"'{path}' is not a readable GGUF file ({type(err).__name__}: {err})") from None


def gguf_config(path: str | os.PathLike) -> dict:
    """The config.json keys a GGUF file's metadata gives: model_type, num_hidden_layers, hidden_size, vocab_size."""
    meta = read_gguf(path)
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise LayergeomError(f"'{path}': no general.architecture in its GGUF metadata")
    cfg = {"model_type": GGUF_MODEL_TYPES.get(arch, arch.replace("-", "_"))}
    for key, gguf_key in (("num_hidden_layers", "block_count"), ("hidden_size", "embedding_length")):
        if f"{arch}.{gguf_key}" in meta:
            value = meta[f"{arch}.{gguf_key}"]
            if not isinstance(value, int) or isinstance(value, bool):
                raise LayergeomError(f"'{path}': {arch}.{gguf_key} is {value!r}, not a whole number")
            cfg[key] = value
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
        layers = _first(cfg, _LAYER_KEYS, where)
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
