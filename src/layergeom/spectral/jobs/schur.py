"""The Schur surgery's jobs: :func:`write_schur` (rule ``spectra_schur``) writes ``schur.tsv`` of a checkpoint in one
job; fanned out (spectra.boundaries_per_job), :func:`write_schur_prep` (``spectra_schur_prep``) per block of
boundaries, :func:`write_schur_chain` (``spectra_schur_chain``) per product chain (or per depth segment of one:
spectra.chain_segments) and :func:`gather_schur` (``spectra_schur_gather``) write the same bytes. Each job's name
in its work folder (its snapshot and lock) is :func:`_schur_prep_name` or :func:`_schur_chain_name`.

The method: ``layergeom.spectral.schur`` (``schur_surgery``, ``prepare_boundary``, ``step_chain``,
``surgery_rows``) on the Schur forms of ``layergeom.spectral.schur_basis``.
"""

from __future__ import annotations

import logging
import shutil
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ...io import read_tsv, write_tsv
from ...parts import SUFFIX as PART_SUFFIX
from ...parts import read_parts, write_part
from ...resume.snapshots import Snapshots
from ...resume.work_folder import remove_work, work_dir
from ...runtime import LayergeomError, atomic_path, progress
from ..schur import (
    BoundaryStep,
    SurgeryBoundary,
    _chain_states,
    _chains_from,
    alpha_one,
    check_surgery,
    prepare_boundary,
    schur_surgery,
    step_chain,
    surgery_rows,
    surgery_table,
    wants_interval,
)
from ..schur_basis import SchurForm, SchurTangent
from ..settings import (
    SCHUR_VARIANTS,
    schur_alphas,
    schur_chain_name,
    schur_chains,
    schur_order_alphas,
    schur_runs,
)
from ..spectra import rank_tolerance
from .common import BoundaryFiles, _remove_unowned_work, _replicates, snapshots_for

log = logging.getLogger("layergeom")


class _Deviations(Mapping):
    """boundary -> Δ_k of the replicates, computed when read (one boundary at a time)."""

    def __init__(self, files: BoundaryFiles, counts, reps):
        self.files, self.counts, self.reps = files, counts, reps

    def __getitem__(self, name):
        return self.files.deviations(name, self.files[name], self.counts, self.reps)

    def __iter__(self):
        return iter(self.files.names)

    def __len__(self):
        return len(self.files.names)


#: the arrays of one boundary in a prep's .npz (``b{i}.{name}``: i its place in the block): the Schur form
#: (Q, λ, N, the number of non-zero modes), the order sampler's eigenvectors Y (orders, where usable), the random
#: control R' = Q_c N' Q_cᴴ (a run with the random N') and the tangents (intervals: δJ₀, δ‖N‖/‖N‖, and δR' with
#: a random control in schur_ci_controls)
SCHUR_PREP_ARRAYS = ("Q", "lam", "N", "n_nonzero", "Y", "Rr", "dJ0", "dnorm_rel", "dRr")


def _schur_prep_name(out_part) -> str:
    """A prep job's name in its work folder (its snapshot, lock and boundaries' arrays): by its block."""
    return f"schur_prep_{Path(out_part).stem}"


def _schur_chain_name(out_part) -> str:
    """A chain job's name in its work folder: by its output, the chain and its segment (``update_none_a0.5.s1``)."""
    name = Path(out_part).name
    return f"schur_chain_{name[: -len(PART_SUFFIX)] if name.endswith(PART_SUFFIX) else name}"


def _order_alphas(alphas, order_alphas) -> list[float]:
    """``settings.schur_order_alphas``, its error as one clear line (LayergeomError)."""
    try:
        return schur_order_alphas(alphas, order_alphas)
    except ValueError as e:
        raise LayergeomError(str(e)) from None


