"""Which per-checkpoint jobs run long at papers scale: one boundary of each, timed at d = 4096 (run by hand).

The spectral tables and the topology graph job each loop over a checkpoint's boundaries (Llama-3.1-8B and
OLMo-3-7B: 64, Gemma-4-E4B: 126), so a checkpoint costs about one boundary's time × the number of boundaries.
This bench times ONE boundary of each with the project's own functions and the settings of
config/papers.yaml, on synthetic matrices of papers width d = 4096 (Llama-3.1-8B, OLMo-3-7B):

- ``spectra_table``: the deviations Δ_k of the K = n_groups jackknife replicates, ``decompose`` (eigenvectors
  and full SVD), ``spectra_row`` and ``spectra_intervals`` (metrics, linearised replicates), as ``write_spectra`` per boundary;
- ``spectra_cumulative``: ``cumulative_rows`` on two boundaries (both variants, the K deviations), the second
  timed: the step that multiplies;
- ``spectra_schur``: ``schur_surgery`` on two boundaries with the config's α grid, ``schur_ci_blocks`` and
  ``schur_ci_controls``, the second timed; at d = 2048 (one boundary at 4096 takes about a quarter of an hour)
  and extrapolated as d³;
- ``spectra_convergence``: the inner step of ``convergence_rows`` per subset size (its loop body, rebuilt
  from the same functions: the function has no per-boundary entry point) for a plain boundary (products only)
  and an edge boundary (one of the 2·n_edge + 1 whose metrics are recomputed), and the final step's extra SVD;
- ``topology_graph``: ``boundary_topology`` on a float32 activation memmap of windows × window_tokens rows
  (the config's), a signed factor model as in bench_topology.py.

Matrices: J̄ = 0.5·Gaussian/√d (spectral norm ≈ 1) plus a rank-32 part of norm ≈ 1 (full rank, like an MLP
boundary), G group means J̄ + 2 % noise in float32, the group sizes of 1000 windows × 127 non-BOS tokens.
The GEMM rates and the LAPACK calls the jobs spend their time in are timed too, so that readers can scale the
numbers to their node. Threads: the BLAS default (every core; the jobs do not pin numpy's threads).
Writes bench/results/long_jobs.json and long_jobs.md.

    OMP_WAIT_POLICY=PASSIVE python bench/bench_long_jobs.py [--d 4096] [--small-d 2048] [--schur-dims 1024 2048]
        [--device cpu|cuda] [--out DIR]

``--device cuda`` times the same functions on a GPU (each computes through torch on the device it is given, as a
job does with ``workflow.job_device``): bench/gpu_check.sh runs it at d = 4096, one boundary per stage, and the
summary's per-checkpoint hours then project a whole checkpoint's spectral work on that GPU.

``--jobs schur_advance`` (alone) times only the advance-only chain step per cost class at --d (what a chain
segment's job runs through the depths before its own: spectra.chain_segments) and merges it into the existing
long_jobs.json, then renders it; ``--render`` recomputes the totals and the critical path with the config's
spectra.chain_segments (read from the config file at render time).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy
import scipy.linalg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))  # shapes.py

from bench_topology import synthetic_states  # noqa: E402  (the signed factor model of bench/bench_topology.py)
from shapes import machine_info  # noqa: E402  (bench/shapes.py)

from layergeom import config as lgconfig  # noqa: E402
from layergeom.names import boundaries_for  # noqa: E402
from layergeom.spectral import intervals, pipeline  # noqa: E402
from layergeom.spectral.convergence import VARIANTS  # noqa: E402
from layergeom.spectral.cumulative import ProductChain, cumulative_rows, step_operator, tangent_floor  # noqa: E402
from layergeom.spectral.linear import metric_replicates, spectra_intervals  # noqa: E402
from layergeom.spectral.schur import BoundaryStep, prepare_boundary, schur_surgery, step_chain, wants_interval  # noqa: E402
from layergeom.spectral.settings import schur_alphas, schur_chains  # noqa: E402
from layergeom.spectral.spectra import decompose, eigenvalue_frame, rank_tolerance, spectra_row, spectral_metrics  # noqa: E402
from layergeom.topology.communities import boundary_topology  # noqa: E402
from layergeom.topology.graphs import streamed_correlation  # noqa: E402

#: Paper B's models in config/papers.yaml
MODELS = ("llama-3.1-8b", "olmo-3-7b", "gemma-4-e4b")
LIMIT_MIN = 15.0  # a per-checkpoint job longer than this must be resumable


LOAD_MAX = [0.0]  # the highest 1-min load average seen at a log line


def log(msg: str) -> None:
    load = os.getloadavg()[0]
    LOAD_MAX[0] = max(LOAD_MAX[0], load)
    print(f"[{time.strftime('%H:%M:%S')}] {msg} (load {load:.1f})", flush=True)


def timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


# ---- synthetic J̄ and group means ----------------------------------------------------------------------
def group_counts(corpus: dict, spectra: dict) -> np.ndarray:
    """Samples per group: the sample windows (n_samples of n_windows) in n_groups blocks, window_tokens − 1
    non-BOS tokens each (spectra.samples: all, the isolated default), as ``jacobians.sample_groups``."""
    windows = min(int(spectra["n_samples"]), int(corpus["n_windows"]))
    blocks = np.array_split(np.arange(windows), min(int(spectra["n_groups"]), windows))
    return np.array([len(b) * (int(corpus["window_tokens"]) - 1) for b in blocks], dtype=np.int64)


def boundary(d: int, counts: np.ndarray, seed: int, rank: int = 32, noise: float = 0.02):
    """(J̄ float64 (d, d), group means float32 (G, d, d)): a Gaussian bulk of spectral norm ≈ 1 plus a rank-`rank`
    part of norm ≈ 1; each group mean is the bulk + low-rank matrix plus `noise` of the bulk; J̄ their weighted mean
    (as the Jacobian job writes it)."""
    rng = np.random.default_rng(seed)
    base = 0.5 * rng.standard_normal((d, d)) / np.sqrt(d)
    base += rng.standard_normal((d, rank)) @ rng.standard_normal((rank, d)) / d
    groups = np.empty((len(counts), d, d), dtype=np.float32)
    for g in range(len(counts)):
        groups[g] = base + noise * 0.5 * rng.standard_normal((d, d)) / np.sqrt(d)
    mean = np.tensordot(counts / counts.sum(), groups.astype(np.float64), axes=1)
    return mean, groups


# ---- the machine: GEMM rates and the LAPACK calls of the jobs --------------------------------------------
def rates(d: int, repeats: int = 3) -> dict:
    """Best-of-`repeats` d×d matrix products (GFLOP/s; a complex product counts 8d³ real flops) and one of
    each decomposition the spectral jobs call (seconds)."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    C = A + 1j * B
    out = {}
    for name, x, flops in (("fp64", A, 2), ("fp32", A.astype(np.float32), 2), ("complex128", C, 8),
                           ("complex64", C.astype(np.complex64), 8)):  # fmt: skip
        best = min(timed(np.matmul, x, x)[1] for _ in range(repeats))
        out[f"gemm_{name}_gflops"] = round(flops * d**3 / best / 1e9, 1)
    for name, fn in (("svd_real_s", lambda: np.linalg.svd(A)), ("svd_complex_s", lambda: np.linalg.svd(C)),
                     ("eig_vectors_s", lambda: scipy.linalg.eig(A, left=True, right=True)),
                     ("eigvals_s", lambda: np.linalg.eigvals(A)),
                     ("schur_complex_s", lambda: scipy.linalg.rsf2csf(*scipy.linalg.schur(A, output="real"))),
                     ):  # fmt: skip
        out[name] = round(timed(fn)[1], 2)
    return out


