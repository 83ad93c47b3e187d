"""A materialised checkpoint: the dtypes its weights can be in, the hashes of weights and files, a randomly
initialised model from a config, loading a checkpoint (safetensors only, eager attention) and its tokenizer, writing
one, and the checks on what is loaded: readable safetensors weights (no pickle), weights that fill the architecture
exactly, one dtype. Where a checkpoint's weights come from is :mod:`layergeom.materialize`.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import json
import os
from pathlib import Path

import torch

from .adapters import adapter_class
from .adapters.plain import check_plain
from .fetch import PICKLE_SUFFIXES
from .runtime import LayergeomError

WEIGHTS = "model.safetensors"
SOURCE_JSON = "source.json"
#: every from_pretrained: no hub kernel in place of the model's own code (transformers >= 5.25 kernelizes by
#: default where the ``kernels`` package is installed, which it requires); adapters.plain checks the result
NO_KERNELS = {"use_kernels": False}
#: the weight dtypes a checkpoint can be materialised and run in (``models.<m>.dtype``)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str | torch.dtype | None) -> torch.dtype:
    """``models.<m>.dtype`` -> torch dtype (None is float32)."""
    if name is None or isinstance(name, torch.dtype):
        return name or torch.float32
    try:
        return DTYPES[name]
    except KeyError:
        raise LayergeomError(f"dtype '{name}' is not one of {', '.join(DTYPES)}") from None


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def stored_dtype(path: str | os.PathLike) -> torch.dtype:
    """The dtype a materialised checkpoint was written in (``source.json``; float32 when not recorded)."""
    src = Path(path) / SOURCE_JSON
    return torch_dtype(json.loads(src.read_text()).get("dtype") if src.exists() else None)


# ---- hashing ------------------------------------------------------------------------------------
def weights_sha256(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 over tensor names, dtypes, shapes and bytes, in sorted order (independent of file layout)."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().cpu().contiguous()
        h.update(name.encode())
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---- building and loading -----------------------------------------------------------------------
def build_random(family: str, hf_config: dict, seed: int, dtype=torch.float32, *, where: str = "hf_config"):
    """A randomly initialised model of a family from a config dict (tiny test models, ``init``).

    ``hf_config['model_type']`` picks one of the family's model types (default: its first)."""
    from transformers import AutoConfig

    hf_config = dict(hf_config)
    types = adapter_class(family).model_types
    model_type = hf_config.pop("model_type", None) or types[0]
    if model_type not in types:
        raise LayergeomError(
            f"{where}.model_type '{model_type}' is not a {family} model type; the {family} adapter handles "
            f"{', '.join(types)}"
        )
    check_hf_config(model_type, hf_config, where)
    cfg = AutoConfig.for_model(model_type, **hf_config)
    return random_from_config(cfg, seed, dtype)


def _consumed(cls, key: str, value) -> bool:
    """Whether the config class's constructor reads ``key`` itself (some pop extra settings from kwargs, e.g.
    Gemma-4's ``global_head_dim``): an unknown key is stored as an attribute as given, a consumed one is not."""
    try:
        return key not in cls(**{key: value}).to_dict()
    except Exception:  # the value is refused: the key is a setting (the config build reports the value)
        return True


def check_hf_config(model_type: str, hf_config: dict, where: str = "hf_config") -> None:
    """Refuse keys that are no setting of the model type's config class (a typo would be stored and ignored)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    default = cls()
    known = set(default.to_dict()) | set(getattr(cls, "attribute_map", {}))
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            known |= set(inspect.signature(klass.__init__).parameters) - {"self", "kwargs"}
    for key in hf_config:
        if key not in known and not hasattr(default, key) and not _consumed(cls, key, hf_config[key]):
            close = difflib.get_close_matches(key, sorted(known), n=3)
            hint = f"did you mean {' or '.join(close)}?" if close else f"see the {cls.__name__} documentation"
            raise LayergeomError(f"{where}.{key}: not a setting of {model_type} models ({cls.__name__}); {hint}")


def random_from_config(cfg, seed: int, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    # eager attention and experts: exact autodiff (forward mode, float64) through every model type
    model = AutoModelForCausalLM.from_config(
        cfg, dtype=dtype, attn_implementation="eager", experts_implementation="eager"
    )
    check_plain(model)
    return model.eval()


def load_model(path: str | os.PathLike, device: str = "cpu", dtype=None):
    """Load a materialised checkpoint (safetensors only), with eager attention for exact autodiff.

    dtype None runs the model in the dtype it was materialised in (``models.<m>.dtype``); forward passes
    then run in it, and each stage upcasts what its method needs (docs/precision.md).
    """
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if not (path / WEIGHTS).exists():
        raise LayergeomError(f"no {WEIGHTS} in {path}: materialise the checkpoint first")
    check_weight_files(path, f"delete {path} and rerun to materialise it again")
    dtype = stored_dtype(path) if dtype is None else torch_dtype(dtype)
    model, info = AutoModelForCausalLM.from_pretrained(
        path,
        dtype=dtype,
        attn_implementation="eager",
        experts_implementation="eager",
        use_safetensors=True,
        local_files_only=True,
        output_loading_info=True,
        ignore_mismatched_sizes=True,  # reported by name in check_loading_info, then refused
        **NO_KERNELS,
    )
    check_loading_info(model, info, path)
    model = model.to(device).eval()
    check_plain(model)
    return model


def load_tokenizer(path: str | os.PathLike):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def save_checkpoint(model, tokenizer, out_dir: Path, info: dict) -> dict:
    """Write safetensors + config + tokenizer + source.json into out_dir (one shard)."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # a GGUF-loaded model: dequantised already, drop the quantization config
        quantizer.remove_quantization_config(model)
    model.save_pretrained(out_dir, safe_serialization=True, max_shard_size="1000GB")
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)
    info = dict(info)
    info["dtype"] = _weights_dtype(model)
    info["weights_sha256"] = weights_sha256(model.state_dict())
    info["model_type"] = model.config.model_type
    text = model.config.get_text_config()  # the decoder's settings (multimodal wrappers keep them apart)
    info["n_layers"] = int(text.num_hidden_layers)
    info["d_model"] = int(text.hidden_size)
    (out_dir / SOURCE_JSON).write_text(json.dumps(info, indent=2) + "\n")
    return info


