"""The cumulative table's jobs: :func:`write_cumulative` (rule ``spectra_cumulative``) writes ``cumulative.tsv`` of
a checkpoint in one job; fanned out over the variants, :func:`write_cumulative_variant`
(``spectra_cumulative_variant``) per variant and :func:`gather_cumulative` (``spectra_cumulative_gather``) write
the same bytes.

The method: ``cumulative.cumulative_rows``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from ...io import write_tsv
from ...parts import read_parts, write_part
from ...resume.snapshots import Snapshots
from ...runtime import LayergeomError, progress
from ..cumulative import VARIANTS, cumulative_rows, step_operator
from .common import BoundaryFiles, _remove_unowned_work, _replicates, _same_counts, snapshots_for

log = logging.getLogger("layergeom")


def write_cumulative(
    files: BoundaryFiles,
    out_tsv,
    variants: Iterable[str] = VARIANTS,
    *,
    ci_level: float,
    ci_blocks: int | None,
    snapshot_s: float | None = None,
    device: str = "cpu",
) -> pd.DataFrame:
    """cumulative.tsv: both variants composed in one pass over the boundaries, with jackknife intervals.

    ``snapshot_s``: save the products every that many seconds, and resume from them (``resume``; on any
    device). ``device``: where the products compute (a torch device string, ``workflow.job_device``).
    """
    table, _, snap = _cumulative_table(files, out_tsv, list(variants), ci_level=ci_level, ci_blocks=ci_blocks,
                                       snapshot_s=snapshot_s, what="cumulative", device=device)  # fmt: skip
    write_tsv(table, out_tsv)
    snap.clear()
    return table


def _cumulative_table(
    files: BoundaryFiles,
    out,
    variants: list[str],
    *,
    ci_level: float,
    ci_blocks: int | None,
    snapshot_s: float | None,
    what: str,
    device: str,
) -> tuple[pd.DataFrame, np.ndarray, Snapshots]:
    """The cumulative.tsv rows of `variants` (``cumulative_rows``, nan interval columns without replicates), the
    group counts and the snapshots (as `what`, next to `out`): the caller writes, then clears them."""
    counts = files.counts()
    reps = _replicates(counts, ci_blocks, "cumulative.tsv")
    settings = {"variants": variants, "ci_level": ci_level, "ci_blocks": ci_blocks}
    snap = snapshots_for(files, out, what, settings, snapshot_s)
    skip = snap.done

    def steps():
        for i, name in enumerate(progress(files.names, desc="cumulative", unit="boundary")):
            if i < skip:  # in the snapshot: not read
                yield name, None, None
                continue
            J = files[name]
            yield name, J, None if reps is None else files.deviations(name, J, counts, reps)

    table = cumulative_rows(steps(), variants, weights=None if reps is None else reps.weights, ci_level=ci_level,
                            snapshots=snap, device=device)  # fmt: skip
    if reps is None:
        table.insert(4, "erank_ci_low", np.nan)
        table.insert(5, "erank_ci_high", np.nan)
    return table, counts, snap


def write_cumulative_variant(
    files: BoundaryFiles,
    out_part,
    *,
    variant: str,
    ci_level: float,
    ci_blocks: int | None,
    snapshot_s: float | None = None,
    device: str = "cpu",
    siblings: Iterable | None = None,
) -> None:
    """One variant's chain of cumulative.tsv through every boundary (rule ``spectra_cumulative_variant``): the
    rows :func:`write_cumulative` computes for it (``cumulative_rows`` with ``variants=[variant]``: the chains of
    the variants never meet, so they are the same numbers), as computed, in a part file (``layergeom.parts``) for
    :func:`gather_cumulative`.

    ``snapshot_s``: save the product every that many seconds, and resume from it (``resume``); the variants of a
    checkpoint share their work folder (``parts/cumulative/.partial/``), each with its own snapshot (`siblings`:
    the outputs of every variant job, ``{variant}.npz``; the work of others is removed). ``device``: where the
    products compute (it resumes on any).
    """
    step_operator(np.zeros((1, 1)), variant)  # an unknown variant: one clear error before any work
    _remove_unowned_work(out_part, siblings, lambda p: f"cumulative_{Path(p).stem}")
    table, counts, snap = _cumulative_table(files, out_part, [variant], ci_level=ci_level, ci_blocks=ci_blocks,
                                            snapshot_s=snapshot_s, what=f"cumulative_{variant}",
                                            device=device)  # fmt: skip
    data = {"variant": variant, "boundaries": list(files.names), "counts": [int(c) for c in counts], "table": table}
    write_part(out_part, "cumulative", data, job="spectra_cumulative_variant", inputs=files.paths(),
               settings={"ci_level": ci_level, "ci_blocks": ci_blocks})  # fmt: skip
    snap.clear()


def gather_cumulative(
    parts: list, boundaries: list[str], out_tsv, variants: Iterable[str] = VARIANTS, *, inputs=None
) -> pd.DataFrame:
    """cumulative.tsv of a checkpoint from its variants' parts (rule ``spectra_cumulative_gather``), the variants
    in `variants` order: byte for byte what :func:`write_cumulative` writes in one job (its table is sorted by
    variant, then depth: the parts' rows one after the other).

    There must be one part per variant, in order, each over `boundaries` in order, all with one grouping of the
    samples and one set of settings; with `inputs` (the checkpoint's Jacobian files), each computed from them as
    they are now (``parts.read_parts``)."""
    loaded = read_parts(parts, "cumulative", inputs=inputs, job="spectra_cumulative_variant")
    _same_counts(loaded)
    got = [p.data["variant"] for p in loaded]
    if got != list(variants):
        raise LayergeomError(f"the cumulative parts {[str(p) for p in parts]} hold the variants {got}, not "
                             f"{list(variants)} in order; rerun the spectra_cumulative_variant jobs")  # fmt: skip
    for p in loaded:
        if p.data["boundaries"] != list(boundaries):
            raise LayergeomError(f"{p.path}: a chain over {p.data['boundaries']}, not the checkpoint's "
                                 f"{list(boundaries)} in order; rerun its spectra_cumulative_variant job")  # fmt: skip
    table = pd.concat([p.data["table"] for p in loaded], ignore_index=True)
    write_tsv(table, out_tsv)
    return table
