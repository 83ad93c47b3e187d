"""Results from Python: one long DataFrame of a table over every model and checkpoint of a results folder.

    from layergeom import results
    spectra = results.load("spectra")            # results/*/*/spectra.tsv, with model, checkpoint, step
    kl = results.load("tokenwise/kl")            # a table in a subfolder of the checkpoint
    manifests = results.load("manifest")         # one row per results/*/*/manifest.json
    dyn = results.load("training_dynamics")      # a per-model table: results/*/training_dynamics.tsv

Tables are read with :func:`layergeom.io.read_tsv` (``nan`` as missing, ``true``/``false`` as booleans).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from .io import read_tsv
from .runtime import LayergeomError

MANIFEST = "manifest"
#: the checkpoint key or revision names a training step: ``step143000``, ``global_step20``, ``step-5``
_STEP = re.compile(r"(?:^|[^A-Za-z0-9])?step[-_]?(\d+)$", re.IGNORECASE)


def step_of(*names) -> int | None:
    """The training step named by the first of ``names`` (checkpoint key, revision) that ends in step{N}."""
    for name in names:
        m = _STEP.search(str(name)) if name else None
        if m:
            return int(m.group(1))
    return None


def _name(table: str) -> str:
    """``spectra``, ``spectra.tsv`` or ``tokenwise/kl`` -> the file's path under a checkpoint, without suffix."""
    name = table.removesuffix(".tsv").removesuffix(".json").strip("/")
    if not name or ".." in Path(name).parts:
        raise LayergeomError(f"'{table}' is not a table name (e.g. spectra, cumulative, tokenwise/kl, manifest)")
    return name


def _files(root: Path, name: str) -> list[tuple[str, str | None, Path]]:
    """(model, checkpoint, path) of every per-checkpoint file ``{model}/{checkpoint}/{name}``, else of every
    per-model file ``{model}/{name}`` (checkpoint None), sorted by path."""
    suffix = ".json" if name == MANIFEST else ".tsv"
    per_ck = sorted(p for p in root.glob(f"*/*/{name}{suffix}") if not _hidden(p, root))
    if per_ck:
        return [(p.relative_to(root).parts[0], p.relative_to(root).parts[1], p) for p in per_ck]
    per_model = sorted(p for p in root.glob(f"*/{name}{suffix}") if not _hidden(p, root))
    return [(p.relative_to(root).parts[0], None, p) for p in per_model if p.parent.name != "figures"]


def _hidden(path: Path, root: Path) -> bool:
    """Temporaries of an atomic write and resumable work (``.partial``) are not results."""
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def available(results_dir: str | Path = "results") -> list[str]:
    """The table names ``load`` reads in a results folder: per checkpoint, per model, and the summaries in a
    checkpoint's subfolders (``tokenwise/kl``; not the per-layer or per-boundary files ``L{n}...``)."""
    root = Path(results_dir)
    names = {MANIFEST} if any(root.glob(f"*/*/{MANIFEST}.json")) else set()
    for p in [*root.glob("*/*.tsv"), *root.glob("*/*/*.tsv"), *root.glob("*/*/*/*.tsv")]:
        rel = p.relative_to(root)
        if _hidden(p, root) or rel.parts[0] == "figures" or re.match(r"L\d", rel.name):
            continue
        names.add(rel.stem if len(rel.parts) <= 3 else f"{rel.parts[2]}/{rel.stem}")
    return sorted(names)


def _manifest_row(path: Path) -> dict:
    """One manifest as a row: scalars as they are, lists and dicts kept as Python objects."""
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise LayergeomError(f"{path} is not valid JSON ({err}): rerun its manifest rule") from None


def _steps(root: Path, model: str, checkpoint: str | None) -> int | None:
    """The step of a checkpoint: from its key, else from its manifest's revision."""
    if checkpoint is None:
        return None
    step = step_of(checkpoint)
    if step is None:
        manifest = root / model / checkpoint / f"{MANIFEST}.json"
        if manifest.exists():
            step = step_of(json.loads(manifest.read_text()).get("revision"))
    return step


def load(table: str, results_dir: str | Path = "results") -> pd.DataFrame:
    """One long DataFrame of ``table`` over every model and checkpoint: the table's rows with ``model``,
    ``checkpoint`` and ``step`` (a nullable integer: the step the checkpoint key or revision names) in front."""
    root = Path(results_dir)
    if not root.is_dir():
        raise LayergeomError(f"results folder '{root}' does not exist (results_dir=)")
    name = _name(table)
    files = _files(root, name)
    if not files:
        raise LayergeomError(
            f"no '{name}' table under {root} (looked for {{model}}/{{checkpoint}}/{name} and {{model}}/{name}); "
            f"tables there: {', '.join(available(root)) or 'none'}"
        )
    frames = []
    for model, checkpoint, path in files:
        df = pd.DataFrame([_manifest_row(path)]) if name == MANIFEST else read_tsv(path)
        added = {"model": model}
        if checkpoint is not None:
            added.update(checkpoint=checkpoint, step=_steps(root, model, checkpoint))
        for col, value in added.items():
            if col not in df.columns:  # a manifest names its model and checkpoint itself
                df[col] = value
        front = [c for c in ("model", "checkpoint", "step") if c in df.columns]
        frames.append(df[front + [c for c in df.columns if c not in front]])
    out = pd.concat(frames, ignore_index=True, sort=False)
    if "step" in out.columns and out["step"].dtype.kind in "fO":  # integers with gaps: nullable, not float
        out["step"] = pd.array([None if pd.isna(v) else int(v) for v in out["step"]], dtype="Int64")
    return out
