"""The ``layergeom`` command: ``layergeom inspect <hub id | local dir | file.gguf>``.

Prints what the workflow needs to know about a model before it is configured (model_type, the adapter family,
n_layers, d_model, the boundaries per block, the parameter count, the memory of its weights per dtype) and a
ready ``models:`` stanza, reading only the model's ``config.json`` (or a GGUF file's header); no weights.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import modelinfo
from .runtime import LayergeomError


def count_parameters(cfg: dict) -> int:
    """The parameters of the causal LM a config.json describes, counted on the meta device (no memory, no weights;
    tied tensors once)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(cfg)
    model_type = cfg.pop("model_type")
    for key in ("architectures", "auto_map", "transformers_version", "torch_dtype", "dtype", "quantization_config"):
        cfg.pop(key, None)
    config = AutoConfig.for_model(model_type, **cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def read_source(source: str, revision: str | None = None) -> tuple[str, dict, int | None, str]:
    """(kind, config dict, parameter count if the file tells it, where) of a hub id, a local directory or a GGUF file."""
    path = Path(source)
    if path.is_file() and path.suffix == ".gguf":
        cfg = modelinfo.gguf_config(path)
        return "gguf", cfg, modelinfo.read_gguf(path, tensors=True)["__n_params__"], str(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise LayergeomError(f"local model directory '{path}' has no config.json")
        return "local", modelinfo.read_json(path / "config.json"), None, str(path / "config.json")
    if path.exists() or source.startswith((".", "/")) or source.count("/") != 1:
        raise LayergeomError(
            f"'{source}' is neither a model directory with a config.json, a .gguf file, nor a hub id (org/name)"
        )
    cfg_path = modelinfo.hub_config_path(source, revision)
    return "hub", modelinfo.read_json(cfg_path), None, str(cfg_path)


def size(n_bytes: int) -> str:
    """Bytes in binary units: ``1.84 GiB``, ``237.6 KiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{n_bytes} B"


def stanza(kind: str, source: str, info: dict, revision: str | None, name: str) -> str:
    """The ``models:`` entry of config.yaml for this model."""
    lines = ["models:", f"  {name}:", f"    source: {kind}"]
    if kind == "hub":
        lines.append(f"    id: {source}")
    else:
        lines.append(f"    path: {Path(source).resolve()}")
    lines += [f"    family: {info['family']}", f"    n_layers: {info['n_layers']}", "    checkpoints:"]
    if kind == "hub":
        lines.append(f"      {revision or 'main'}: {{revision: {revision or 'main'}}}")
    else:
        lines.append("      trained: {}")
    lines.append("      init: {init: true}  # the same architecture with random weights: the null model")
    return "\n".join(lines)


def inspect(source: str, revision: str | None = None, name: str | None = None) -> str:
    """The report ``layergeom inspect`` prints."""
    kind, cfg, n_params, where = read_source(source, revision)
    info = modelinfo.summary(cfg, where)
    if n_params is None:
        try:
            n_params = count_parameters(cfg)
        except Exception as err:  # noqa: BLE001 -- transformers refuses the config: its reason, in one line
            reason = " ".join(str(err).split()) or type(err).__name__
            raise LayergeomError(f"{where}: transformers cannot build a '{info['model_type']}' model from it "
                                 f"({type(err).__name__}: {reason})") from None  # fmt: skip
    kinds = ", ".join(f"L{{l}}.{k}" for k in info["kinds"])
    b = info["boundaries"]
    memory = ", ".join(f"{dt} {size(n_params * nb)}" for dt, nb in modelinfo.DTYPE_BYTES.items())
    rows = [
        ("config", where),
        ("model_type", info["model_type"]),
        ("family", info["family"]),
        ("n_layers", info["n_layers"]),
        ("d_model", info["d_model"]),
        ("boundaries", f"{kinds} per block: {len(b)} in all ({b[0]} ... {b[-1]})"),
        ("parameters", f"{n_params:,}"),
        ("weights", memory),
    ]
    width = max(len(k) for k, _ in rows)
    text = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    return f"{text}\n\n{stanza(kind, source, info, revision, name or modelinfo.stanza_name(source))}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="layergeom", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="what a model is, from its config.json alone, and its models: stanza")
    p.add_argument("source", help="a hub id (org/name), a local model directory or a .gguf file")
    p.add_argument("--revision", help="hub revision (branch, tag or commit; default main)")
    p.add_argument("--name", help="the model's key in the stanza (default: from the id or path)")
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(inspect(args.source, args.revision, args.name))
    except LayergeomError as err:
        print(f"layergeom inspect: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