# ---- the jobs, one boundary each ---------------------------------------------------------------------------
def bench_spectra(J, groups, counts, cfg, device: str = "cpu") -> dict:
    """write_spectra's work on one boundary: deviations, decomposition, metrics and linearised replicates."""
    d = J.shape[0]
    reps = intervals.replicates(counts, cfg["ci_blocks"])
    tol = rank_tolerance(d, cfg["dtype"], cfg["rank_tol"])
    t = {"K": reps.K}
    D, t["deviations_s"] = timed(intervals.deviations, J, groups, counts, reps)
    dec, t["decompose_s"] = timed(decompose, J, device=device)

    def row_with_intervals():  # as write_spectra: the row, then its intervals
        row, _ = spectra_row("L0.mlp", J, int(counts.sum()), sr_k=cfg["sr_k"], tol=tol, dec=dec, device=device)
        return row | spectra_intervals(J, dec, row, D, reps.weights, tol=tol, ci_level=cfg["ci_level"],
                                       ci_method=cfg["ci_method"], device=device)  # fmt: skip

    row, t["metrics_and_replicates_s"] = timed(row_with_intervals)
    _, t["eigenvalue_frame_s"] = timed(eigenvalue_frame, "L0.mlp", dec, tol)
    t["boundary_s"] = t["deviations_s"] + t["decompose_s"] + t["metrics_and_replicates_s"] + t["eigenvalue_frame_s"]
    t["henrici"] = row["henrici"]  # < 0.1 would make each replicate's Henrici departure an exact eigvals
    return t


def bench_cumulative(bounds, counts, cfg, device: str = "cpu") -> dict:
    """cumulative_rows (both variants, with intervals) on two boundaries; the second one timed."""
    reps = intervals.replicates(counts, cfg["ci_blocks"])
    marks = []

    def steps():  # as write_cumulative: the deviations computed as the boundary is read
        for i, (J, groups) in enumerate(bounds):
            marks.append(time.perf_counter())
            yield f"L{i}.mlp", J, intervals.deviations(J, groups, counts, reps)

    _, total = timed(cumulative_rows, steps(), VARIANTS, weights=reps.weights, ci_level=cfg["ci_level"],
                     device=device)  # fmt: skip
    end = marks[0] + total
    return {"K": reps.K, "boundary1_s": marks[1] - marks[0], "boundary_s": end - marks[1]}


class _Timestamped(dict):
    """A mapping that notes when each key is first read (schur_surgery reads J̄_b as a boundary starts)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read_at = {}

    def __getitem__(self, key):
        self.read_at.setdefault(key, time.perf_counter())
        return super().__getitem__(key)


def bench_schur(bounds, counts, cfg, seed: int, device: str = "cpu") -> dict:
    """schur_surgery with the config's α, Schur blocks and controls on two boundaries; the second one timed."""
    d = bounds[0][0].shape[0]
    reps = intervals.replicates(counts, cfg["schur_ci_blocks"]) if cfg["schur_ci_blocks"] else None
    names = [f"L{i}.mlp" for i in range(len(bounds))]
    jac = _Timestamped({n: J for n, (J, _) in zip(names, bounds)})

    class Devs(dict):  # as pipeline._Deviations: computed when read
        def __getitem__(self, name):
            J, groups = bounds[names.index(name)]
            return intervals.deviations(J, groups, counts, reps)

    devs = None if reps is None else Devs.fromkeys(names)
    t0 = time.perf_counter()
    schur_surgery(
        jac, alphas=cfg["alphas"], seed=seed, sr_k=cfg["sr_k"], tol=rank_tolerance(d, cfg["dtype"], cfg["rank_tol"]),
        boundary_metrics=cfg["schur_boundary_metrics"], orders=cfg["schur_orders"], deviations=devs,
        weights=None if reps is None else reps.weights, ci_level=cfg["ci_level"], ci_controls=cfg["schur_ci_controls"],
        device=device,
    )  # fmt: skip
    end = time.perf_counter()
    b2 = jac.read_at[names[1]]
    return {"d": d, "K": 0 if reps is None else reps.K, "boundary1_s": b2 - t0, "boundary_s": end - b2}


def chain_class(chain: tuple, ci_controls, intervals: bool) -> str:
    """The cost class of one Schur chain (``settings.schur_chains``): ``order`` (a reordered normal part and a
    product per α < 1, singular values only), ``real`` (J̄ itself: real products, tangents when intervals are on),
    ``tangents`` (a complex J(α) with its replicates' tangents: products, a full SVD) or ``plain`` (a complex
    J(α) without tangents: a product and singular values)."""
    if chain[0] == "order":
        return "order"
    _, _, alpha, control = chain
    if alpha == 1 and control == "none":
        return "real"
    return "tangents" if intervals and wants_interval(alpha, control, set(ci_controls)) else "plain"


def bench_schur_chains(bounds, counts, cfg, seed: int, device: str = "cpu") -> dict:
    """The fanned-out Schur surgery's steps at the bench width, one boundary each: ``prepare_boundary`` (the prep
    job's per-boundary work) and one step of a chain of every cost class (``chain_class``) as a chain job takes it
    (its operator formed for it alone), the second boundary timed. Per boundary of one job: prep + Σ_class
    (chains of the class × its step)."""
    d = bounds[0][0].shape[0]
    reps = intervals.replicates(counts, cfg["schur_ci_blocks"]) if cfg["schur_ci_blocks"] else None
    tol = rank_tolerance(d, cfg["dtype"], cfg["rank_tol"])
    alphas, orders = schur_alphas(cfg["alphas"]), int(cfg["schur_orders"])
    plan = schur_chains(alphas, orders)
    ci = cfg["schur_ci_controls"]
    counts_by_class = {}
    for ch in plan:
        counts_by_class[chain_class(ch, ci, reps is not None)] = (
            counts_by_class.get(chain_class(ch, ci, reps is not None), 0) + 1
        )
    example = {}
    for ch in plan:  # the first chain of each class, update variant
        example.setdefault(chain_class(ch, ci, reps is not None), ch)
    preps, Ds, prep_s = [], [], 0.0
    for bi, (J, groups) in enumerate(bounds):
        D = None if reps is None else intervals.deviations(J, groups, counts, reps)
        prep, t = timed(prepare_boundary, f"L{bi}.mlp", J, D, index=bi, seed=seed, tol=tol, sr_k=cfg["sr_k"],
                        alphas=alphas, boundary_metrics=cfg["schur_boundary_metrics"], orders=orders,
                        ci_controls=ci, device=device)  # fmt: skip
        preps.append(prep)
        Ds.append(D)
        prep_s = t
        log(f"schur prep d={d} boundary {bi + 1}: {t:.1f} s")
    step_s = {}
    for cls, ch in example.items():
        chains = {}
        for bi, prep in enumerate(preps):
            st = BoundaryStep(prep.boundary, prep.tangent, Ds[bi], prep.Y, orders, ci)
            _, t = timed(step_chain, ch, chains, st, alphas=alphas, weights=None if reps is None else reps.weights,
                         ci_level=cfg["ci_level"], device=device)  # fmt: skip
        step_s[cls] = t
        log(f"schur chain step d={d} {cls} ({ch}): {t:.1f} s")
    boundary_s = prep_s + sum(counts_by_class[c] * step_s[c] for c in step_s)
    return {"d": d, "K": 0 if reps is None else reps.K, "prep_s": prep_s, "step_s": step_s,
            "chains": counts_by_class, "boundary_s": boundary_s}  # fmt: skip