def _schur_setup(files: BoundaryFiles, ci_blocks: int, ci_controls, dtype: str, rank_tol, what: str):
    """(τ, the replicates or None, the group counts, ci_controls sorted) of a Schur job."""
    d = files[files.names[0]].shape[0]
    counts = files.counts()
    reps = _replicates(counts, ci_blocks, what) if ci_blocks != 0 else None
    if reps is not None:
        log.info("Schur intervals: linearised jackknife over %d blocks of %d groups, controls %s",
                 reps.K, len(counts), ", ".join(ci_controls))  # fmt: skip
    return rank_tolerance(d, dtype, rank_tol), reps, counts, sorted(ci_controls)


def _schur_settings(dtype, rank_tol, ci_level, ci_blocks, ci_controls, kwargs) -> dict:
    return {"dtype": dtype, "rank_tol": rank_tol, "ci_level": ci_level, "ci_blocks": ci_blocks,
            "ci_controls": ci_controls, **{k: sorted(v) if isinstance(v, (set, frozenset)) else
                                           list(v) if isinstance(v, tuple) else v
                                           for k, v in kwargs.items()}}  # fmt: skip


def write_schur(
    files: BoundaryFiles,
    out_tsv,
    cumulative,
    *,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    ci_blocks: int,
    ci_controls: Iterable[str],
    snapshot_s: float | None = None,
    device: str = "cpu",
    **kwargs,
) -> pd.DataFrame:
    """schur.tsv (both cumulative variants) with jackknife intervals over `ci_blocks` blocks of sample groups; the
    rows of α = 1 with the own N (J̄ itself) from `cumulative`, the checkpoint's cumulative.tsv (``schur.alpha_one``).

    ``ci_blocks`` 0 writes no intervals. ``snapshot_s``: save the products every that many seconds, and resume
    from them (``resume``). ``kwargs`` go to ``schur_surgery`` (alphas, seed, sr_k, boundary_metrics, orders,
    order_alphas, variants). ``device``: where the decompositions and the product chains compute (``workflow.job_device``).
    """
    _order_alphas(kwargs["alphas"], kwargs["order_alphas"])  # a bad spectra.schur_order_alphas: one clear line
    tol, reps, counts, ci_controls = _schur_setup(files, ci_blocks, ci_controls, dtype, rank_tol, "schur.tsv")
    devs, weights = (None, None) if reps is None else (_Deviations(files, counts, reps), reps.weights)
    settings = _schur_settings(dtype, rank_tol, ci_level, ci_blocks, ci_controls, kwargs)
    snap = snapshots_for(files, out_tsv, "schur", settings, snapshot_s)
    table = schur_surgery(files, tol=tol, deviations=devs, weights=weights, ci_level=ci_level,
                          ci_controls=ci_controls, cumulative=read_tsv(cumulative, exact=True), snapshots=snap,
                          device=device, **kwargs)  # fmt: skip
    write_tsv(table, out_tsv)
    snap.clear()
    return table


