"""The spectra table's jobs: :func:`write_spectra` (rule ``spectra_table``) writes ``spectra.tsv`` and
``eigenvalues.tsv`` of a checkpoint in one job; fanned out over blocks of boundaries, :func:`write_spectra_part`
(``spectra_table_part``) per block and :func:`gather_spectra` (``spectra_table_gather``) write the same bytes.

The method: ``spectra.spectra_row`` and ``linear.spectra_intervals``, boundary by boundary (:func:`spectra_rows`).
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
from ..linear import spectra_intervals
from ..spectra import METRICS, eigenvalue_frame, order_columns, rank_tolerance, spectra_row
from .common import BoundaryFiles, _remove_unowned_work, _replicates, _same_counts, snapshots_for

log = logging.getLogger("layergeom")


def _n_samples(files: BoundaryFiles, name: str) -> int:
    return int(files.meta(name)["n_samples"])


def spectra_rows(
    files: BoundaryFiles,
    out,
    *,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    ci_method: str,
    ci_blocks: int | None,
    eigenvalues: bool = True,
    snapshot_s: float | None = None,
    what: str = "spectra",
    device: str = "cpu",
) -> tuple[list[dict], list[pd.DataFrame], np.ndarray, Snapshots]:
    """The spectra.tsv rows and eigenvalue frames of `files`' boundaries in depth order, with the group counts
    they were computed with: each boundary's ``spectra_row``, then its intervals (``linear.spectra_intervals``).

    ``snapshot_s``: save the rows done so far every that many seconds next to `out` (the file the caller
    writes), and resume from them (``resume``), as `what` (the snapshot's and its lock's name in the work
    folder: jobs working beside each other in one folder need their own). Returns (rows, eigenvalue frames, counts, the snapshots): the
    caller clears the snapshots once its output is written. ``device``: where the decompositions and the
    replicates' products run (a torch device string; the snapshots hold the rows, so a job resumes on any).
    """
    counts = files.counts()
    reps = _replicates(counts, ci_blocks, "spectra.tsv")
    if reps is not None:
        log.info("intervals: %s jackknife over %d replicates of %d groups (%s samples), level %g",
                 ci_method, reps.K, len(counts), int(counts.sum()), ci_level)  # fmt: skip
    settings = {"sr_k": sr_k, "dtype": dtype, "rank_tol": rank_tol, "ci_level": ci_level, "ci_method": ci_method,
                "ci_blocks": ci_blocks, "eigenvalues": eigenvalues}  # fmt: skip
    snap = snapshots_for(files, out, what, settings, snapshot_s)
    last = snap.load()
    rows, eig = (last["state"]["rows"], last["state"]["eig"]) if last else ([], [])
    done = last["done"] if last else 0
    for i, name in enumerate(progress(files.names, desc="spectra", unit="boundary")):
        if i < done:  # in the snapshot
            continue
        J = files[name]
        tol = rank_tolerance(J.shape[0], dtype, rank_tol)
        row, dec = spectra_row(name, J, _n_samples(files, name), sr_k=sr_k, tol=tol, device=device)
        if reps is None:
            row |= {f"{m}_ci_{s}": np.nan for m in METRICS for s in ("low", "high")}
        else:
            D = files.deviations(name, J, counts, reps)
            row |= spectra_intervals(J, dec, row, D, reps.weights, tol=tol, ci_level=ci_level, ci_method=ci_method,
                                     device=device)  # fmt: skip
        rows.append(row)
        eig.append(eigenvalue_frame(name, dec, tol))
        log.info("%s: rank %d of %d, %d non-zero modes, cond %.4g [%.4g, %.4g]", name, row["numerical_rank"],
                 J.shape[0], row["n_modes"], row["cond"], row["cond_ci_low"], row["cond_ci_high"])  # fmt: skip
        J = dec = D = None  # released before the next boundary's (its request counts one boundary's arrays)
        snap.save(i + 1, lambda: {"rows": rows, "eig": eig})
    return rows, eig, counts, snap


def write_spectra_tables(rows: list[dict], eig: list[pd.DataFrame], out_tsv, out_eigenvalues=None) -> pd.DataFrame:
    """spectra.tsv (the rows, ``order_columns``) and eigenvalues.tsv (the frames, concatenated) of a checkpoint."""
    table = order_columns(pd.DataFrame(rows))
    write_tsv(table, out_tsv)
    if out_eigenvalues is not None:
        write_tsv(pd.concat(eig, ignore_index=True), out_eigenvalues)
    return table


def write_spectra(
    files: BoundaryFiles,
    out_tsv,
    out_eigenvalues=None,
    *,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    ci_method: str,
    ci_blocks: int | None,
    snapshot_s: float | None = None,
    device: str = "cpu",
) -> pd.DataFrame:
    """spectra.tsv (with jackknife intervals over the sample groups) and the eigenvalues, boundary by boundary
    (:func:`spectra_rows`, :func:`write_spectra_tables`): the table job of a checkpoint in one job.

    ``snapshot_s``: save the rows done so far every that many seconds, and resume from them (``resume``);
    ``device``: where the decompositions and the replicates' products run.
    """
    rows, eig, _, snap = spectra_rows(
        files, out_tsv, sr_k=sr_k, dtype=dtype, rank_tol=rank_tol, ci_level=ci_level, ci_method=ci_method,
        ci_blocks=ci_blocks, eigenvalues=out_eigenvalues is not None, snapshot_s=snapshot_s, device=device,
    )  # fmt: skip
    table = write_spectra_tables(rows, eig, out_tsv, out_eigenvalues)
    snap.clear()
    return table


def _spectra_part_name(out_part) -> str:
    return f"spectra_part_{Path(out_part).stem}"


def write_spectra_part(
    files: BoundaryFiles,
    out_part,
    *,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    ci_method: str,
    ci_blocks: int | None,
    snapshot_s: float | None = None,
    device: str = "cpu",
    siblings: Iterable | None = None,
) -> None:
    """One block of a checkpoint's boundaries (rule ``spectra_table_part``): the rows and eigenvalue frames of
    :func:`spectra_rows` as they are (restored bit for bit, so the gather writes the same bytes) with the
    boundaries and the group counts, in a part file (``layergeom.parts``: arrays and JSON, with its inputs and
    settings) for :func:`gather_spectra`.

    ``snapshot_s``: save the rows done so far every that many seconds, and resume from them (``resume``); the
    parts of a checkpoint share their work folder (``parts/spectra/.partial/``), each with its own snapshot, and
    `siblings` (the outputs of every part job of the current settings) lets a part remove the work of blocks the
    settings no longer have; ``device``: where the decompositions and the replicates' products run.
    """
    _remove_unowned_work(out_part, siblings, _spectra_part_name)
    settings = {"sr_k": sr_k, "dtype": dtype, "rank_tol": rank_tol, "ci_level": ci_level, "ci_method": ci_method,
                "ci_blocks": ci_blocks}  # fmt: skip
    rows, eig, counts, snap = spectra_rows(
        files, out_part, **settings, eigenvalues=True, snapshot_s=snapshot_s, what=_spectra_part_name(out_part),
        device=device,
    )  # fmt: skip
    data = {"boundaries": list(files.names), "counts": [int(c) for c in counts], "rows": rows, "eigenvalues": eig}
    write_part(out_part, "spectra", data, job="spectra_table_part", inputs=files.paths(), settings=settings)
    snap.clear()


def gather_spectra(parts: list, boundaries: list[str], out_tsv, out_eigenvalues=None, *, inputs=None) -> pd.DataFrame:
    """spectra.tsv and eigenvalues.tsv of a checkpoint from its parts (rule ``spectra_table_gather``), in
    boundary order: byte for byte what :func:`write_spectra` writes in one job.

    The parts must cover `boundaries` in order, each once, and share one grouping of the samples (the group
    counts every part's intervals were computed with, as :meth:`BoundaryFiles.counts` checks in one job) and
    their settings; with `inputs` (the checkpoint's Jacobian files), each part must have been computed from them
    as they are now (``parts.read_parts``: a truncated, foreign or stale part is one error naming it).
    """
    loaded = read_parts(parts, "spectra", inputs=inputs, job="spectra_table_part")
    _same_counts(loaded)
    rows, eig, names = [], [], []
    for part in loaded:
        names += part.data["boundaries"]
        rows += part.data["rows"]
        eig += part.data["eigenvalues"]
    if names != list(boundaries):
        raise LayergeomError(f"the spectra parts {[str(p) for p in parts]} hold boundaries {names}, not the "
                             f"checkpoint's {list(boundaries)} in order; rerun the spectra_table_part jobs")  # fmt: skip
    return write_spectra_tables(rows, eig, out_tsv, out_eigenvalues)
