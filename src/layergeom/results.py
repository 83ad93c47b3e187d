"""Results from Python: one long DataFrame of a table over every model and checkpoint of a results folder.

    from layergeom import results
    spectra = results.load("spectra")            # results/*/*/spectra.tsv, with model, checkpoint, step
    kl = results.load("tokenwise/kl")            # a table in a subfolder of the checkpoint
    manifests = results.load("manifest")         # one row per results/*/*/manifest.json
    dyn = results.load("training_dynamics")      # a per-model table: results/*/training_dynamics.tsv

Tables are read with :func:`layergeom.io.read_tsv` (``nan`` as missing, ``true``/``false`` as booleans). Nothing is
lost or made up without a word: a checkpoint folder without the table (its job has not run yet, or failed) is an
error naming it unless ``missing="skip"`` (then a warning names it), a file without the columns its table always
has (another table, or one of an older version) is an error naming the file and the columns, and so are a table
that is not UTF-8 TSV and a manifest that is not a JSON object.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pandas as pd

from .io import read_tsv
from .runtime import LayergeomError

MANIFEST = "manifest"
#: the columns every file of a table has (docs/outputs.md's "columns"; tests/test_results.py checks the two agree):
#: a file without them holds another table, or one of an older version, and is refused by name
COLUMNS: dict[str, tuple[str, ...]] = {
    "tokenwise": ("layer", "class", "n_anchors", "cos_full_tok", "cos_full_res", "angle_tok_deg", "angle_res_deg",
                  "proj_full", "proj_res", "relerr", "kl", "spearman_rho", "rho_ci_low", "rho_ci_high"),
    "spectra": ("boundary", "layer", "kind", "n_samples", "numerical_rank", "cond", "self_realign", "henrici",
                "frac_expansive", "frac_complex", "asymmetry", "erank", "part_ratio", "cond_ci_low", "cond_ci_high",
                "self_realign_ci_low", "self_realign_ci_high", "henrici_ci_low", "henrici_ci_high",
                "frac_expansive_ci_low", "frac_expansive_ci_high", "frac_complex_ci_low", "frac_complex_ci_high",
                "erank_ci_low", "erank_ci_high"),
    "eigenvalues": ("boundary", "index", "real", "imag", "abs", "nonzero", "complex"),
    "cumulative": ("variant", "depth", "boundary", "erank", "erank_ci_low", "erank_ci_high"),
    "schur": ("alpha", "control", "depth", "erank", "erank_ci_low", "erank_ci_high", "variant", "erank_order_min",
              "erank_order_max"),
    "trends": ("kind", "metric", "scale", "n_boundaries", "first_third", "first_third_ci_low", "first_third_ci_high",
               "middle_third", "last_third", "last_third_ci_low", "last_third_ci_high", "slope", "slope_ci_low",
               "slope_ci_high"),
    "convergence": ("metric", "n_samples", "value", "ci_low", "ci_high"),
    "tokenwise_convergence": ("metric", "class", "axis", "n", "n_anchors", "n_windows", "value", "ci_low", "ci_high"),
    "coupling": ("boundary", "layer", "kind", "n_communities", "rho", "p_value", "q_value", "significant",
                 "n_permutations"),
    "coupling_by_operator": ("grouping", "group", "n_boundaries", "n_significant", "n_significant_positive",
                             "n_significant_negative", "frac_rho_positive", "mean_rho", "median_rho", "median_henrici"),
    "coupling_sweep": ("gamma", "boundary", "layer", "kind", "n_communities", "rho", "p_value", "q_value",
                       "significant", "n_permutations"),
}  # fmt: skip
#: what ``missing=`` of :func:`load` accepts
MISSING = ("error", "skip")
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
        row = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:  # JSONDecodeError, UnicodeDecodeError
        raise LayergeomError(f"{path} is not a readable manifest ({type(err).__name__}: {err}): rerun its "
                             "manifest rule") from None  # fmt: skip
    if not isinstance(row, dict):
        raise LayergeomError(f"{path} is not a manifest (a JSON {type(row).__name__}, not an object): rerun its "
                             "manifest rule")  # fmt: skip
    return row


def _steps(root: Path, model: str, checkpoint: str | None) -> int | None:
    """The step of a checkpoint: from its key, else from its manifest's revision."""
    if checkpoint is None:
        return None
    step = step_of(checkpoint)
    if step is None:
        manifest = root / model / checkpoint / f"{MANIFEST}.json"
        if manifest.exists():
            step = step_of(_manifest_row(manifest).get("revision"))
    return step


def _read_table(path: Path, name: str) -> pd.DataFrame:
    """A table file, refused by name when it is not UTF-8 TSV or lacks the columns of its table (``COLUMNS``)."""
    try:
        df = read_tsv(path)
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError, OSError) as err:
        reason = " ".join(str(err).split())
        raise LayergeomError(f"{path} is not a readable table ({type(err).__name__}: {reason}): rerun the job that "
                             "writes it") from None  # fmt: skip
    missing = [c for c in COLUMNS.get(name, ()) if c not in df.columns]
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise LayergeomError(
            f"{path} is not a {name} table: it lacks {shown} (its columns: {', '.join(map(str, df.columns[:8]))}"
            f"{' ...' if len(df.columns) > 8 else ''}); another table, or one of an older version: rerun the job "
            "that writes it"
        )
    return df


def _checkpoint_dirs(root: Path) -> list[tuple[str, str]]:
    """(model, checkpoint) of every checkpoint folder ``{model}/{checkpoint}/`` of a results folder."""
    return sorted(
        (p.parent.name, p.name)
        for p in root.glob("*/*")
        if p.is_dir() and not _hidden(p, root) and p.relative_to(root).parts[0] != "figures"
    )


def _check_missing(root: Path, name: str, files: list, missing: str) -> None:
    """A checkpoint folder without the table: an error naming it (``missing="error"``), else a warning."""
    if missing not in MISSING:
        raise LayergeomError(f"missing='{missing}': one of {', '.join(MISSING)}")
    if not files or files[0][1] is None:  # a per-model table
        return
    have = {(m, c) for m, c, _ in files}
    lacking = [f"{m}/{c}" for m, c in _checkpoint_dirs(root) if (m, c) not in have]
    if not lacking:
        return
    shown = ", ".join(lacking[:5]) + (f" and {len(lacking) - 5} more" if len(lacking) > 5 else "")
    what = f"{len(lacking)} checkpoint folder(s) under {root} have no {name} table yet ({shown})"
    if missing == "error":
        raise LayergeomError(f"{what}: finish the run (or remove those folders), or load the others with "
                             "missing='skip'")  # fmt: skip
    warnings.warn(f"{what}: their rows are not in the table", stacklevel=3)


def load(table: str, results_dir: str | Path = "results", missing: str = "error") -> pd.DataFrame:
    """One long DataFrame of ``table`` over every model and checkpoint: the table's rows with ``model``,
    ``checkpoint`` and ``step`` (a nullable integer: the step the checkpoint key or revision names) in front.

    A checkpoint folder without the table is an error naming it; ``missing="skip"`` loads the others and warns.
    """
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
    _check_missing(root, name, files, missing)
    frames = []
    for model, checkpoint, path in files:
        df = pd.DataFrame([_manifest_row(path)]) if name == MANIFEST else _read_table(path, name)
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
