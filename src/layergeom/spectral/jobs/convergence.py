"""The convergence table's jobs: :func:`write_convergence` (rule ``spectra_convergence``) writes ``convergence.tsv``
of a checkpoint in one job; fanned out over the subset sizes, :func:`write_convergence_subset`
(``spectra_convergence_subset``) per size and :func:`gather_convergence` (``spectra_convergence_gather``) write
the same bytes.

The method: ``convergence.convergence_rows``.
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
from ...runtime import LayergeomError
from ..convergence import convergence_rows
from ..settings import (
    convergence_sizes,
)
from ..spectra import rank_tolerance
from .common import BoundaryFiles, _remove_unowned_work, _same_counts, snapshots_for

log = logging.getLogger("layergeom")


def write_convergence(
    files: BoundaryFiles,
    out_tsv,
    *,
    sizes: list[int] | None,
    n_edge: int,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    snapshot_s: float | None = None,
    device: str = "cpu",
) -> pd.DataFrame:
    """convergence.tsv: the headline Paper B metrics on the first S groups (nested subsets of the samples).

    ``snapshot_s``: save the state every that many seconds, and resume from it (``resume``; on any device).
    ``device``: where the product chains compute (a torch device string, ``workflow.job_device``).
    """
    counts = files.counts()
    S = convergence_sizes(len(counts), sizes)
    log.info("convergence over the first %s of %d groups", S, len(counts))
    if not S:
        log.warning("convergence.tsv: fewer than 2 sample groups, no subsets to compare")
    table, snap = _convergence_table(files, out_tsv, counts, S, what="convergence", n_edge=n_edge, sr_k=sr_k,
                                     dtype=dtype, rank_tol=rank_tol, ci_level=ci_level, snapshot_s=snapshot_s,
                                     device=device)  # fmt: skip
    write_tsv(table, out_tsv)
    snap.clear()
    return table


def _convergence_table(
    files: BoundaryFiles,
    out,
    counts: np.ndarray,
    S: list[int],
    *,
    what: str,
    n_edge: int,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    snapshot_s: float | None,
    device: str,
) -> tuple[pd.DataFrame, Snapshots]:
    """The convergence.tsv rows of the subset sizes `S` (``convergence_rows``) and the snapshots (as `what`, next
    to `out`): the caller writes, then clears them."""
    d = files[files.names[0]].shape[0]
    settings = {"sizes": S, "n_edge": n_edge, "sr_k": sr_k, "dtype": dtype, "rank_tol": rank_tol,
                "ci_level": ci_level}  # fmt: skip
    snap = snapshots_for(files, out, what, settings, snapshot_s)
    table = convergence_rows(files, counts, S, n_edge=n_edge, sr_k=sr_k, tol=rank_tolerance(d, dtype, rank_tol),
                             ci_level=ci_level, snapshots=snap, device=device)  # fmt: skip
    return table, snap


def write_convergence_subset(
    files: BoundaryFiles,
    out_part,
    *,
    subset: int,
    sizes: list[int] | None,
    n_edge: int,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    snapshot_s: float | None = None,
    device: str = "cpu",
    siblings: Iterable | None = None,
) -> None:
    """The convergence.tsv rows of one subset size (rule ``spectra_convergence_subset``): the `subset`-th of
    ``convergence_sizes(G, sizes)`` (G the Jacobian job's groups, known once it ran: the workflow fans out over
    the index, as many as the config's n_groups allows, and an index past the sizes of the actual G has no
    rows). ``convergence_rows`` over that one size: every size's arithmetic is its own (its first S groups,
    weights, replicates and chains), so the rows are those :func:`write_convergence` computes for it; in a part
    file (``layergeom.parts``) for :func:`gather_convergence`.

    ``snapshot_s``: save the state every that many seconds, and resume from it (``resume``); the subsets of a
    checkpoint share their work folder (``parts/convergence/.partial/``), each with its own snapshot (`siblings`:
    the outputs of every subset job, ``{k}.npz``; the work of others is removed). ``device``: where the product
    chains compute (it resumes on any).
    """
    _remove_unowned_work(out_part, siblings, lambda p: f"convergence_{Path(p).stem}")
    counts = files.counts()
    every = convergence_sizes(len(counts), sizes)
    S = every[subset : subset + 1] if subset >= 0 else []
    log.info("convergence subset %d: the first %s of %d groups (sizes %s)", subset, S, len(counts), every)
    table, snap = _convergence_table(files, out_part, counts, S, what=f"convergence_{subset}", n_edge=n_edge,
                                     sr_k=sr_k, dtype=dtype, rank_tol=rank_tol, ci_level=ci_level,
                                     snapshot_s=snapshot_s, device=device)  # fmt: skip
    data = {"subset": int(subset), "sizes": every, "boundaries": list(files.names),
            "counts": [int(c) for c in counts], "table": table}  # fmt: skip
    settings = {"sizes": sizes, "n_edge": n_edge, "sr_k": sr_k, "dtype": dtype, "rank_tol": rank_tol,
                "ci_level": ci_level}  # fmt: skip
    write_part(out_part, "convergence", data, job="spectra_convergence_subset", inputs=files.paths(),
               settings=settings)  # fmt: skip
    snap.clear()


def gather_convergence(parts: list, boundaries: list[str], out_tsv, *, inputs=None) -> pd.DataFrame:
    """convergence.tsv of a checkpoint from its subsets' parts (rule ``spectra_convergence_gather``), in size
    order: byte for byte what :func:`write_convergence` writes in one job (its rows are size by size).

    The parts must be the subsets 0, 1, … in order, over `boundaries`, with one grouping of the samples and one
    set of settings, and cover every size of it (more parts than sizes: the extra ones have no rows); with
    `inputs` (the checkpoint's Jacobian files), each computed from them as they are now (``parts.read_parts``)."""
    loaded = read_parts(parts, "convergence", inputs=inputs, job="spectra_convergence_subset")
    if not loaded:
        raise LayergeomError("no convergence parts to gather")
    _same_counts(loaded)
    every = loaded[0].data["sizes"]
    for k, p in enumerate(loaded):
        d = p.data
        if d["subset"] != k or d["sizes"] != every or d["boundaries"] != list(boundaries):
            raise LayergeomError(f"{p.path}: subset {d['subset']} of sizes {d['sizes']} over {d['boundaries']}, not "
                                 f"subset {k} of {every} over the checkpoint's {list(boundaries)}; rerun the "
                                 "spectra_convergence_subset jobs")  # fmt: skip
    if len(loaded) < len(every):
        raise LayergeomError(f"{len(loaded)} convergence parts for the sizes {every}: the config's spectra.n_groups "
                             "is below the Jacobian job's groups; rerun the Jacobian job")  # fmt: skip
    frames = [p.data["table"] for p in loaded if len(p.data["table"])]
    table = pd.concat(frames, ignore_index=True) if frames else loaded[0].data["table"]
    write_tsv(table, out_tsv)
    return table