# ---- checks on what is loaded ---------------------------------------------------------------------
def check_weight_files(path: Path, fix: str, *, allow_bin: bool = False) -> None:
    """A model directory must hold readable safetensors weights; pickle weight files are refused.

    ``fix`` says what to do about a file that is truncated, empty or not safetensors. ``allow_bin`` (hub
    revisions that only have ``pytorch_model*.bin``, e.g. old training checkpoints) accepts those files:
    transformers reads them with ``torch.load(weights_only=True)``, which unpickles tensors only and refuses
    anything that could run code (a clear error from ``_from_pretrained``).
    """
    shards = sorted(path.glob("*.safetensors"))
    if not shards and allow_bin and sorted(path.glob("pytorch_model*.bin")):
        return
    if not shards:
        pickles = sorted(p for p in path.iterdir() if p.name.endswith(PICKLE_SUFFIXES))
        if pickles:
            raise LayergeomError(
                f"{pickles[0]} is a pickle checkpoint, which layergeom does not load (unpickling can run code): "
                f"convert it to safetensors (load it once where you trust it and call "
                f"model.save_pretrained(dir, safe_serialization=True)), then point the model at that directory"
            )
        raise LayergeomError(f"{path} holds no *.safetensors weights")
    from safetensors import safe_open

    for f in shards:
        try:
            with safe_open(f, "pt"):
                pass
        except Exception as err:  # SafetensorError: header too small, incomplete metadata, invalid header
            raise LayergeomError(
                f"{f} is not a readable safetensors file ({f.stat().st_size} bytes: {err}): "
                f"it is truncated, empty or not safetensors; {fix}"
            ) from None


def check_loading_info(model, info: dict, where) -> None:
    """Refuse weights that do not fill the architecture exactly: a missing tensor would be left random.

    Tensors the model declares tied (``_tied_weights_keys``, ``tie_word_embeddings``) may be absent: they are
    copies of another tensor. Keys the architecture declares ignorable are dropped by transformers already.
    """
    tied = set(getattr(model, "all_tied_weights_keys", None) or {})

    def names(key):
        return sorted(str(k[0] if isinstance(k, tuple) else k) for k in info.get(key) or ())

    missing = [k for k in names("missing_keys") if k not in tied]
    problems = []
    for label, keys in (
        ("missing from the checkpoint", missing),
        ("not in the architecture", names("unexpected_keys")),
        ("of the wrong shape", names("mismatched_keys")),
    ):
        if keys:
            more = f" and {len(keys) - 5} more" if len(keys) > 5 else ""
            problems.append(f"{len(keys)} tensor(s) {label}: {', '.join(keys[:5])}{more}")
    problems += [str(e).splitlines()[0] for e in info.get("error_msgs") or ()]
    if problems:
        raise LayergeomError(
            f"the weights in {where} do not match the {type(model).__name__} architecture ({'; '.join(problems)}): "
            f"check the checkpoint and the model's family and config"
        )


def _weights_dtype(model) -> str:
    """The one floating dtype of a model's parameters (a mix means a module kept its own: named in the error)."""
    found = {dtype_name(p.dtype) for p in model.parameters() if p.is_floating_point()}
    if len(found) != 1:
        raise LayergeomError(f"the weights mix dtypes {sorted(found)}; one dtype per checkpoint is supported")
    return found.pop()