def bench_schur_advance(bound, counts, cfg, seed: int, device: str = "cpu") -> dict:
    """The advance-only step of a chain of every cost class (``chain_class``) at the bench width: what a chain
    segment's job runs through the depths before its own (``step_chain(..., advance=True)``: the operator and
    its tangents formed as for a step, the products, no SVD). One boundary is prepared (``prepare_boundary``)
    and advanced twice, as a chain job takes it (a BoundaryStep per depth), the second timed (the first copies
    M: no product). Seconds per class (an order's: all its α < 1), as ``bench_schur_chains``' ``step_s``."""
    J, groups = bound
    d = J.shape[0]
    reps = intervals.replicates(counts, cfg["schur_ci_blocks"]) if cfg["schur_ci_blocks"] else None
    tol = rank_tolerance(d, cfg["dtype"], cfg["rank_tol"])
    alphas, orders = schur_alphas(cfg["alphas"]), int(cfg["schur_orders"])
    ci = cfg["schur_ci_controls"]
    example = {}
    for ch in schur_chains(alphas, orders):  # the first chain of each class, update variant
        example.setdefault(chain_class(ch, ci, reps is not None), ch)
    D = None if reps is None else intervals.deviations(J, groups, counts, reps)
    prep, t = timed(prepare_boundary, "L0.mlp", J, D, index=0, seed=seed, tol=tol, sr_k=cfg["sr_k"], alphas=alphas,
                    boundary_metrics=cfg["schur_boundary_metrics"], orders=orders, ci_controls=ci,
                    device=device)  # fmt: skip
    log(f"schur prep d={d} (for the advance steps): {t:.1f} s")
    advance_s = {}
    for cls, ch in example.items():
        chains = {}
        for _ in range(2):
            st = BoundaryStep(prep.boundary, prep.tangent, D, prep.Y, orders, ci)
            _, t = timed(step_chain, ch, chains, st, alphas=alphas, weights=None if reps is None else reps.weights,
                         ci_level=cfg["ci_level"], device=device, advance=True)  # fmt: skip
            del st
        advance_s[cls] = t
        log(f"schur chain advance d={d} {cls} ({ch}): {t:.1f} s")
    return {"d": d, "K": 0 if reps is None else reps.K, "advance_s": advance_s,
            "load_average_at_end": os.getloadavg()}  # fmt: skip


def chain_segment_jobs(chains: dict, n_boundaries: int, segments: list[tuple[str, tuple[int, int]]]) -> list[float]:
    """Seconds of each Schur chain job at the measured speeds: per chain (its class) and segment (start, end) of
    ``resources.schur_chain_segments`` (one segment (0, B) without spectra.chain_segments), the advance-only
    step (``advance_s``) × start + the class's full step × (end − start)."""
    adv = chains.get("advance_s", {})
    out = []
    for cls, (start, end) in segments:
        if start and cls not in adv:
            raise SystemExit(f"no advance-only timing of the {cls} chains: run --jobs schur_advance first")
        out.append(start * adv.get(cls, 0.0) + (end - start) * chains["step_s"][cls])
    return out


def chain_wave_s(
    jobs: list[float], release: float, busy_until: list[float], concurrent: int, longest_first: bool = True
) -> float:
    """When the last Schur chain job ends: the jobs (seconds) start once the preps end (`release`), longest first
    (their priority in the workflow; `longest_first` False: shortest first, the worst order), each on the slot
    of `concurrent` that frees first; the jobs through depth hold their slots until `busy_until`."""
    slots = sorted([max(release, t) for t in busy_until] + [release] * (concurrent - len(busy_until)))
    end = release
    for job in sorted(jobs, reverse=longest_first):
        start = slots.pop(0)
        end = max(end, start + job)
        slots.append(start + job)
        slots.sort()
    return end