class _NpzWriter:
    """Arrays written one at a time into an uncompressed .npz (what ``np.savez`` writes; ``np.load`` reads one
    member without the others), so a prep job holds one boundary's arrays at a time."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True)

    def put(self, key: str, array) -> None:
        with self.zip.open(f"{key}.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array(fh, np.asanyarray(array), allow_pickle=False)

    def copy_from(self, path, prefix: str) -> None:
        """Every array of the .npz at `path`, as it is stored, under `prefix` + its name."""
        with zipfile.ZipFile(path) as src:
            for member in src.namelist():
                with src.open(member) as fin, self.zip.open(prefix + member, "w", force_zip64=True) as fout:
                    shutil.copyfileobj(fin, fout, 1 << 24)

    def close(self) -> None:
        self.zip.close()


def write_schur_prep(
    files: BoundaryFiles,
    out_part,
    out_arrays,
    *,
    first: int,
    alphas,
    seed: int,
    sr_k: int,
    dtype: str,
    rank_tol: float | None,
    boundary_metrics: str,
    orders: int,
    ci_blocks: int,
    ci_controls: Iterable[str],
    order_alphas,
    snapshot_s: float | None = None,
    device: str = "cpu",
    siblings: Iterable | None = None,
) -> None:
    """One block of a checkpoint's boundaries for the fanned-out Schur surgery (rule ``spectra_schur_prep``):
    ``schur.prepare_boundary`` of each (the single job's per-boundary step; `first` is the depth index of the
    block's first boundary: it seeds the control N' and the random orders). `out_arrays` (.npz) gets what the
    chains read and cannot recompute cheaply (``SCHUR_PREP_ARRAYS``, lossless); `out_part` (a part file,
    ``layergeom.parts``: arrays and JSON with the record of this job) the records the gather writes into
    schur.tsv (the b_* metrics, ‖N‖_F), the boundaries and the group counts.

    Each boundary's arrays go into the work folder (``parts/schur/prep/.partial/``) as it finishes, then into
    `out_arrays` at the end. ``snapshot_s``: save the records done so far every that many seconds, and resume
    after them (``resume``; their boundaries' arrays are in the work folder). ``device``: where the
    decompositions run. `siblings`: the record parts of every block of the current settings (the work a killed
    prep of a block they no longer have left in the folder is removed).
    """
    check_surgery(boundary_metrics, orders)
    spread = _order_alphas(alphas, order_alphas)
    tol, reps, counts, ci_controls = _schur_setup(files, ci_blocks, ci_controls, dtype, rank_tol, "schur.tsv")
    what = _schur_prep_name(out_part)
    _remove_unowned_work(out_part, siblings, _schur_prep_name)
    common = _schur_settings(dtype, rank_tol, ci_level=None, ci_blocks=ci_blocks, ci_controls=ci_controls,
                             kwargs={"alphas": list(alphas), "seed": seed, "sr_k": sr_k,
                                     "boundary_metrics": boundary_metrics, "orders": orders,
                                     "order_alphas": spread})  # fmt: skip
    settings = common | {"first": first}
    snap = snapshots_for(files, out_part, what, settings, snapshot_s)
    work = work_dir(out_part)
    done = [work / f"{what}.b{i}.npz" for i in range(len(files.names))]  # each boundary's arrays
    last = snap.load()
    records = [] if last is None else last["state"]["records"]
    if any(not p.exists() for p in done[: len(records)]):  # a snapshot without its arrays: start afresh
        records = []
    for i, name in enumerate(progress(files.names, desc="schur prep", unit="boundary")):
        if i < len(records):
            continue
        J = files[name]
        D = None if reps is None else files.deviations(name, J, counts, reps)
        prep = prepare_boundary(name, J, D, index=first + i, seed=seed, tol=tol, sr_k=sr_k, alphas=alphas,
                                boundary_metrics=boundary_metrics, orders=orders, ci_controls=ci_controls,
                                order_alphas=spread, device=device)  # fmt: skip
        form, tan = prep.boundary.form, prep.tangent
        arrays = {"Q": form.Q, "lam": form.lam, "N": form.N, "n_nonzero": np.int64(form.n_nonzero), "Y": prep.Y}
        if any(c == "random" for _, c in schur_runs(alphas)):
            arrays["Rr"] = prep.boundary.R_rand
        if tan is not None:
            arrays |= {"dJ0": tan.dJ0, "dnorm_rel": tan.dnorm_rel, "dRr": tan.dRr}
        with atomic_path(done[i]) as tmp:
            npz = _NpzWriter(tmp)
            try:
                for key, a in arrays.items():
                    if a is not None:
                        npz.put(key, a)
            finally:
                npz.close()
        records.append(prep.record)
        J = D = prep = form = tan = arrays = None  # released before the next boundary's (as its request counts)
        snap.save(i + 1, lambda: {"records": records})
    with atomic_path(out_arrays) as tmp:  # the block's arrays, member by member: b{i}.{key}
        npz = _NpzWriter(tmp)
        try:
            for i, path in enumerate(done):
                npz.copy_from(path, f"b{i}.")
        finally:
            npz.close()
    data = {"boundaries": list(files.names), "first": int(first), "counts": [int(c) for c in counts],
            "records": records}  # fmt: skip
    write_part(out_part, "schur_prep", data, job="spectra_schur_prep", inputs=files.paths(), settings=common)
    remove_work(work, [p.name for p in done])
    snap.clear()


class _PrepArrays:
    """boundary index -> its prep arrays (``write_schur_prep``'s .npz of its block), read when asked."""

    def __init__(self, arrays: list, blocks: list[list[str]]):
        self.where = [(path, i) for path, block in zip(arrays, blocks) for i in range(len(block))]

    def read(self, bi: int, keys) -> dict:
        path, i = self.where[bi]
        with np.load(path, allow_pickle=False) as z:
            return {k: z[f"b{i}.{k}"] if f"b{i}.{k}.npy" in z.zip.namelist() else None for k in keys}


def write_schur_chain(
    files: BoundaryFiles,
    prep_arrays: list,
    blocks: list[list[str]],
    out_part,
    *,
    chain: str,
    alphas,
    seed: int,
    orders: int,
    dtype: str,
    rank_tol: float | None,
    ci_level: float,
    ci_blocks: int,
    ci_controls: Iterable[str],
    order_alphas,
    segment: tuple[int, int] | None = None,
    snapshot_s: float | None = None,
    device: str = "cpu",
    siblings: Iterable | None = None,
) -> None:
    """One product chain of the Schur surgery through every boundary in depth order (rule ``spectra_schur_chain``):
    `chain` a name of ``settings.schur_chains`` (``schur_chain_name``), stepped by ``schur.step_chain`` (the
    single job's) on the operators rebuilt from the prep arrays (`prep_arrays`, one .npz per block of
    `blocks`), J̄ and the replicates' deviations from `files` (every boundary). Writes its results per depth
    in a part file (``layergeom.parts``) for ``gather_schur``.

    ``segment`` (start, end): only the depths start..end−1 (spectra.chain_segments; ``settings.
    chain_segment_bounds``): the products are advanced through the depths before `start` without their SVDs
    (``step_chain(..., advance=True)``: the same products in the same order), then stepped; the part holds
    the results of its own depths and its bounds. None: every depth.

    ``snapshot_s``: save the products every that many seconds, and resume from them (``resume``); the chains of
    a checkpoint share their work folder (``parts/schur/chains/.partial/``), each (segment) with its own
    snapshot, which covers its prefix as well (`siblings`: the outputs of every chain job of the current
    settings; the work of others, such as a chain or segment the settings no longer have, is removed).
    ``device``: where the product chain computes (it resumes on any).
    """

    alphas = schur_alphas(alphas)
    spread = _order_alphas(alphas, order_alphas)
    plan = {schur_chain_name(c): c for c in schur_chains(alphas, orders, SCHUR_VARIANTS, spread)}
    if chain not in plan:
        raise LayergeomError(f"no Schur chain '{chain}' at alphas {alphas}, {orders} orders at α {spread}; one of "
                             f"{sorted(plan)}")  # fmt: skip
    spec = plan[chain]
    if [n for block in blocks for n in block] != list(files.names):
        raise LayergeomError(f"the Schur prep blocks {blocks} do not hold the boundaries {files.names} in order")
    n = len(files.names)
    first, end = (0, n) if segment is None else (int(segment[0]), int(segment[1]))
    if not 0 <= first < end <= n:
        raise LayergeomError(f"Schur chain '{chain}': segment [{first}, {end}) is not a depth range of {n} boundaries")
    _, reps, counts, ci_controls = _schur_setup(files, ci_blocks, ci_controls, dtype, rank_tol, "schur.tsv")
    weights = None if reps is None else reps.weights
    prep = _PrepArrays(prep_arrays, blocks)
    _remove_unowned_work(out_part, siblings, _schur_chain_name)
    common = _schur_settings(dtype, rank_tol, ci_level, ci_blocks, ci_controls,
                             {"alphas": alphas, "seed": seed, "orders": orders, "order_alphas": spread})  # fmt: skip
    settings = common | {"chain": chain} | ({} if segment is None else {"segment": [first, end]})
    what = _schur_chain_name(out_part)
    snap = Snapshots.for_job(out_part, what, [*files.paths(), *prep_arrays], settings, snapshot_s)
    last = snap.load()
    start, results, chains = 0, [], {}
    if last is not None:
        start, results, chains = last["done"], last["state"]["results"], _chains_from(last["state"]["chains"], device)
    # deviations where the chain carries an interval; the Schur form's tangents unless it is J̄ itself
    needs_D = reps is not None and spec[0] == "run" and wants_interval(spec[2], spec[3], ci_controls)
    random = spec[0] == "run" and spec[3] == "random"
    tangent = ["dJ0", "dnorm_rel", *(["dRr"] if random else [])] if needs_D and spec[2:] != (1.0, "none") else []
    keys = ["Q", "lam", "N", "n_nonzero", *(["Y"] if spec[0] == "order" else []), *(["Rr"] if random else []),
            *tangent]  # fmt: skip
    for bi in progress(range(start, end), total=end, initial=start, desc=f"schur {chain}",
                       unit="boundary"):  # fmt: skip
        name = files.names[bi]
        J = files[name]
        a = prep.read(bi, keys)
        form = SchurForm(Q=a["Q"], lam=a["lam"], N=a["N"], n_nonzero=int(a["n_nonzero"]))
        b = SurgeryBoundary(J=np.asarray(J, dtype=np.float64), form=form, seed=seed, index=bi, Rr=a.get("Rr"))
        tan = None
        if a.get("dJ0") is not None:
            tan = SchurTangent(W=None, dlam=None, dJ0=a["dJ0"], dnorm_rel=a["dnorm_rel"], dRr=a.get("dRr"))
        D = files.deviations(name, J, counts, reps) if needs_D else None
        st = BoundaryStep(b, tan, D, a.get("Y"), orders, ci_controls)
        step = {"alphas": alphas, "weights": weights, "ci_level": ci_level, "device": device,
                "variants": SCHUR_VARIANTS, "order_alphas": spread}  # fmt: skip
        if bi < first:  # the prefix: the products only
            step_chain(spec, chains, st, advance=True, **step)
        else:
            results.append(step_chain(spec, chains, st, **step))
        del st, b, form, a, tan, D
        snap.save(bi + 1, lambda: {"results": results, "chains": _chain_states(chains)})
    data = {"chain": list(spec), "boundaries": list(files.names), "counts": [int(c) for c in counts],
            "results": results, "start": first, "end": end}  # fmt: skip
    write_part(out_part, "schur_chain", data, job="spectra_schur_chain", inputs=files.paths(), settings=common)
    snap.clear()


def gather_schur(
    preps: list,
    chains: list,
    boundaries: list[str],
    out_tsv,
    cumulative,
    *,
    alphas,
    orders: int,
    order_alphas,
    segments: int | Mapping[str, int] = 1,
    inputs=None,
) -> pd.DataFrame:
    """schur.tsv of a checkpoint from its prep records, its chains' results and (α = 1, own N) its cumulative.tsv
    (rule ``spectra_schur_gather``): byte for byte what :func:`write_schur` writes in one job (``schur.surgery_rows``, ``surgery_table``).

    The preps must cover `boundaries` in order, each once; every chain of ``schur_chains`` must be there, over
    the same boundaries, as min(its count, boundaries) parts whose depth ranges cover every depth once, in order
    (their results concatenated); all with one grouping of the samples. `segments`: the count of every chain,
    or each chain's by its name (``schur_chain_name``; spectra.chain_segments splits the costlier chains into
    more jobs, ``resources.schur_chain_segments``). The parts are read by ``parts.read_parts`` (one clear error
    for a truncated, pickled, foreign or stale part, or one of other settings than its siblings'; with `inputs`,
    the checkpoint's Jacobian files, each computed from them as they are now)."""
    inputs = None if inputs is None else list(inputs)
    prep_parts = [(p.path, p.data) for p in read_parts(preps, "schur_prep", inputs=inputs, job="spectra_schur_prep")]
    chain_parts = [(p.path, p.data) for p in read_parts(chains, "schur_chain", inputs=inputs,
                                                         job="spectra_schur_chain")]  # fmt: skip
    records, names, first = [], [], None

    def same_counts(path, part):
        nonlocal first
        if first is None:
            first = (path, part["counts"])
        elif part["counts"] != first[1]:
            raise LayergeomError(f"{path}: group_counts {part['counts']} differ from {first[0]}'s {first[1]}; the "
                                 "intervals need one grouping of the samples per checkpoint: rerun the Jacobian job")  # fmt: skip

    for path, part in prep_parts:
        same_counts(path, part)
        names += part["boundaries"]
        records += part["records"]
    if names != list(boundaries):
        raise LayergeomError(f"the Schur prep parts {[str(p) for p in preps]} hold boundaries {names}, not the "
                             f"checkpoint's {list(boundaries)} in order; rerun the spectra_schur_prep jobs")  # fmt: skip
    alphas = schur_alphas(alphas)
    spread = _order_alphas(alphas, order_alphas)
    plan = schur_chains(alphas, orders, SCHUR_VARIANTS, spread)
    n, pieces = len(names), {}
    for path, part in chain_parts:
        same_counts(path, part)
        spec = tuple(part["chain"])
        start, end = int(part.get("start", 0)), int(part.get("end", n))
        if part["boundaries"] != names or len(part["results"]) != end - start:
            raise LayergeomError(f"{path}: chain {spec} over boundaries {part['boundaries']} with "
                                 f"{len(part['results'])} results for depths [{start}, {end}) (not the checkpoint's "
                                 f"{names}); rerun the spectra_schur_chain jobs")  # fmt: skip
        pieces.setdefault(spec, []).append((start, end, path, part["results"]))
    results = {}
    for spec, got in pieces.items():
        if isinstance(segments, Mapping):  # a chain not of the plan: refused below
            count = segments.get(schur_chain_name(spec), 1) if spec in plan else 1
        else:
            count = segments
        want = min(max(1, int(count)), n)
        got.sort(key=lambda p: (p[0], p[1]))
        at = 0
        for start, end, path, _ in got:
            if start != at:
                raise LayergeomError(f"{path}: chain {spec} segment [{start}, {end}) does not start at depth {at} "
                                     f"({'a gap' if start > at else 'an overlap'}); its segments "
                                     f"{[(p[0], p[1]) for p in got]} must cover depths 0..{n - 1} once, in order: "
                                     "rerun the spectra_schur_chain jobs")  # fmt: skip
            at = end
        if at != n or len(got) != want:
            raise LayergeomError(f"the Schur chain {spec} has segments {[(p[0], p[1]) for p in got]}, not {want} "
                                 f"covering depths 0..{n - 1}; rerun the spectra_schur_chain jobs")  # fmt: skip
        results[spec] = [r for *_, res in got for r in res]
    if set(results) != set(plan):
        raise LayergeomError(f"the Schur chain parts hold {sorted(map(str, results))}, not the chains "
                             f"{sorted(map(str, plan))}; rerun the spectra_schur_chain jobs")  # fmt: skip
    if 1.0 in alphas:  # J̄ itself: cumulative.tsv's rows (``schur.alpha_one``)
        results |= alpha_one(read_tsv(cumulative, exact=True), names, SCHUR_VARIANTS)
    rows = surgery_rows(records, results, alphas=alphas, variants=list(SCHUR_VARIANTS), orders=orders,
                        order_alphas=spread)  # fmt: skip
    table = surgery_table(rows, list(SCHUR_VARIANTS))
    write_tsv(table, out_tsv)
    return table