def critical_path(
    summary: dict,
    chains: dict | None,
    n_boundaries: int,
    concurrent: int = 64,
    *,
    cumulative_variant_s: float | None = None,
    convergence_sizes_s: dict | None = None,
    chain_segments: list[tuple[str, tuple[int, int]]] | None = None,
) -> dict:
    """Wall hours of one checkpoint's fanned-out analysis with `concurrent` jobs at this machine's speed, from
    the measured per-boundary times. Two waves: first the jobs per block of n boundaries (table parts, Schur
    preps, graph blocks) beside the cumulative jobs (one per variant) and the convergence jobs (one per subset
    size), both through depth, then the Schur chain jobs (after the preps) while those run on. n
    (``spectra.boundaries_per_job``) is the smallest block whose first wave fits in `concurrent` jobs; the
    chain jobs take the slots as they free, longest first (more chain jobs than free slots: some wait). The
    longest path is then the slowest of a table part, a graph block, a cumulative variant's job, a convergence
    size's job, and the Schur preps followed by the chain jobs.

    ``cumulative_variant_s``: seconds per boundary of one variant's job (:func:`cumulative_variant_boundary_s`);
    ``convergence_sizes_s``: seconds per checkpoint of each size's job (:func:`convergence_size_s`). Without
    them (an old long_jobs.json) the two stay one job each, at the two-variant and all-sizes times.
    ``chain_segments``: (class, (start, end)) per chain job (spectra.chain_segments: a chain's segments; default
    one job per chain of ``chains["chains"]`` through every boundary)."""
    B = n_boundaries
    if chains is not None and chain_segments is None:
        chain_segments = [(c, (0, B)) for c, k in chains["chains"].items() for _ in range(k)]
    n_chains = 0 if chains is None else len(chain_segments)
    n_variants = 1 if cumulative_variant_s is None else len(VARIANTS)
    n_sizes = 1 if convergence_sizes_s is None else len(convergence_sizes_s)
    through = n_variants + n_sizes  # the jobs through depth: in both waves
    for n in range(1, B + 1):
        if 3 * -(-B // n) + through <= concurrent:
            break
    per = {job: s["boundary_s"] for job, s in summary.items()}
    paths = {
        "spectra_table_part": n * per.get("spectra_table", 0.0),
        "topology_graph_block": n * per.get("topology_graph", 0.0),
    }
    if cumulative_variant_s is None:
        paths["spectra_cumulative"] = B * per.get("spectra_cumulative", 0.0)
        busy = [paths["spectra_cumulative"]]
    else:
        paths["spectra_cumulative_variant"] = B * cumulative_variant_s
        busy = [paths["spectra_cumulative_variant"]] * n_variants
    if convergence_sizes_s is None:
        paths["spectra_convergence"] = B * per.get("spectra_convergence", 0.0)
        busy += [paths["spectra_convergence"]]
    else:
        S = max(convergence_sizes_s, key=convergence_sizes_s.get)
        paths[f"spectra_convergence_subset (S = {S})"] = convergence_sizes_s[S]
        busy += list(convergence_sizes_s.values())
    if chains is not None:
        jobs = chain_segment_jobs(chains, B, chain_segments)
        paths["spectra_schur_prep + chain"] = chain_wave_s(jobs, n * chains["prep_s"], busy, concurrent)
        unordered = chain_wave_s(jobs, n * chains["prep_s"], busy, concurrent, longest_first=False)
    hours = {k: v / 3600 for k, v in paths.items()}
    out = {"boundaries_per_job": n, "jobs": 3 * -(-B // n) + n_chains + through, "chain_jobs": n_chains,
           "paths_hours": hours, "hours": max(hours.values())}  # fmt: skip
    if chains is not None:  # the chain jobs started shortest first (what the priorities prevent)
        out["hours_chains_shortest_first"] = max([*hours.values(), unordered / 3600])
    return out


def cumulative_variant_boundary_s(res: dict, d: int) -> float | None:
    """Seconds per boundary of one variant's cumulative job: no per-variant measurement exists, so the measured
    two-variant step less the replicates' deviations Δ (``spectra_table``'s, the same K at the same d: each
    variant's job forms them again) is halved (two chains of identical cost: the same products, SVD and
    tangents, on J̄ or I + J̄), and Δ added back."""
    cum = res.get("spectra_cumulative", {}).get(d)
    if cum is None:
        return None
    table = res.get("spectra_table", {}).get(d, {})
    dev = table.get("deviations_s", 0.0) if table.get("K") == cum["K"] else 0.0
    return dev + (cum["boundary_s"] - dev) / 2


def convergence_size_s(conv: dict, n_boundaries: int, n_edge: int) -> dict:
    """Seconds per checkpoint of each subset size's job: :func:`convergence_checkpoint_s` over that size alone."""
    return {S: convergence_checkpoint_s({**conv, "sizes": [S]}, n_boundaries, n_edge) for S in conv["sizes"]}


def config_chain_segments(out: dict) -> tuple[int, list[tuple[str, tuple[int, int]]] | None]:
    """(spectra.chain_segments of the bench's config file for the first model, as read now, and (class, (start,
    end)) of every chain job it makes: ``resources.schur_chain_segments``, the workflow's bounds) ; (1, None)
    without the key."""
    from layergeom import resources as R

    path = Path(out["config"]["file"])
    config = lgconfig.load(path if path.is_absolute() else ROOT / path)
    spectra = lgconfig.model_section(config, MODELS[0], "spectra")
    S = int(spectra.get("chain_segments") or 1)
    if S <= 1:
        return 1, None
    B = out["models"][MODELS[0]]["boundaries"]
    ci = spectra["schur_ci_controls"]
    jobs = [(chain_class(ch, ci, bool(spectra["schur_ci_blocks"])), seg)
            for ch in schur_chains(spectra["alphas"], spectra["schur_orders"])
            for seg in R.schur_chain_segments(B, spectra, ch)]  # fmt: skip
    return S, jobs


def totals(out: dict, d: int) -> None:
    """The per-checkpoint CPU (or GPU) hours of the first model and the fanned-out critical path, into `out`,
    with the config's spectra.chain_segments: the chain segments' repeated prefix products count in the hours
    (``spectra_schur_chain_prefixes``; ``total_one_job_per_chain`` without them)."""
    kind = "cpu" if out.get("device", "cpu") == "cpu" else "gpu"
    hours = {job: s["per_checkpoint_min"][MODELS[0]] / 60 for job, s in out["summary"].items()}
    res, B = out["results"], out["models"][MODELS[0]]["boundaries"]
    chains = res.get("spectra_schur_chains", {}).get(d)
    S, segments = config_chain_segments(out)
    if segments is not None and chains is not None and "advance_s" not in chains:
        log(f"spectra.chain_segments: {S}, but no advance-only step was measured (--jobs schur_advance): the "
            "critical path and the hours are those of one job per chain")  # fmt: skip
        S, segments = 1, None
    if chains is not None and segments is not None:
        adv = chains["advance_s"]
        hours["spectra_schur_chain_prefixes"] = sum(start * adv[cls] for cls, (start, _) in segments) / 3600
    out[f"per_checkpoint_{kind}_hours"] = hours | {"total": sum(hours.values())}
    if "spectra_schur_chain_prefixes" in hours:
        out[f"per_checkpoint_{kind}_hours"]["total_one_job_per_chain"] = (
            sum(hours.values()) - hours["spectra_schur_chain_prefixes"]
        )
    conv = res.get("spectra_convergence", {}).get(d)
    sizes = None if conv is None else convergence_size_s(conv, B, int(out["config"]["convergence_boundaries"]))
    kw = {"cumulative_variant_s": cumulative_variant_boundary_s(res, d), "convergence_sizes_s": sizes}
    out["critical_path_hours_64_jobs"] = critical_path(out["summary"], chains, B, chain_segments=segments, **kw)
    out["critical_path_hours_64_jobs"]["chain_segments"] = S
    if segments is not None:
        out["critical_path_hours_64_jobs_one_job_per_chain"] = critical_path(out["summary"], chains, B, **kw)


def convergence_step(
    J_prev, groups, counts, S, chains, cfg, *, edge: bool, final: bool, product_blocks: int = 4, device: str = "cpu"
):
    """One boundary of ``convergence_rows`` (src/layergeom/spectral/convergence.py, its inner loop body, with
    the same calls): subset mean and deviations, the recomputed metrics when the boundary is early, late or the
    middle one, and one product step per variant (the final boundary also takes the erank SVDs)."""
    subset = np.arange(S)
    sub_counts = np.asarray(counts)[subset]
    reps = intervals.replicates(sub_counts)
    preps = intervals.replicates(sub_counts, product_blocks)
    w = sub_counts / sub_counts.sum()
    d = J_prev.shape[0]
    tol = rank_tolerance(d, cfg["dtype"], cfg["rank_tol"])
    g = groups[subset]
    J = np.tensordot(w, np.asarray(g, dtype=np.float64), axes=1)  # (d, d) J̄ of the subset
    D = intervals.deviations(J, g, sub_counts, reps)
    if edge:
        dec = decompose(J, device=device)
        spectral_metrics(J, sr_k=cfg["sr_k"], tol=tol, dec=dec)
        metric_replicates(J, D, tol=tol, sr_k=cfg["sr_k"], dec=dec, method="linear", device=device)
    Dp = D if preps.K == reps.K else intervals.deviations(J, g, sub_counts, preps)
    for v, chain in chains.items():
        if final:
            chain.floor = tangent_floor(d)
            chain.step(step_operator(J, v), Dp)
        else:
            chain.advance(step_operator(J, v), Dp)
    return preps.K


def bench_convergence(J, groups, counts, cfg, device: str = "cpu") -> dict:
    """Per subset size: a plain boundary's and an edge boundary's inner step of convergence_rows (the product
    chains already hold one boundary, so the step multiplies); the final step's extra at the largest size."""
    sizes = pipeline.convergence_sizes(len(counts), cfg["convergence_sizes"])
    out = {"sizes": sizes, "plain_s": {}, "edge_s": {}}

    def fresh_chains(S):  # one boundary already composed (its first step copies M: no product)
        sub = np.asarray(counts)[:S]
        preps = intervals.replicates(sub, 4)
        Jp = np.tensordot(sub / sub.sum(), np.asarray(groups[:S], dtype=np.float64), axes=1)
        Dp = intervals.deviations(Jp, groups[:S], sub, preps)
        chains = {v: ProductChain(0.0, device) for v in VARIANTS}
        for v, c in chains.items():
            c.advance(step_operator(Jp, v), Dp)
        return chains

    for S in sizes:
        for kind, edge in (("plain_s", False), ("edge_s", True)):
            chains = fresh_chains(S)
            _, out[kind][S] = timed(convergence_step, J, groups, counts, S, chains, cfg, edge=edge, final=False,
                                    device=device)  # fmt: skip
            log(f"convergence S={S} {kind[:-2]}: {out[kind][S]:.1f} s")
    S = sizes[-1]
    _, final = timed(convergence_step, J, groups, counts, S, fresh_chains(S), cfg, edge=False, final=True,
                     device=device)  # fmt: skip
    out["final_extra_s"] = max(0.0, final - out["plain_s"][S])
    return out


def convergence_checkpoint_s(conv: dict, n_boundaries: int, n_edge: int, scale: float = 1.0) -> float:
    """Seconds per checkpoint: per size, (B − E) plain + E edge boundaries (E = |early ∪ late ∪ middle|) + the final SVDs."""
    n_edge = max(1, min(int(n_edge), n_boundaries))
    names = list(range(n_boundaries))
    E = len(set(names[:n_edge]) | set(names[-n_edge:]) | {names[n_boundaries // 2]})
    per_size = [(n_boundaries - E) * conv["plain_s"][S] + E * conv["edge_s"][S] + conv["final_extra_s"]
                for S in conv["sizes"]]  # fmt: skip
    return scale * float(sum(per_size))


def bench_topology(d: int, tokens: int, window_tokens: int, cfg: dict, seed: int, device: str = "cpu") -> dict:
    """boundary_topology on `tokens` rows of a float32 activation memmap (BOS rows masked), and the streamed
    correlation alone (the part that grows with the tokens)."""
    with tempfile.TemporaryDirectory() as tmp:
        states, t_gen = timed(synthetic_states, Path(tmp) / "states.npy", tokens, d)
        log(f"topology: {tokens} x {d} activations written in {t_gen:.0f} s")
        mask = np.arange(tokens) % window_tokens != 0
        topo, total = timed(boundary_topology, states, mask, cfg, seed, device=device)
        _, corr = timed(streamed_correlation, states, mask, cfg["chunk_tokens"], device=device)
        del states
    return {"d": d, "tokens": tokens, "boundary_s": total, "correlation_s": corr,
            "communities": topo.summary["n_communities"], "edges": topo.summary["n_edges_pos"] + topo.summary["n_edges_neg"]}  # fmt: skip


# ---- main ------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(ROOT / "config" / "papers.yaml"))
    ap.add_argument("--d", type=int, default=4096, help="papers width (Llama-3.1-8B, OLMo-3-7B)")
    ap.add_argument("--small-d", type=int, default=2048, help="second width for the spectra and cumulative d-scaling")
    ap.add_argument("--schur-dims", type=int, nargs="+", default=[1024, 2048],
                    help="widths of the Schur bench (the largest is extrapolated to --d as d³)")  # fmt: skip
    ap.add_argument("--tokens", type=int, default=None, help="topology tokens (default windows × window_tokens)")
    ap.add_argument("--jobs", nargs="+",
                    default=["rates", "spectra", "cumulative", "schur_chains", "convergence", "topology"],
                    help="schur_chains: the Schur prep and one chain step per cost class at --d (per boundary = prep "
                         "+ the chains' steps); schur: whole boundaries of the one job at --schur-dims; "
                         "schur_advance: the advance-only step per class at --d (a chain segment's prefix), with "
                         "schur_chains beside its steps, alone merged into the existing long_jobs.json, which is "
                         "then rendered")  # fmt: skip
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--device", default="cpu", help="torch device of the spectral and topology functions (cpu, cuda)")
    ap.add_argument("--render", action="store_true", help="only rewrite long_jobs.md from long_jobs.json")
    args = ap.parse_args()
    if args.jobs == ["schur_advance"]:  # merged into the existing long_jobs.json, then rendered
        return merge_schur_advance(args)
    if args.render:
        return render(args)

    config = lgconfig.load(args.config)
    cfg = lgconfig.model_section(config, MODELS[0], "spectra")
    tcfg = lgconfig.model_section(config, MODELS[0], "topology")
    corpus = config["corpus"]
    seed = config["seed"]
    counts = group_counts(corpus, cfg)
    config_tokens = int(corpus["n_windows"]) * int(corpus["window_tokens"])
    tokens = args.tokens or config_tokens
    models = {m: {"label": config["models"][m].get("label", m),
                  "boundaries": len(boundaries_for(config["models"][m]["family"], config["models"][m]["n_layers"])),
                  "checkpoints": len(config["models"][m]["checkpoints"])} for m in MODELS}  # fmt: skip
    out = {
        "machine": {**machine_info(os.cpu_count()), "cpus": os.cpu_count(), "numpy": np.__version__,
                    "scipy": scipy.__version__, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "unset"),
                    "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "unset"),
                    "load_average_at_start": os.getloadavg()},  # fmt: skip
        "config": {"file": str(Path(args.config).relative_to(ROOT)) if Path(args.config).is_absolute() else args.config,
                   "group_counts": counts.tolist(), "tokens": tokens, "config_tokens": config_tokens,
                   **{k: cfg[k] for k in ("n_groups", "ci_blocks", "ci_method", "sr_k", "alphas", "schur_ci_blocks",
                                          "schur_ci_controls", "schur_boundary_metrics", "convergence_sizes",
                                          "convergence_boundaries", "dtype")},
                   "topology": {k: tcfg[k] for k in ("top_k", "resolution", "resolution_sweep", "chunk_tokens")}},
        "d": args.d,
        "device": args.device,
        "models": models,
        "results": {},
    }  # fmt: skip
    res = out["results"]
    t_start = time.perf_counter()
    log(f"start; group counts {counts.tolist()}")

    if "rates" in args.jobs:
        res["rates"] = {d: rates(d) for d in sorted({args.small_d, args.d})}
        log(f"rates: {res['rates']}")
    big = {}

    def mats(d, n=1):
        key = (d, n)
        if key not in big:
            big.clear()  # one width in memory at a time
            big[key] = [boundary(d, counts, seed=i) for i in range(n)]
        return big[key]

    if "spectra" in args.jobs or "cumulative" in args.jobs:
        for d in sorted({args.small_d, args.d}):
            bounds = mats(d, 2)
            if "spectra" in args.jobs:
                res.setdefault("spectra_table", {})[d] = bench_spectra(*bounds[0], counts, cfg, args.device)
                log(f"spectra d={d}: {res['spectra_table'][d]}")
            if "cumulative" in args.jobs:
                res.setdefault("spectra_cumulative", {})[d] = bench_cumulative(bounds, counts, cfg, args.device)
                log(f"cumulative d={d}: {res['spectra_cumulative'][d]}")
    if "schur_chains" in args.jobs:
        res["spectra_schur_chains"] = {args.d: bench_schur_chains(mats(args.d, 2), counts, cfg, seed, args.device)}
        log(f"schur chains d={args.d}: {res['spectra_schur_chains'][args.d]}")
        if "schur_advance" in args.jobs:  # beside the chain steps: what a chain segment's prefix costs
            adv = bench_schur_advance(boundary(args.d, counts, seed=0), counts, cfg, seed, args.device)
            res["spectra_schur_chains"][args.d]["advance_s"] = adv["advance_s"]
            log(f"schur advance d={args.d}: {adv['advance_s']}")
    if "convergence" in args.jobs:
        J, groups = mats(args.d, 2)[0]
        res["spectra_convergence"] = {args.d: bench_convergence(J, groups, counts, cfg, args.device)}
    big.clear()
    if "schur" in args.jobs:
        res["spectra_schur"] = {}
        for d in args.schur_dims:
            bounds = [boundary(d, counts, seed=i) for i in range(2)]
            res["spectra_schur"][d] = bench_schur(bounds, counts, cfg, seed, args.device)
            log(f"schur d={d}: {res['spectra_schur'][d]}")
            del bounds
    if "topology" in args.jobs:
        res["topology_graph"] = {
            args.d: bench_topology(args.d, tokens, int(corpus["window_tokens"]), tcfg, seed, args.device)
        }
        log(f"topology: {res['topology_graph']}")
    log("done")
    out["machine"]["load_average_at_end"] = os.getloadavg()
    out["machine"]["load_average_1min_max"] = LOAD_MAX[0]
    out["wall_s"] = time.perf_counter() - t_start
    out["summary"] = summarise(out, args.d, config_tokens, int(cfg["convergence_boundaries"]))
    totals(out, args.d)  # job -> hours for one Llama-3.1-8B checkpoint on this device, and the critical path
    path = Path(args.out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "long_jobs.json").write_text(json.dumps(out, indent=2, default=float) + "\n")
    md = markdown(out)
    (path / "long_jobs.md").write_text(md)
    print(md)


def merge_schur_advance(args) -> None:
    """``--jobs schur_advance``: time the advance-only chain steps (``bench_schur_advance``) at --d with the
    config's settings, put them beside the chain steps of long_jobs.json (``spectra_schur_chains``, same d) and
    render it again (``--render``)."""
    path = Path(args.out)
    out = from_json(json.loads((path / "long_jobs.json").read_text()))
    if args.d not in out["results"].get("spectra_schur_chains", {}):
        raise SystemExit(f"long_jobs.json has no schur_chains timing at d = {args.d}: run --jobs schur_chains first")
    config = lgconfig.load(args.config)
    cfg = lgconfig.model_section(config, MODELS[0], "spectra")
    counts = group_counts(config["corpus"], cfg)
    log(f"start (schur_advance at d = {args.d})")
    adv = bench_schur_advance(boundary(args.d, counts, seed=0), counts, cfg, config["seed"], args.device)
    out["results"]["spectra_schur_chains"][args.d] |= {"advance_s": adv["advance_s"], "advance_machine": {
        "load_average_1min_max": LOAD_MAX[0], "load_average_at_end": adv["load_average_at_end"]}}  # fmt: skip
    (path / "long_jobs.json").write_text(json.dumps(out, indent=2, default=float) + "\n")
    log(f"schur advance d={args.d}: {adv['advance_s']}")
    args.render = True
    render(args)


def render(args) -> None:
    """Rewrite long_jobs.md (and the derived totals of long_jobs.json) from long_jobs.json."""
    path = Path(args.out)
    out = from_json(json.loads((path / "long_jobs.json").read_text()))
    totals(out, out["d"])  # recomputed: the rule may have changed since the measurement
    (path / "long_jobs.json").write_text(json.dumps(out, indent=2, default=float) + "\n")
    (path / "long_jobs.md").write_text(markdown(out))


def summarise(out: dict, d: int, config_tokens: int, n_edge: int) -> dict:
    """Per job: seconds per boundary at width d (measured, or d³-extrapolated), and minutes per checkpoint per model."""
    res, models = out["results"], out["models"]
    jobs = {}
    if "spectra_table" in res and d in res["spectra_table"]:
        jobs["spectra_table"] = {"boundary_s": res["spectra_table"][d]["boundary_s"], "measured_d": d}
    if "spectra_cumulative" in res and d in res["spectra_cumulative"]:
        jobs["spectra_cumulative"] = {"boundary_s": res["spectra_cumulative"][d]["boundary_s"], "measured_d": d}
    if "spectra_schur_chains" in res and d in res["spectra_schur_chains"]:
        jobs["spectra_schur"] = {"boundary_s": res["spectra_schur_chains"][d]["boundary_s"], "measured_d": d,
                                 "from": "prep + chain steps"}  # fmt: skip
    elif "spectra_schur" in res:
        dm = max(res["spectra_schur"])
        jobs["spectra_schur"] = {"boundary_s": res["spectra_schur"][dm]["boundary_s"] * (d / dm) ** 3,
                                 "measured_d": dm, **({"scale": (d / dm) ** 3} if dm != d else {})}  # fmt: skip
    if "spectra_convergence" in res:
        conv = res["spectra_convergence"][d]
        jobs["spectra_convergence"] = {"measured_d": d, "per_checkpoint_s": {
            m: convergence_checkpoint_s(conv, info["boundaries"], n_edge) for m, info in models.items()}}  # fmt: skip
        jobs["spectra_convergence"]["boundary_s"] = jobs["spectra_convergence"]["per_checkpoint_s"][MODELS[0]] / models[
            MODELS[0]]["boundaries"]  # fmt: skip
    if "topology_graph" in res:
        t = res["topology_graph"][d]
        scale = config_tokens / t["tokens"]  # the correlation grows with the tokens, the rest does not
        jobs["topology_graph"] = {"boundary_s": t["boundary_s"] + (scale - 1) * t["correlation_s"], "measured_d": d,
                                  "measured_tokens": t["tokens"]}  # fmt: skip
    for job in jobs.values():
        per = job.get("per_checkpoint_s") or {m: job["boundary_s"] * info["boundaries"] for m, info in models.items()}
        job["per_checkpoint_min"] = {m: s / 60 for m, s in per.items()}
        job["over_limit"] = {m: s / 60 > LIMIT_MIN for m, s in per.items()}
        job.pop("per_checkpoint_s", None)
    return jobs


def from_json(out: dict) -> dict:
    """long_jobs.json as main() built it: the widths and subset sizes back to int keys."""

    def ints(x):
        return {int(k) if k.isdigit() else k: ints(v) for k, v in x.items()} if isinstance(x, dict) else x

    return {**out, "results": ints(out["results"])}


def snapshot_gb(d: int, c: dict) -> dict:
    """Bytes of one resume snapshot (the product chains: C and its tangents) per job, in GB, at width d.

    cumulative: 2 variants × (C float64 + K float32 tangents); Schur, per variant: α = 1 with its own N real
    (float64 C, K float32 tangents), the other α of the own N complex (complex128 C, K complex64 tangents),
    the random control without intervals (complex128 C only); convergence: per subset size (the boundary-outer loop
    carries them all), 2 variants × (C + min(4, G) tangents).
    """
    K = c["n_groups"] if c["ci_blocks"] is None else min(c["ci_blocks"], c["n_groups"])
    Ks = min(c["schur_ci_blocks"], c["n_groups"])
    na = len(c["alphas"])
    n_sizes = len(pipeline.convergence_sizes(c["n_groups"], c["convergence_sizes"]))  # every size's chains at once
    schur = (8 + 4 * Ks) + (na - 1) * (16 + 8 * Ks) + sum(a != 0 for a in c["alphas"]) * 16
    if "random" in c["schur_ci_controls"]:
        schur += sum(a != 0 for a in c["alphas"]) * 8 * Ks
    per = {"spectra_cumulative": 2 * (8 + 4 * K), "spectra_schur": 2 * schur,
           "spectra_convergence": n_sizes * 2 * (8 + 4 * min(4, c["n_groups"]))}  # fmt: skip
    return {job: b * d * d / 1e9 for job, b in per.items()}


def markdown(out: dict) -> str:
    res, models, mach, c = out["results"], out["models"], out["machine"], out["config"]
    d = out["d"]
    per_model = ", ".join(f"{v['label']} {v['boundaries']}" for v in models.values())
    la0, la1 = mach["load_average_at_start"], mach["load_average_at_end"]
    totals = [
        f"One {models[MODELS[0]]['label']} checkpoint: {v['total']:.1f} {k.split('_')[2].upper()}-hours "
        f"(`{k}` in long_jobs.json)"
        + (f", of which {v['spectra_schur_chain_prefixes']:.1f} h the Schur chain segments' repeated prefix "
           f"products ({v['total_one_job_per_chain']:.1f} h with one job per chain)"
           if "spectra_schur_chain_prefixes" in v else "")
        + ".\n"
        for k, v in out.items()
        if k.startswith("per_checkpoint_") and k.endswith("_hours")
    ]  # fmt: skip
    L = [
        "# Long per-checkpoint jobs at papers scale (bench/bench_long_jobs.py)",
        "",
        f"One boundary of each job that loops over a checkpoint's boundaries, timed with the project's functions "
        f"and the settings of `{c['file']}` on synthetic d×d J̄ (Gaussian bulk of spectral norm ≈ 1 plus a rank-32 "
        f"part, full rank like an MLP boundary) with {c['n_groups']} float32 group means (J̄ + 2 % noise; group "
        f"sizes {min(c['group_counts'])}–{max(c['group_counts'])} samples); topology on {c['tokens']:,} float32 "
        f"activation rows (signed factor model as in bench_topology.py). Per checkpoint = per boundary × "
        f"boundaries ({per_model}).",
        "",
        f"Machine: {mach['cpus']} CPUs ({mach['processor']}), {mach['platform']}, numpy {mach['numpy']} "
        f"(OpenBLAS, default threads: every core), scipy {mach['scipy']}; OMP_WAIT_POLICY={mach['OMP_WAIT_POLICY']}. "
        f"Load average (1/5/15 min) {la0[0]:.1f}/{la0[1]:.1f}/{la0[2]:.1f} at the start, "
        f"{la1[0]:.1f}/{la1[1]:.1f}/{la1[2]:.1f} at the end, at most {mach.get('load_average_1min_max', float('nan')):.1f} "
        "(1 min) in between: the machine is shared, and a load above the CPU count inflates the times. "
        f"Whole run {out['wall_s'] / 60:.0f} min.",
        "",
        f"## Per boundary (d = {d}) and per checkpoint, on these {mach['cpus']} cores"
        + (f" and the device `{out['device']}`" if out.get("device", "cpu") != "cpu" else ""),
        "",
        *totals,
        f"Over {LIMIT_MIN:.0f} min per checkpoint (**bold**): the job must be resumable (or split) at papers scale.",
        "",
        "| job | s per boundary | measured at | "
        + " | ".join(f"{v['label']} min/ckpt" for v in models.values())
        + " |",
        "|---|---:|---|" + "---:|" * len(models),
    ]
    for job, s in out["summary"].items():
        where = f"d={s['measured_d']}" + (f", ×{s['scale']:.0f} (d³)" if "scale" in s else "")
        if job == "topology_graph" and s["measured_tokens"] != c["config_tokens"]:
            where += f", {s['measured_tokens']:,} tokens (correlation scaled to {c['config_tokens']:,})"
        if job == "spectra_convergence":
            where += f", mean over {models[MODELS[0]]['boundaries']} boundaries × {len(res[job][d]['sizes'])} sizes"
        mins = [f"**{v:.0f}**" if s["over_limit"][m] else f"{v:.1f}" for m, v in s["per_checkpoint_min"].items()]
        L.append(f"| `{job}` | {s['boundary_s']:.0f} | {where} | " + " | ".join(mins) + " |")
    cp = out.get("critical_path_hours_64_jobs")
    if cp:
        L += ["", f"Fanned out with 64 concurrent jobs (`spectra.boundaries_per_job: {cp['boundaries_per_job']}`, "
              f"{cp['jobs']} jobs per {models[MODELS[0]]['label']} checkpoint), the longest path takes "
              f"**{cp['hours']:.2f} h** at these per-boundary speeds (`critical_path_hours_64_jobs`): "
              + ", ".join(f"{k} {v:.2f} h" for k, v in cp["paths_hours"].items()) + "."]  # fmt: skip
        one = out.get("critical_path_hours_64_jobs_one_job_per_chain")
        if one:
            S = cp["chain_segments"]
            L += ["", f"The Schur chains run as `spectra.chain_segments: {S}` jobs each ({cp['chain_jobs']} chain jobs, "
                  f"`{c['file']}`): a segment's job advances its chain's products through the depths before its own "
                  f"(no SVD: {', '.join(f'{k} {v:.1f} s' for k, v in res['spectra_schur_chains'][d]['advance_s'].items())} "
                  f"per depth, measured with `--jobs schur_advance` at a 1-min load of at most "
                  f"{res['spectra_schur_chains'][d].get('advance_machine', {}).get('load_average_1min_max', float('nan')):.1f}), "
                  f"then steps through its own; the chain jobs take "
                  f"the slots as they free, longest first (their Snakemake priority: `resources.schur_chain_seconds`; "
                  f"shortest first, the longest path would be {cp['hours_chains_shortest_first']:.2f} h). The repeated prefix products cost "
                  f"{out['per_checkpoint_cpu_hours']['spectra_schur_chain_prefixes']:.1f} CPU-hours per checkpoint "
                  f"(in the total above). With one job per chain ({one['chain_jobs']} chain jobs) the "
                  f"Schur path is {one['paths_hours']['spectra_schur_prep + chain']:.2f} h and the longest path "
                  f"{one['hours']:.2f} h."]  # fmt: skip
        if "spectra_cumulative_variant" in cp["paths_hours"]:
            vs = cumulative_variant_boundary_s(res, d)
            L += ["", f"The cumulative table runs as a job per variant ({', '.join(VARIANTS)}): no per-variant "
                  f"time was measured, so a variant's step is taken as half of the measured two-variant step "
                  f"(two chains of identical cost) less the replicates' deviations, which each variant's job forms "
                  f"again and which count in full ({res['spectra_table'][d]['deviations_s']:.1f} s, from "
                  f"`spectra_table` at the same K): {vs:.1f} s per boundary. The convergence table runs as a job "
                  f"per subset size, each the measured per-size plain and edge steps over the checkpoint's "
                  f"boundaries plus the final SVDs: "
                  + ", ".join(f"S = {S} {t / 3600:.2f} h" for S, t in convergence_size_s(
                      res["spectra_convergence"][d], models[MODELS[0]]["boundaries"],
                      c["convergence_boundaries"]).items()) + "."]  # fmt: skip
    L += ["", "## Where the time goes", ""]
    if "spectra_table" in res:
        L += [f"`spectra_table` (K = {c['n_groups'] if c['ci_blocks'] is None else c['ci_blocks']} replicates, "
              f"{c['ci_method']} intervals):", "",
              "| d | deviations | decompose (eig + vectors, SVD) | metrics + replicates | boundary | Henrici of J̄ |",
              "|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for dd, t in res["spectra_table"].items():
            L.append(f"| {dd} | {t['deviations_s']:.1f} | {t['decompose_s']:.1f} | {t['metrics_and_replicates_s']:.1f} "
                     f"| {t['boundary_s']:.1f} | {t['henrici']:.2f} |")  # fmt: skip
        L.append("")
    if "spectra_cumulative" in res:
        L += ["`spectra_cumulative` (both variants, K tangents each): "
              + "; ".join(f"d={dd}: boundary 1 {t['boundary1_s']:.1f} s, boundary 2 {t['boundary_s']:.1f} s"
                          for dd, t in res["spectra_cumulative"].items()) + ".", ""]  # fmt: skip
    if "spectra_schur" in res:
        L += [f"`spectra_schur` (α = {c['alphas']}, {c['schur_ci_blocks']} blocks, intervals for "
              f"{c['schur_ci_controls']}, boundary metrics `{c['schur_boundary_metrics']}`; "
              f"{len(c['alphas']) * 2 - 1} operators × 2 variants, each step a complex product and a full complex SVD): "
              + "; ".join(f"d={dd}: boundary 1 {t['boundary1_s']:.1f} s, boundary 2 {t['boundary_s']:.1f} s"
                          for dd, t in res["spectra_schur"].items()) + "."]  # fmt: skip
        ds = sorted(res["spectra_schur"])
        if len(ds) > 1:
            a, b = ds[-2], ds[-1]
            p = np.log(res["spectra_schur"][b]["boundary_s"] / res["spectra_schur"][a]["boundary_s"]) / np.log(b / a)
            L.append(f"Measured growth {a}→{b}: d^{p:.2f}.")
        r = res.get("rates", {})
        if d in r and ds[-1] in r:
            L.append(f"The complex SVD, the largest part, grew ×{r[d]['svd_complex_s'] / r[ds[-1]]['svd_complex_s']:.1f}"
                     f" from d={ds[-1]} to {d} on this machine (d³: ×{(d / ds[-1]) ** 3:.0f}).")  # fmt: skip
        L.append("")
    if "spectra_schur_chains" in res and d in res["spectra_schur_chains"]:
        t = res["spectra_schur_chains"][d]
        L += [f"`spectra_schur` as its fanned-out jobs take it (d = {d}, K = {t['K']} blocks): a prep "
              f"{t['prep_s']:.1f} s per boundary; one chain step per class ("
              + "; ".join(f"{c}: {s:.1f} s × {t['chains'][c]} chains" for c, s in t["step_s"].items())
              + f"): {t['boundary_s']:.0f} s per boundary in all.", ""]  # fmt: skip
    if "spectra_convergence" in res:
        conv = res["spectra_convergence"][d]
        L += [f"`spectra_convergence` (sizes {conv['sizes']} of {c['n_groups']} groups; per size every boundary "
              f"advances both product chains, and the first/last {c['convergence_boundaries']} and the middle "
              f"boundary also recompute decomposition, metrics and S replicates; the final boundary adds the erank "
              f"SVDs, {conv['final_extra_s']:.1f} s):", "",
              "| S groups | plain boundary (s) | edge boundary (s) |", "|---:|---:|---:|"]  # fmt: skip
        L += [f"| {S} | {conv['plain_s'][S]:.1f} | {conv['edge_s'][S]:.1f} |" for S in conv["sizes"]]
        L.append("")
    if "topology_graph" in res:
        t = res["topology_graph"][d]
        L += [f"`topology_graph`: {t['tokens']:,} tokens, top-{c['topology']['top_k']}, γ = "
              f"{c['topology']['resolution']}, sweep {c['topology']['resolution_sweep']}: {t['boundary_s']:.1f} s "
              f"per boundary, of which the streamed float64 correlation {t['correlation_s']:.1f} s (timed alone; it "
              f"grows linearly with the tokens); {t['communities']} communities, {t['edges']} edges.", ""]  # fmt: skip
    if "rates" in res:
        ds = list(res["rates"])
        keys = list(res["rates"][ds[0]])
        L += ["## The machine: GEMM rates and the LAPACK calls (to scale to another node)", "",
              "| | " + " | ".join(f"d = {dd}" for dd in ds) + " |", "|---|" + "---:|" * len(ds)]  # fmt: skip
        for k in keys:
            L.append(f"| {k} | " + " | ".join(str(res["rates"][dd][k]) for dd in ds) + " |")
        L += ["", "GEMM: best of 3 products of two d×d matrices (a complex product counted as 8d³ flops). Each "
              "decomposition is timed once, and on this shared machine a single timing can be inflated by other "
              "processes (they grow about as d³, ×8 per doubling: a smaller ratio between the columns means the "
              "smaller one was slowed). The spectral jobs are bound by these calls: a node with R× this machine's "
              "rates (and as many BLAS threads) runs them about R× faster.", ""]  # fmt: skip
    L += [
        "## Caveats",
        "",
        "- One synthetic full-rank boundary per job. Attention boundaries of Llama/OLMo are of rank n_kv·d_head "
        "= 1024: their eigen-perturbations are cheaper, the Schur form is reordered (ztrsen) and its Sylvester "
        "solves split; the SVDs and products, the bulk of the time, are the same.",
        "- A J̄ with Henrici departure below 0.1 (near-normal) takes an exact `eigvals` per replicate in "
        "`spectra_table` (`linear.HENRICI_EXACT_BELOW`): K × `eigvals_s` more per such boundary.",
        "- Files are not read: the group means sit in memory. The jobs memory-map them (G·d²·4 B = 1.1 GB per "
        "boundary at d = 4096, read once per table, four times by the convergence job) and read the "
        "activations (tokens·d·4 B = 2.1 GB per boundary) from disk; add that I/O on a slow file system.",
        *(
            [
                f"- `spectra_schur` is timed at d = {out['summary']['spectra_schur']['measured_d']} and scaled as d³ "
                f"(one boundary at {d} would take about {out['summary']['spectra_schur']['boundary_s'] / 60:.0f} min, "
                "over the ~8 min one measurement may take here)."
            ]
            if "scale" in out["summary"].get("spectra_schur", {})
            else []
        ),
        "- `spectra_convergence` has no per-boundary entry point: its step is the loop body of "
        "`convergence_rows`, rebuilt from the same calls (`convergence_step` here).",
        f"- Gemma-4-E4B's rows are at d = {d} too; its text decoder is narrower (an effective-4B model: see "
        "hidden_size in its hub config), so they are upper bounds: scale by (d/4096)³ for the spectral jobs and "
        "by d² for the correlation.",
        "- Per checkpoint = boundary 2's time × boundaries (the first boundary of a product is a little cheaper).",
        "- Not timed: the resume snapshots (`layergeom.resume.Snapshots`, written every `snapshot_minutes`). One "
        f"holds the product chains, at d = {d}: "
        + ", ".join(f"`{j}` ≈ {gb:.1f} GB" for j, gb in snapshot_gb(d, c).items())
        + " (C and the K tangents of every chain), written atomically each time.",
        "",
    ]
    return "\n".join(L)


if __name__ == "__main__":
    main()
