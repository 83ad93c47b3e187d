"""Which per-checkpoint jobs run long at papers scale: one boundary of each, timed at d = 4096 (run by hand).

The spectral tables and the topology graph job each loop over a checkpoint's boundaries (Llama-3.1-8B and
OLMo-3-7B: 64, Gemma-4-E4B: 126), so a checkpoint costs about one boundary's time × the number of boundaries.
This bench times ONE boundary of each with the project's own functions and the settings of
config/papers.yaml, on synthetic matrices of papers width d = 4096 (Llama-3.1-8B, OLMo-3-7B):

- ``spectra_table``: the deviations Δ_k of the K = n_groups jackknife replicates, ``decompose`` (eigenvectors
  and full SVD), ``spectra_row`` and ``spectra_intervals`` (metrics, linearised replicates), as ``write_spectra``
  per boundary; on an attention and an MLP boundary (the mean: the blocks alternate them);
- ``spectra_cumulative``: ``cumulative_rows`` of one variant (its fanned-out job, ``spectra_cumulative_variant``)
  through attention, MLP, attention, MLP (``CHAIN_DEPTHS``), the last boundary timed (its deviations apart);
- ``spectra_schur`` as its fanned-out jobs take it (``schur_chains``): ``prepare_boundary`` (a prep job's
  per-boundary work) on an attention and an MLP boundary, and per cost class (``resources.schur_chain_class``:
  a run's ``{tangents|plain}_{update|full}``, an ``order``) one chain through ``CHAIN_DEPTHS`` as a chain
  job takes it (``chain_step_input``: the operators rebuilt from the prep's arrays): the products alone
  (``advance=True``, a segment's prefix) at depths 2 and 3, timed, and a full step at depth 4, timed, with the
  singular-value route each product took (``ProductChain.routes``: the `update` products are numerically low
  rank only after the second attention boundary, as in real chains); an order's step split into its reordered
  normal part J₀^π and each variant's products and singular values;
- ``spectra_convergence``: the inner step of ``convergence_rows`` per subset size (its loop body, rebuilt
  from the same functions: the function has no per-boundary entry point) for a plain boundary (products only)
  and an edge boundary (one of the 2·n_edge + 1 whose metrics are recomputed), and the final step's extra SVD;
- ``topology_graph``: ``boundary_topology`` on a float32 activation memmap of windows × window_tokens rows
  (the config's), a signed factor model as in bench_topology.py.

Matrices (``attention_boundary``, ``boundary``): an attention J̄ of grouped-query rank d/4 (Llama-3.1-8B:
n_kv·d_head = 1024), its group means A(B + 2 % noise) plus a noise floor shared by the groups (``ATTN_FLOOR`` of
‖J̄‖_F beyond the rank, as SmolLM2-135M's attention J̄ carry) in float32; an MLP J̄ = 0.5·Gaussian/√d (spectral
norm ≈ 1) plus a rank-32 part of norm ≈ 1 (full rank, non-normal: its Henrici departure is reported), its group
means J̄ + 2 % noise in float32; the group sizes of 1000 windows × 127 non-BOS tokens. The GEMM rates and the
LAPACK calls the jobs spend their time in are timed too, so that readers can scale the numbers to their node.
Threads: the BLAS default (every core; the jobs do not pin numpy's threads). Writes bench/results/long_jobs.json
and long_jobs.md: per-checkpoint CPU-hours with the config's fan-out, and the critical path of one checkpoint on
64 concurrent jobs (``critical_path``: a list schedule of the jobs with the workflow's priorities) for the
config's spectra.boundaries_per_job and spectra.chain_segments and the alternatives (``fanout_alternatives``).

    OMP_WAIT_POLICY=PASSIVE python bench/bench_long_jobs.py [--d 4096] [--small-d 2048] [--jobs ...] [--merge]
        [--device cpu|cuda] [--out DIR] [--render]

``--merge`` keeps the results of the jobs not run from the existing long_jobs.json (same config and d), so that
the bench runs in parts (e.g. ``--jobs schur_chains`` first, then ``--jobs rates spectra cumulative convergence
topology --merge``); each part's load averages are recorded (``machine.runs``). ``--jobs schur_advance`` (alone)
times only the advance-only chain steps again and merges them; ``--render`` recomputes the totals, the critical
path and the alternatives from long_jobs.json with the config's fan-out and RATES as they are now.

``--device cuda`` times the same functions on a GPU (each computes through torch on the device it is given, as a
job does with ``workflow.job_device``): bench/gpu_check.sh runs it at d = 4096, one boundary per stage, and the
summary's per-checkpoint hours then project a whole checkpoint's spectral work on that GPU.
"""

from __future__ import annotations

import argparse
import heapq
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
from layergeom import resources as R  # noqa: E402
from layergeom.names import boundaries_for  # noqa: E402
from layergeom.spectral import intervals  # noqa: E402
from layergeom.spectral.convergence import VARIANTS  # noqa: E402
from layergeom.spectral.cumulative import ProductChain, cumulative_rows, step_operator, tangent_floor  # noqa: E402
from layergeom.spectral.linear import metric_replicates, spectra_intervals  # noqa: E402
from layergeom.spectral.schur import (  # noqa: E402
    BoundaryStep,
    SurgeryBoundary,
    prepare_boundary,
    schur_surgery,
    step_chain,
    wants_interval,
)
from layergeom.spectral.schur_basis import SchurTangent  # noqa: E402
from layergeom.spectral.settings import (  # noqa: E402
    convergence_sizes,
    schur_alphas,
    schur_chains,
    schur_order_alphas,
)
from layergeom.spectral.spectra import (  # noqa: E402
    decompose,
    eigenvalue_frame,
    henrici_departure,
    rank_tolerance,
    spectra_row,
    spectral_metrics,
)
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


class Seconds(float):
    """Wall seconds of a timed call, with the process's CPU seconds in it (every thread: ``time.process_time``) as
    ``cpu``. Sums, differences and scalings keep both, so that a result built from timings has a CPU twin
    (``cpu_twin``): on a shared machine the wall time grows with the load, the CPU time far less."""

    def __new__(cls, wall: float, cpu: float):
        obj = super().__new__(cls, wall)
        obj.cpu = float(cpu)
        return obj

    def __add__(self, other):
        return Seconds(float(self) + float(other), self.cpu + getattr(other, "cpu", float(other)))

    __radd__ = __add__

    def __sub__(self, other):
        return Seconds(float(self) - float(other), self.cpu - getattr(other, "cpu", float(other)))

    def __mul__(self, k):
        return Seconds(float(self) * float(k), self.cpu * float(k))

    __rmul__ = __mul__

    def __truediv__(self, k):
        return Seconds(float(self) / float(k), self.cpu / float(k))


def timed(fn, *args, **kwargs):
    """(fn's result, its ``Seconds``)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, Seconds(time.perf_counter() - t, time.process_time() - c)


def mean(xs) -> Seconds | float:
    """The mean of timings, keeping their CPU seconds."""
    xs = list(xs)
    return sum(xs[1:], xs[0]) / len(xs)


def cpu_twin(tree):
    """The CPU seconds of every ``Seconds`` in a results tree (dicts of timings), in the same shape; None where a
    branch holds none."""
    if isinstance(tree, Seconds):
        return tree.cpu
    if isinstance(tree, dict):
        out = {k: cpu_twin(v) for k, v in tree.items() if k != "cpu"}
        out = {k: v for k, v in out.items() if v is not None}
        return out or None
    return None


def with_cpu(entry: dict) -> dict:
    """A result entry with its CPU twin under ``cpu`` (kept through the JSON file, which stores plain floats)."""
    twin = cpu_twin(entry)
    return entry | ({"cpu": twin} if twin else {})


def cpu_view(out: dict, threads: int) -> dict:
    """long_jobs.json with every timing that has a CPU twin replaced by its CPU seconds / `threads`: the wall a
    job would take on `threads` cores of its own with every thread busy (a lower bound; the measured wall on a
    loaded machine an upper one)."""

    def overlay(entry, twin):
        if isinstance(entry, dict) and isinstance(twin, dict):
            return {k: overlay(v, twin.get(k)) if k in twin else v for k, v in entry.items() if k != "cpu"}
        return twin / threads if isinstance(twin, float | int) and not isinstance(twin, bool) else entry

    res = {job: {d: overlay(e, e.get("cpu")) if isinstance(e, dict) and "cpu" in e else e for d, e in by_d.items()}
           for job, by_d in out["results"].items() if job != "rates"}  # fmt: skip
    return {**out, "results": res}


# ---- synthetic J̄ and group means ----------------------------------------------------------------------
def group_counts(corpus: dict, spectra: dict) -> np.ndarray:
    """Samples per group: the sample windows (n_samples of n_windows) in n_groups blocks, window_tokens − 1
    non-BOS tokens each (spectra.samples: all, the isolated default), as ``jacobians.sample_groups``."""
    windows = min(int(spectra["n_samples"]), int(corpus["n_windows"]))
    blocks = np.array_split(np.arange(windows), min(int(spectra["n_groups"]), windows))
    return np.array([len(b) * (int(corpus["window_tokens"]) - 1) for b in blocks], dtype=np.int64)


def weighted_mean(groups: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """J̄ (float64) from the float32 group means, weighted by their samples (as the Jacobian job writes it)."""
    w = np.asarray(counts, dtype=np.float64) / np.sum(counts)
    mean = np.zeros(groups.shape[1:], dtype=np.float64)
    for g in range(len(groups)):
        mean += w[g] * groups[g]
    return mean


def boundary(d: int, counts: np.ndarray, seed: int, rank: int = 32, noise: float = 0.02):
    """An MLP-like boundary, (J̄ float64 (d, d), group means float32 (G, d, d)): a Gaussian bulk of spectral norm
    ≈ 1 plus a rank-`rank` part of norm ≈ 1 (full rank, non-normal: Henrici departure ≈ 0.7); each group mean is
    the bulk + low-rank matrix plus `noise` of the bulk; J̄ their weighted mean."""
    rng = np.random.default_rng(seed)
    base = 0.5 * rng.standard_normal((d, d)) / np.sqrt(d)
    base += rng.standard_normal((d, rank)) @ rng.standard_normal((rank, d)) / d
    groups = np.empty((len(counts), d, d), dtype=np.float32)
    for g in range(len(counts)):
        groups[g] = base + noise * 0.5 * rng.standard_normal((d, d)) / np.sqrt(d)
    return weighted_mean(groups, counts), groups


#: the noise floor of an attention J̄ beyond its grouped-query rank, as a fraction of ‖J̄‖_F: SmolLM2-135M's 30
#: attention J̄ of the default run (results/smollm2-135m/trained/jacobians/L*.attn.npy, d = 576, rank 192) carry
#: 1.1–2.4e-7 of their Frobenius norm in the singular values beyond their rank (the mean here; L0.attn 1.3e-7);
#: a group mean carries the same share (float32 rounding of the Jacobians, common to the sample groups)
ATTN_FLOOR = 1.7e-7


def attention_boundary(d: int, counts: np.ndarray, seed: int, rank: int | None = None, floor: float = ATTN_FLOOR,
                       noise: float = 0.02):  # fmt: skip
    """An attention-like boundary of grouped-query rank r (default d/4: Llama-3.1-8B's n_kv·d_head = 1024 at
    d = 4096), (J̄ float64, group means float32 (G, d, d), its description): each group mean A(B + `noise`·Ξ_g) + E
    in float32, A (d, r) and B (r, d) Gaussian (‖AB‖_F = ½√r, Ξ_g of B's scale), E a Gaussian noise floor shared
    by the groups whose part outside the rank is `floor` ‖AB‖_F; the description holds r, the floor and the share
    of ‖J̄‖_F outside A's column space (the floor, and float32 storage)."""
    r = int(rank or d // 4)
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((d, r)) / np.sqrt(d)
    B = rng.standard_normal((r, d)) / np.sqrt(r)
    A *= 0.5 * np.sqrt(r) / np.linalg.norm(A @ B)
    fro = 0.5 * np.sqrt(r)
    E = rng.standard_normal((d, d))
    E *= floor * fro * np.sqrt(d / (d - r)) / np.linalg.norm(E)  # (d − r)/d of its square outside the rank
    groups = np.empty((len(counts), d, d), dtype=np.float32)
    for g in range(len(counts)):
        groups[g] = A @ (B + noise * rng.standard_normal((r, d)) / np.sqrt(r)) + E
    mean = weighted_mean(groups, counts)
    Qa, _ = np.linalg.qr(A)
    tail = float(np.linalg.norm(mean - Qa @ (Qa.T @ mean)) / np.linalg.norm(mean))
    return mean, groups, {"rank": r, "floor": floor, "tail": tail}


def boundary_kinds(d: int, counts: np.ndarray, floor: float = ATTN_FLOOR) -> dict:
    """{"attention": (J̄, groups, description), "mlp": (J̄, groups, description)} at width d (seeds 0 and 1)."""
    J, groups, info = attention_boundary(d, counts, seed=0, floor=floor)
    Jm, gm = boundary(d, counts, seed=1)
    return {"attention": (J, groups, info), "mlp": (Jm, gm, {"rank": d})}


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
def bench_spectra_one(J, groups, counts, cfg, name: str, device: str = "cpu") -> dict:
    """write_spectra's work on one boundary: deviations, decomposition, metrics and linearised replicates."""
    d = J.shape[0]
    reps = intervals.replicates(counts, cfg["ci_blocks"])
    tol = rank_tolerance(d, cfg["dtype"], cfg["rank_tol"])
    t = {"K": reps.K}
    D, t["deviations_s"] = timed(intervals.deviations, J, groups, counts, reps)
    dec, t["decompose_s"] = timed(decompose, J, device=device)

    def row_with_intervals():  # as write_spectra: the row, then its intervals
        row, _ = spectra_row(name, J, int(counts.sum()), sr_k=cfg["sr_k"], tol=tol, dec=dec, device=device)
        return row | spectra_intervals(J, dec, row, D, reps.weights, tol=tol, ci_level=cfg["ci_level"],
                                       ci_method=cfg["ci_method"], device=device)  # fmt: skip

    row, t["metrics_and_replicates_s"] = timed(row_with_intervals)
    _, t["eigenvalue_frame_s"] = timed(eigenvalue_frame, name, dec, tol)
    t["boundary_s"] = t["deviations_s"] + t["decompose_s"] + t["metrics_and_replicates_s"] + t["eigenvalue_frame_s"]
    t["henrici"] = row["henrici"]  # < 0.1 would make each replicate's Henrici departure an exact eigvals
    return t


SPECTRA_PARTS = ("deviations_s", "decompose_s", "metrics_and_replicates_s", "eigenvalue_frame_s", "boundary_s")


def bench_spectra(kinds: dict, counts, cfg, device: str = "cpu") -> dict:
    """``bench_spectra_one`` on each kind of boundary (attention, MLP); the parts' means (the blocks alternate the
    kinds), each kind's own under ``by_kind``."""
    by_kind = {}
    for kind, (J, groups, _) in kinds.items():
        by_kind[kind] = bench_spectra_one(J, groups, counts, cfg, f"L0.{kind}", device)
        log(f"spectra d={J.shape[0]} {kind}: {by_kind[kind]}")
    parts = {k: mean(t[k] for t in by_kind.values()) for k in SPECTRA_PARTS}
    return with_cpu({"K": next(iter(by_kind.values()))["K"], **parts, "by_kind": by_kind})


#: the boundaries a product chain is timed through, in depth order (the blocks of Llama-3.1-8B and OLMo-3-7B
#: alternate them). The `update` products of a real chain are numerically low rank only after the second
#: attention boundary: SmolLM2-135M's first attention J̄ carries a float32 noise floor (``ATTN_FLOOR``) beyond
#: its rank whose share of the entropy is above what ``linalg.certified_svd`` may leave out, so depths 1 and 2
#: take the full SVD; the next attention boundary multiplies that floor by ~1e-7 and depths 3 onwards take the
#: certified low-rank route. The 4th depth's step is that of the chain's remaining depths.
CHAIN_DEPTHS = ("attention", "mlp", "attention", "mlp")


def bench_cumulative(kinds: dict, counts, cfg, device: str = "cpu") -> dict:
    """``cumulative_rows`` of one variant at a time (a ``spectra_cumulative_variant`` job) through ``CHAIN_DEPTHS``,
    the last boundary timed (``variant_s``, with the replicates' deviations that each variant's job forms,
    timed apart: ``deviations_s``). The one job's boundary (both variants) forms the deviations once."""
    reps = intervals.replicates(counts, cfg["ci_blocks"])
    out = {"K": reps.K, "variant_s": {}, "deviations_s": {}}

    def steps(marks: list, dev: list):  # as write_cumulative: the deviations computed as the boundary is read
        for i, kind in enumerate(CHAIN_DEPTHS):
            J, groups, _ = kinds[kind]
            marks.append(Seconds(time.perf_counter(), time.process_time()))
            D, t = timed(intervals.deviations, J, groups, counts, reps)
            dev.append(t)
            yield f"L{i}.{kind}", J, D

    for v in VARIANTS:
        marks, dev = [], []
        _, total = timed(cumulative_rows, steps(marks, dev), [v], weights=reps.weights, ci_level=cfg["ci_level"],
                         device=device)  # fmt: skip
        out["variant_s"][v] = marks[0] + total - marks[-1]
        out["deviations_s"][v] = dev[-1]
        log(f"cumulative {v}: {out['variant_s'][v]:.1f} s at depth {len(CHAIN_DEPTHS)} (deviations {dev[-1]:.1f} s)")
    dev = mean(out["deviations_s"].values())
    out["boundary_s"] = dev + sum(out["variant_s"][v] - out["deviations_s"][v] for v in VARIANTS)
    return with_cpu(out)


class _Timestamped(dict):
    """A mapping that notes when each key is first read (schur_surgery reads J̄_b as a boundary starts)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read_at = {}

    def __getitem__(self, key):
        self.read_at.setdefault(key, time.perf_counter())
        return super().__getitem__(key)


def bench_schur(bounds, counts, cfg, seed: int, device: str = "cpu") -> dict:
    """schur_surgery (the single job) with the config's α, orders, Schur blocks and controls on two boundaries; the
    second one timed."""
    d = bounds[0][0].shape[0]
    reps = intervals.replicates(counts, cfg["schur_ci_blocks"]) if cfg["schur_ci_blocks"] else None
    names = [f"L{i}.mlp" for i in range(len(bounds))]
    jac = _Timestamped({n: J for n, (J, _) in zip(names, bounds)})

    class Devs(dict):  # as jobs.schur._Deviations: computed when read
        def __getitem__(self, name):
            J, groups = bounds[names.index(name)]
            return intervals.deviations(J, groups, counts, reps)

    devs = None if reps is None else Devs.fromkeys(names)
    t0 = time.perf_counter()
    schur_surgery(
        jac, alphas=cfg["alphas"], seed=seed, sr_k=cfg["sr_k"], tol=rank_tolerance(d, cfg["dtype"], cfg["rank_tol"]),
        boundary_metrics=cfg["schur_boundary_metrics"], orders=cfg["schur_orders"], deviations=devs,
        weights=None if reps is None else reps.weights, ci_level=cfg["ci_level"], ci_controls=cfg["schur_ci_controls"],
        order_alphas=cfg["schur_order_alphas"], device=device,
    )  # fmt: skip
    end = time.perf_counter()
    b2 = jac.read_at[names[1]]
    return {"d": d, "K": 0 if reps is None else reps.K, "boundary1_s": b2 - t0, "boundary_s": end - b2}


# ---- the Schur surgery as its fanned-out jobs take it ---------------------------------------------------------
def chain_step_input(prep, J, groups, counts, reps, chain: tuple, cfg: dict) -> BoundaryStep:
    """What a chain job reads at one depth (``jobs.schur.write_schur_chain``): a SurgeryBoundary rebuilt from the
    prep's arrays (the Schur form; R' for a random control: nothing cached by another chain), the tangents the
    chain reads (δJ₀, δ‖N‖/‖N‖ and a random control's δR'), the replicates' deviations Δ_k where it carries an
    interval (formed from the group means, as the job does) and an order's eigenvectors Y."""
    ci = set(cfg["schur_ci_controls"])
    b, tan, run = prep.boundary, prep.tangent, chain[0] == "run"
    needs_D = reps is not None and run and wants_interval(chain[2], chain[3], ci)
    random = run and chain[3] == "random"
    fresh = SurgeryBoundary(J=b.J, form=b.form, seed=b.seed, index=b.index, Rr=b.R_rand if random else None)
    t = None
    if needs_D and chain[2:] != (1.0, "none"):
        t = SchurTangent(W=None, dlam=None, dJ0=tan.dJ0, dnorm_rel=tan.dnorm_rel, dRr=tan.dRr if random else None)
    D = intervals.deviations(J, groups, counts, reps) if needs_D else None
    return BoundaryStep(fresh, t, D, prep.Y if chain[0] == "order" else None, int(cfg["schur_orders"]), ci)


def bench_schur_chains(kinds: dict, counts, cfg, seed: int, device: str = "cpu", steps: bool = True) -> dict:
    """The fanned-out Schur surgery's work per boundary at the bench width: ``prepare_boundary`` on each kind of
    boundary (``prep_s``: their mean), and per cost class (``resources.schur_chain_class``) its first chain of
    ``schur_chains`` through ``CHAIN_DEPTHS`` as a chain job takes it (``chain_step_input``): advance-only at
    depths 1–3 (depths 2 and 3 timed: ``advance_s`` per ``schur_chain_base``, the mean over the variants), then
    (`steps`) a full step at depth 4 (``step_s``, its products' singular-value routes in ``routes``; an order's
    split in ``order_s``: J₀^π, and per α each variant's products and singular values). Per boundary of one
    job: prep + Σ_class (chains of the class × its step)."""
    d = next(iter(kinds.values()))[0].shape[0]
    reps = intervals.replicates(counts, cfg["schur_ci_blocks"]) if cfg["schur_ci_blocks"] else None
    tol = rank_tolerance(d, cfg["dtype"], cfg["rank_tol"])
    alphas, orders = schur_alphas(cfg["alphas"]), int(cfg["schur_orders"])
    spread = schur_order_alphas(alphas, cfg["schur_order_alphas"])
    ci = cfg["schur_ci_controls"]
    count, example = {}, {}
    for ch in schur_chains(alphas, orders, order_alphas=spread):
        cls = R.schur_chain_class(cfg, ch)
        count[cls] = count.get(cls, 0) + 1
        example.setdefault(cls, ch)
    out = {"d": d, "K": 0 if reps is None else reps.K, "order_alphas": spread, "depths": list(CHAIN_DEPTHS),
           "chains": count, "examples": {c: list(ch) for c, ch in example.items()}, "boundaries": {}}  # fmt: skip
    preps = {}
    for i, (kind, (J, groups, info)) in enumerate(kinds.items()):
        D = None if reps is None else intervals.deviations(J, groups, counts, reps)
        preps[kind], t = timed(prepare_boundary, f"L0.{kind}", J, D, index=i, seed=seed, tol=tol, sr_k=cfg["sr_k"],
                               alphas=alphas, boundary_metrics=cfg["schur_boundary_metrics"], orders=orders,
                               ci_controls=ci, order_alphas=spread, device=device)  # fmt: skip
        del D
        form = preps[kind].boundary.form
        out["boundaries"][kind] = {**info, "prep_s": t, "henrici": henrici_departure(J, form.lam),
                                   "n_nonzero": int(form.n_nonzero)}  # fmt: skip
        log(f"schur prep d={d} {kind}: {t:.1f} s, {out['boundaries'][kind]}")
    out["prep_s"] = mean(b["prep_s"] for b in out["boundaries"].values())
    kw = {"alphas": alphas, "weights": None if reps is None else reps.weights, "ci_level": cfg["ci_level"],
          "device": device, "order_alphas": spread}  # fmt: skip

    def at(depth: int, ch: tuple):
        kind = CHAIN_DEPTHS[depth - 1]
        J, groups, _ = kinds[kind]
        return chain_step_input(preps[kind], J, groups, counts, reps, ch, cfg)

    def step_at(depth: int, ch: tuple, chains: dict, advance: bool):  # a chain job's depth: its input, its step
        return step_chain(ch, chains, at(depth, ch), advance=advance, **kw)

    advance, step_s, routes = {}, {}, {}
    for cls, ch in example.items():
        chains = {}
        for depth in range(1, len(CHAIN_DEPTHS)):  # the prefix: products only
            _, t = timed(step_at, depth, ch, chains, True)
            if depth > 1:  # the first depth copies M: no product
                advance.setdefault(R.schur_chain_base(cfg, ch), []).append(t)
        log(f"schur chain advance d={d} {cls} ({ch}): {advance[R.schur_chain_base(cfg, ch)][-2:]} s")
        if not steps:
            continue
        last = len(CHAIN_DEPTHS)
        if ch[0] == "order":  # J₀^π, then each variant's products and singular values at every α
            st, t_in = timed(at, last, ch)
            _, t_basis = timed(st.order_normal_part, ch[1])
            parts = {"basis": t_in + t_basis}
            for v in VARIANTS:
                _, parts[v] = timed(step_chain, ch, chains, st, variants=[v], **kw)
            out["order_s"] = {"basis": parts["basis"], **{v: parts[v] / max(1, len(spread)) for v in VARIANTS}}
            step_s[cls] = sum(parts.values())
        else:
            _, step_s[cls] = timed(step_at, last, ch, chains, False)
        routes[cls] = {"/".join(map(str, key)): dict(c.routes) for key, c in chains.items()}
        log(f"schur chain step d={d} {cls} ({ch}): {step_s[cls]:.1f} s, routes {routes[cls]}")
    out["advance_s"] = {base: mean(ts) for base, ts in advance.items()}
    if steps:
        out |= {"step_s": step_s, "routes": routes,
                "boundary_s": out["prep_s"] + sum(count[c] * step_s[c] for c in step_s)}  # fmt: skip
    return with_cpu(out)


# ---- one checkpoint fanned out: its jobs on `concurrent` slots ------------------------------------------------
def config_chain_segments(out: dict, segments: int | None = None) -> tuple[int, list[tuple[str, str, tuple[int, int]]]]:
    """(spectra.chain_segments of the bench's config file for the first model, as read now, or `segments`; and
    (class, base, (start, end)) of every chain job it makes: ``resources.schur_chain_segments``, the workflow's
    bounds, with RATES as they are now)."""
    spectra = config_spectra(out)
    S = int(spectra.get("chain_segments") or 1) if segments is None else int(segments)
    spectra = spectra | {"chain_segments": S}
    B = out["models"][MODELS[0]]["boundaries"]
    plan = schur_chains(spectra["alphas"], spectra["schur_orders"], order_alphas=spectra["schur_order_alphas"])
    jobs = [(R.schur_chain_class(spectra, ch), R.schur_chain_base(spectra, ch), seg)
            for ch in plan for seg in R.schur_chain_segments(B, spectra, ch)]  # fmt: skip
    return S, jobs


def config_spectra(out: dict) -> dict:
    """The spectra section of the bench's config file for the first model (read now)."""
    path = Path(out["config"]["file"])
    config = lgconfig.load(path if path.is_absolute() else ROOT / path)
    return lgconfig.model_section(config, MODELS[0], "spectra")


def chain_segment_jobs(chains: dict, segments: list[tuple[str, str, tuple[int, int]]]) -> list[float]:
    """Seconds of each Schur chain job at the measured speeds: per chain job (class, base, (start, end)) of
    ``config_chain_segments``, the advance-only step of its base (``advance_s``) × start + its class's full step
    × (end − start)."""
    adv = chains.get("advance_s", {})
    out = []
    for cls, base, (start, end) in segments:
        if start and base not in adv:
            raise SystemExit(f"no advance-only timing of the {base} chains: run --jobs schur_chains first")
        out.append(start * adv.get(base, 0.0) + (end - start) * chains["step_s"][cls])
    return out


def schedule_s(preps: list[float], others: list[float], chains: list[float], concurrent: int,
               longest_first: bool = True) -> tuple[float, float]:  # fmt: skip
    """(when the last job ends, when the last chain job ends): a list schedule of one checkpoint's fanned-out jobs
    (seconds) on `concurrent` slots, each job on the slot that frees first, in the workflow's priorities: the
    Schur preps first (every chain job waits on every prep: ``schur_prep_priority``), then the chain jobs once
    the last prep has ended, longest first (``schur_chain_priority``; `longest_first` False: shortest first, the
    worst order), ahead of the jobs of priority 0 (table parts, graph blocks, cumulative variants, convergence
    sizes: here longest first), which take the slots the others leave."""
    free = [0.0] * concurrent
    preps, others = sorted(preps, reverse=True), sorted(others, reverse=True)
    chains = sorted(chains, reverse=longest_first)
    release = 0.0 if not preps else None  # the last prep's end, known once the last prep has started
    end = chain_end = 0.0
    while preps or others or chains:
        t = heapq.heappop(free)
        if preps:
            job = preps.pop(0)
            release = max(release or 0.0, t + job)
        elif chains and (t >= release or not others):
            t = max(t, release)
            job = chains.pop(0)
            chain_end = max(chain_end, t + job)
        else:
            job = others.pop(0)
        heapq.heappush(free, t + job)
        end = max(end, t + job)
    return end, chain_end


def first_wave_n(B: int, through: int, concurrent: int) -> int:
    """The smallest spectra.boundaries_per_job whose jobs per block (table part, Schur prep, graph block: 3 per
    block) and the jobs through depth fit in `concurrent` slots at once."""
    return next((n for n in range(1, B + 1) if 3 * -(-B // n) + through <= concurrent), B)


def critical_path(
    summary: dict,
    chains: dict | None,
    n_boundaries: int,
    concurrent: int = 64,
    *,
    boundaries_per_job: int | None = None,
    cumulative_variant_s: dict | None = None,
    convergence_sizes_s: dict | None = None,
    chain_segments: list[tuple[str, str, tuple[int, int]]] | None = None,
) -> dict:
    """Wall hours of one checkpoint's fanned-out analysis with `concurrent` jobs at this machine's speed, from the
    measured per-boundary times: ``schedule_s`` of its jobs, with n = `boundaries_per_job` (None: ``first_wave_n``):
    per block of n boundaries a table part, a Schur prep and a graph block; the cumulative table's job per variant
    and the convergence table's per subset size, through depth; the Schur chain jobs after the preps
    (`chain_segments`: (class, base, (start, end)) per chain job; default one job per chain of
    ``chains["chains"]`` through every boundary). ``paths_hours``: each kind's longest job, and the end of the
    last chain job.

    ``cumulative_variant_s``: seconds per boundary of each variant's job (:func:`cumulative_variant_boundary_s`);
    ``convergence_sizes_s``: seconds per checkpoint of each size's job (:func:`convergence_size_s`). Without
    them (an old long_jobs.json) the two stay one job each, at the two-variant and all-sizes times."""
    B = n_boundaries
    if chains is not None and chain_segments is None:
        chain_segments = [(c, None, (0, B)) for c, k in chains["chains"].items() for _ in range(k)]
    per = {job: s["boundary_s"] for job, s in summary.items()}
    variants = cumulative_variant_s or {"": per.get("spectra_cumulative", 0.0)}
    sizes = convergence_sizes_s or {"all": B * per.get("spectra_convergence", 0.0)}
    through = len(variants) + len(sizes)
    n = boundaries_per_job or first_wave_n(B, through, concurrent)
    blocks = [min(n, B - i) for i in range(0, B, n)]
    others = [b * per.get(job, 0.0) for job in ("spectra_table", "topology_graph") for b in blocks]
    others += [B * s for s in variants.values()] + list(sizes.values())
    paths = {"spectra_table_part": n * per.get("spectra_table", 0.0),
             "topology_graph_block": n * per.get("topology_graph", 0.0)}  # fmt: skip
    for v, s in variants.items():
        paths[f"spectra_cumulative_variant ({v})" if v else "spectra_cumulative"] = B * s
    S = max(sizes, key=sizes.get)
    paths[f"spectra_convergence_subset (S = {S})" if S != "all" else "spectra_convergence"] = sizes[S]
    preps, jobs = [], []
    if chains is not None:
        preps = [b * chains["prep_s"] for b in blocks]
        jobs = chain_segment_jobs(chains, chain_segments)
    end, chain_end = schedule_s(preps, others, jobs, concurrent)
    if chains is not None:
        paths["spectra_schur_prep + chain"] = chain_end
    hours = {k: v / 3600 for k, v in paths.items()}
    out = {"boundaries_per_job": n, "jobs": 3 * len(blocks) + len(jobs) + through, "chain_jobs": len(jobs),
           "paths_hours": hours, "hours": end / 3600}  # fmt: skip
    if chains is not None:  # the chain jobs started shortest first (what the priorities prevent)
        out["hours_chains_shortest_first"] = schedule_s(preps, others, jobs, concurrent, longest_first=False)[0] / 3600
    return out


def cumulative_variant_boundary_s(res: dict, d: int) -> dict | None:
    """Seconds per boundary of each variant's cumulative job: measured (``bench_cumulative``'s ``variant_s``), or
    for an older measurement of the two-variant step, half of it less the replicates' deviations (``spectra_table``'s,
    the same K at the same d: each variant's job forms them again), the deviations added back."""
    cum = res.get("spectra_cumulative", {}).get(d)
    if cum is None:
        return None
    if "variant_s" in cum:
        return dict(cum["variant_s"])
    table = res.get("spectra_table", {}).get(d, {})
    dev = table.get("deviations_s", 0.0) if table.get("K") == cum["K"] else 0.0
    return {v: dev + (cum["boundary_s"] - dev) / 2 for v in VARIANTS}


def convergence_size_s(conv: dict, n_boundaries: int, n_edge: int) -> dict:
    """Seconds per checkpoint of each subset size's job: :func:`convergence_checkpoint_s` over that size alone."""
    return {S: convergence_checkpoint_s({**conv, "sizes": [S]}, n_boundaries, n_edge) for S in conv["sizes"]}


def _path_inputs(out: dict, d: int) -> dict:
    """The keyword arguments of ``critical_path`` from the measurements (cumulative variants, convergence sizes)."""
    res, B = out["results"], out["models"][MODELS[0]]["boundaries"]
    conv = res.get("spectra_convergence", {}).get(d)
    sizes = None if conv is None else convergence_size_s(conv, B, int(out["config"]["convergence_boundaries"]))
    return {"cumulative_variant_s": cumulative_variant_boundary_s(res, d), "convergence_sizes_s": sizes}


def prefix_hours(chains: dict, segments) -> float:
    """CPU-hours of the chain segments' repeated prefix products (the advance-only steps before each start)."""
    return sum(start * chains["advance_s"][base] for _, base, (start, _) in segments) / 3600


#: the fan-outs ``fanout_alternatives`` compares: spectra.boundaries_per_job × spectra.chain_segments
ALTERNATIVE_BLOCKS = (1, 2, 4, 8, 16)
ALTERNATIVE_SEGMENTS = (1, 2, 3, 4, 6, 8)


def fanout_alternatives(out: dict, d: int) -> list[dict]:
    """The critical path on 64 concurrent jobs and the CPU-hours of the repeated prefix products for each
    spectra.boundaries_per_job × spectra.chain_segments of ``ALTERNATIVE_*`` (the chain segments with RATES as they
    are now), as ``critical_path`` schedules them: what papers.yaml's keys are chosen from."""
    chains = out["results"]["spectra_schur_chains"][d]
    B, rows = out["models"][MODELS[0]]["boundaries"], []
    for S in ALTERNATIVE_SEGMENTS:
        _, segments = config_chain_segments(out, S)
        for n in ALTERNATIVE_BLOCKS:
            cp = critical_path(out["summary"], chains, B, boundaries_per_job=n, chain_segments=segments,
                               **_path_inputs(out, d))  # fmt: skip
            rows.append({"boundaries_per_job": n, "chain_segments": S, "hours": cp["hours"], "jobs": cp["jobs"],
                         "chain_jobs": cp["chain_jobs"], "prefix_cpu_hours": prefix_hours(chains, segments)})  # fmt: skip
    return rows


def checkpoint_totals(out: dict, d: int) -> dict:
    """The per-checkpoint hours of the first model with the config's fan-out (the cumulative table as its variants'
    jobs, the Schur chains as the config's spectra.chain_segments make them: the segments' repeated prefix products
    count, ``spectra_schur_chain_prefixes``; ``total_one_job_per_chain`` without them), and the critical path of
    the config's spectra.boundaries_per_job and chain segments (and with one job per chain), and the alternatives'."""
    hours = {job: s["per_checkpoint_min"][MODELS[0]] / 60 for job, s in out["summary"].items()}
    res, B = out["results"], out["models"][MODELS[0]]["boundaries"]
    variants = cumulative_variant_boundary_s(res, d)
    if variants is not None and "variant_s" in res["spectra_cumulative"][d]:  # its variants' jobs, as fanned out
        hours["spectra_cumulative"] = B * sum(variants.values()) / 3600
    chains = res.get("spectra_schur_chains", {}).get(d)
    if chains is not None and "step_s" not in chains:
        chains = None  # advance-only timings alone
    S, segments = config_chain_segments(out)
    if chains is not None:
        hours["spectra_schur_chain_prefixes"] = prefix_hours(chains, segments)
    got = {"hours": hours | {"total": sum(hours.values())}}
    if "spectra_schur_chain_prefixes" in hours:
        got["hours"]["total_one_job_per_chain"] = sum(hours.values()) - hours["spectra_schur_chain_prefixes"]
    n = config_spectra(out).get("boundaries_per_job")
    kw = _path_inputs(out, d)
    cp = critical_path(out["summary"], chains, B, boundaries_per_job=n, chain_segments=segments, **kw)
    got["critical_path"] = cp | {"chain_segments": S}
    if chains is not None and S > 1:
        _, one = config_chain_segments(out, 1)
        got["one_job_per_chain"] = critical_path(out["summary"], chains, B, boundaries_per_job=n,
                                                 chain_segments=one, **kw)  # fmt: skip
    if chains is not None:
        got["alternatives"] = fanout_alternatives(out, d)
    return got


def totals(out: dict, d: int) -> None:
    """``checkpoint_totals`` into `out`: at the measured wall times (``per_checkpoint_<cpu|gpu>_hours``,
    ``critical_path_hours_64_jobs``, ``fanout_alternatives``), and on the CPU, where the timings carry their CPU
    seconds, at those seconds over the machine's cores (``cpu_time``: the wall of a machine of these cores
    with no other load, a lower bound; the measured wall on a loaded machine an upper one)."""
    kind = "cpu" if out.get("device", "cpu") == "cpu" else "gpu"
    got = checkpoint_totals(out, d)
    out[f"per_checkpoint_{kind}_hours"] = got["hours"]
    out["critical_path_hours_64_jobs"] = got["critical_path"]
    for key, part in (("critical_path_hours_64_jobs_one_job_per_chain", "one_job_per_chain"),
                      ("fanout_alternatives", "alternatives")):  # fmt: skip
        out.pop(key, None)
        if part in got:
            out[key] = got[part]
    out.pop("cpu_time", None)
    twins = [e for by_d in out["results"].values() for e in by_d.values() if isinstance(e, dict) and "cpu" in e]
    if kind == "cpu" and twins:
        c = out["config"]
        view = cpu_view(out, out["machine"]["cpus"])
        view["summary"] = summarise(view, d, c["config_tokens"], int(c["convergence_boundaries"]))
        ideal = checkpoint_totals(view, d)
        out["cpu_time"] = {"cores": out["machine"]["cpus"], "per_checkpoint_hours": ideal["hours"],
                           "critical_path_hours_64_jobs": ideal["critical_path"],
                           "fanout_alternatives": ideal.get("alternatives")}  # fmt: skip


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
    sizes = convergence_sizes(len(counts), cfg["convergence_sizes"])
    out = {"sizes": sizes, "plain_s": {}, "edge_s": {}}

    def fresh_chains(S):  # one boundary already composed (its first step copies M: no product)
        sub = np.asarray(counts)[:S]
        preps = intervals.replicates(sub, 4)
        Jp = np.tensordot(sub / sub.sum(), np.asarray(groups[:S], dtype=np.float64), axes=1)
        Dp = intervals.deviations(Jp, groups[:S], sub, preps)
        chains = {v: ProductChain(0.0, device, lowrank=v == "update") for v in VARIANTS}  # as convergence_rows
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
    return with_cpu(out)


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
    return with_cpu({"d": d, "tokens": tokens, "boundary_s": total, "correlation_s": corr,
                     "communities": topo.summary["n_communities"],
                     "edges": topo.summary["n_edges_pos"] + topo.summary["n_edges_neg"]})  # fmt: skip


# ---- main ------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(ROOT / "config" / "papers.yaml"))
    ap.add_argument("--d", type=int, default=4096, help="papers width (Llama-3.1-8B, OLMo-3-7B)")
    ap.add_argument("--small-d", type=int, default=2048, help="second width for the spectra and cumulative d-scaling")
    ap.add_argument("--schur-dims", type=int, nargs="+", default=[1024, 2048],
                    help="widths of the one-job Schur bench (--jobs schur)")  # fmt: skip
    ap.add_argument("--tokens", type=int, default=None, help="topology tokens (default windows × window_tokens)")
    ap.add_argument("--attn-floor", type=float, default=ATTN_FLOOR,
                    help="the attention J̄'s noise floor beyond its rank, a fraction of ‖J̄‖_F")  # fmt: skip
    ap.add_argument("--jobs", nargs="+",
                    default=["rates", "spectra", "cumulative", "schur_chains", "convergence", "topology"],
                    help="schur_chains: the Schur preps, and per cost class a chain's advance-only steps (a chain "
                         "segment's prefix) and full step at --d; schur_advance (alone): the advance-only steps "
                         "again, merged into the existing long_jobs.json, which is then rendered; schur: whole "
                         "boundaries of the one job at --schur-dims")  # fmt: skip
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the existing long_jobs.json's results of the jobs not run (same config file and d)",
    )
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
    path = Path(args.out)
    out = {
        "machine": {**machine_info(os.cpu_count()), "cpus": os.cpu_count(), "numpy": np.__version__,
                    "scipy": scipy.__version__, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "unset"),
                    "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "unset"), "runs": []},  # fmt: skip
        "config": {"file": str(Path(args.config).relative_to(ROOT)) if Path(args.config).is_absolute() else args.config,
                   "group_counts": counts.tolist(), "tokens": tokens, "config_tokens": config_tokens,
                   **{k: cfg[k] for k in ("n_groups", "ci_blocks", "ci_method", "sr_k", "alphas", "schur_orders",
                                          "schur_order_alphas", "schur_ci_blocks", "schur_ci_controls",
                                          "schur_boundary_metrics", "convergence_sizes", "convergence_boundaries",
                                          "dtype")},
                   "attn_floor": args.attn_floor,
                   "topology": {k: tcfg[k] for k in ("top_k", "resolution", "resolution_sweep", "chunk_tokens")}},
        "d": args.d,
        "device": args.device,
        "models": models,
        "results": {},
    }  # fmt: skip
    if args.merge and (path / "long_jobs.json").exists():
        old = from_json(json.loads((path / "long_jobs.json").read_text()))
        mismatch = [k for k in ("d", "device") if old.get(k) != out[k]]
        mismatch += [k for k in out["config"] if k != "tokens" and old["config"].get(k) != out["config"][k]]
        if mismatch:
            raise SystemExit(f"--merge: long_jobs.json was measured with other {', '.join(mismatch)}; run without it")
        out["results"] = old["results"]
        out["machine"]["runs"] = old["machine"].get("runs", [])
    res = out["results"]
    run = {
        "jobs": list(args.jobs),
        "started": time.strftime("%Y-%m-%d %H:%M"),
        "load_average_at_start": os.getloadavg(),
    }
    t_start = time.perf_counter()
    LOAD_MAX[0] = 0.0
    log(f"start {args.jobs}; group counts {counts.tolist()}")

    def save():  # the raw results so far (a later part may fail)
        path.mkdir(parents=True, exist_ok=True)
        (path / "long_jobs.json").write_text(json.dumps(out, indent=2, default=float) + "\n")

    if "rates" in args.jobs:
        res["rates"] = {d: rates(d) for d in sorted({args.small_d, args.d})}
        log(f"rates: {res['rates']}")
    big = {}

    def mats(d):
        if d not in big:
            big.clear()  # one width in memory at a time
            big[d] = boundary_kinds(d, counts, args.attn_floor)
            log(f"boundaries d={d}: attention {big[d]['attention'][2]}")
        return big[d]

    for d in sorted({args.small_d, args.d}) if {"spectra", "cumulative"} & set(args.jobs) else ():
        if "spectra" in args.jobs:
            res.setdefault("spectra_table", {})[d] = bench_spectra(mats(d), counts, cfg, args.device)
            save()
        if "cumulative" in args.jobs:
            res.setdefault("spectra_cumulative", {})[d] = bench_cumulative(mats(d), counts, cfg, args.device)
            log(f"cumulative d={d}: {res['spectra_cumulative'][d]}")
            save()
    if "schur_chains" in args.jobs:
        res["spectra_schur_chains"] = {args.d: bench_schur_chains(mats(args.d), counts, cfg, seed, args.device)}
        log(f"schur chains d={args.d}: {res['spectra_schur_chains'][args.d]}")
        save()
    if "convergence" in args.jobs:
        J, groups, _ = mats(args.d)["mlp"]
        res["spectra_convergence"] = {args.d: bench_convergence(J, groups, counts, cfg, args.device)}
        save()
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
    run |= {"load_average_at_end": os.getloadavg(), "load_average_1min_max": LOAD_MAX[0],
            "wall_s": time.perf_counter() - t_start}  # fmt: skip
    out["machine"]["runs"].append(run)
    save()
    out["summary"] = summarise(out, args.d, config_tokens, int(cfg["convergence_boundaries"]))
    totals(out, args.d)  # job -> hours for one Llama-3.1-8B checkpoint on this device, and the critical path
    save()
    md = markdown(out)
    (path / "long_jobs.md").write_text(md)
    print(md)


def merge_schur_advance(args) -> None:
    """``--jobs schur_advance``: time the advance-only chain steps again (``bench_schur_chains`` without its
    steps) at --d with the config's settings, put them beside the chain steps of long_jobs.json
    (``spectra_schur_chains``, same d) and render it again (``--render``)."""
    path = Path(args.out)
    out = from_json(json.loads((path / "long_jobs.json").read_text()))
    if args.d not in out["results"].get("spectra_schur_chains", {}):
        raise SystemExit(f"long_jobs.json has no schur_chains timing at d = {args.d}: run --jobs schur_chains first")
    config = lgconfig.load(args.config)
    cfg = lgconfig.model_section(config, MODELS[0], "spectra")
    counts = group_counts(config["corpus"], cfg)
    run = {"jobs": ["schur_advance"], "started": time.strftime("%Y-%m-%d %H:%M"),
           "load_average_at_start": os.getloadavg()}  # fmt: skip
    t_start = time.perf_counter()
    log(f"start (schur_advance at d = {args.d})")
    adv = bench_schur_chains(boundary_kinds(args.d, counts, out["config"].get("attn_floor", ATTN_FLOOR)), counts,
                             cfg, config["seed"], args.device, steps=False)  # fmt: skip
    out["results"]["spectra_schur_chains"][args.d]["advance_s"] = adv["advance_s"]
    out["machine"].setdefault("runs", []).append(run | {"load_average_at_end": os.getloadavg(),
                                                        "load_average_1min_max": LOAD_MAX[0],
                                                        "wall_s": time.perf_counter() - t_start})  # fmt: skip
    (path / "long_jobs.json").write_text(json.dumps(out, indent=2, default=float) + "\n")
    log(f"schur advance d={args.d}: {adv['advance_s']}")
    args.render = True
    render(args)


def render(args) -> None:
    """Rewrite long_jobs.md (and the derived summary, totals and critical paths of long_jobs.json) from
    long_jobs.json."""
    path = Path(args.out)
    out = from_json(json.loads((path / "long_jobs.json").read_text()))
    c = out["config"]
    out["summary"] = summarise(out, out["d"], c["config_tokens"], int(c["convergence_boundaries"]))
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
    """Bytes of one resume snapshot of the single jobs (the product chains: C and its tangents), in GB, at width d.

    cumulative: 2 variants × (C float64 + K float32 tangents); Schur, per variant (α = 1 with its own N is
    cumulative.tsv's, not composed): the α < 1 of the own N complex (complex128 C, K complex64 tangents),
    the random control (complex128 C, and K complex64 tangents where it carries intervals), and a complex128 C per
    random order and α of schur_order_alphas; convergence: per subset size (the boundary-outer loop carries them
    all), 2 variants × (C + min(4, G) tangents).
    """
    K = c["n_groups"] if c["ci_blocks"] is None else min(c["ci_blocks"], c["n_groups"])
    Ks = min(c["schur_ci_blocks"], c["n_groups"])
    na = len(c["alphas"])
    n_sizes = len(convergence_sizes(c["n_groups"], c["convergence_sizes"]))  # every size's chains at once
    schur = (na - 1) * (16 + 8 * Ks) + sum(a != 0 for a in c["alphas"]) * 16
    if "random" in c["schur_ci_controls"]:
        schur += sum(a != 0 for a in c["alphas"]) * 8 * Ks
    if "schur_orders" in c:
        schur += int(c["schur_orders"]) * len(schur_order_alphas(c["alphas"], c["schur_order_alphas"])) * 16
    per = {"spectra_cumulative": 2 * (8 + 4 * K), "spectra_schur": 2 * schur,
           "spectra_convergence": n_sizes * 2 * (8 + 4 * min(4, c["n_groups"]))}  # fmt: skip
    return {job: b * d * d / 1e9 for job, b in per.items()}


def _loads(runs: list[dict]) -> str:
    """One phrase per bench run: its jobs, its load averages (1/5/15 min) at start and end, the highest 1-min."""
    return "; ".join(
        f"{', '.join(r['jobs'])} ({r['started']}, {r['wall_s'] / 60:.0f} min): load "
        f"{'/'.join(f'{x:.1f}' for x in r['load_average_at_start'])} at the start, "
        f"{'/'.join(f'{x:.1f}' for x in r['load_average_at_end'])} at the end, at most "
        f"{r['load_average_1min_max']:.1f}"
        for r in runs
    )


def _routes(routes: dict) -> str:
    """The singular-value route of each product of a chain's timed step (an order's: both variants')."""
    return ", ".join(
        f"`{key.split('/')[0]}` {'certified low rank' if r.get('lowrank') else 'full SVD'}" for key, r in routes.items()
    )


def _alternatives_table(alts: list[dict]) -> list[str]:
    """The fan-out alternatives as a table: spectra.boundaries_per_job by rows, spectra.chain_segments by columns."""
    Ss = sorted({r["chain_segments"] for r in alts})
    cell = {(r["boundaries_per_job"], r["chain_segments"]): r for r in alts}
    best = min(alts, key=lambda r: (round(r["hours"], 2), r["prefix_cpu_hours"], r["jobs"]))
    L = [
        "| `boundaries_per_job` | " + " | ".join(f"`chain_segments: {S}`" for S in Ss) + " |",
        "|---:|" + "---:|" * len(Ss),
    ]
    for n in sorted({r["boundaries_per_job"] for r in alts}):
        cells = []
        for S in Ss:
            r = cell[n, S]
            text = f"{r['hours']:.2f} h ({r['jobs']}; {r['prefix_cpu_hours']:.1f})"
            cells.append(f"**{text}**" if r is best else text)
        L.append(f"| {n} | " + " | ".join(cells) + " |")
    return L


def _cpu_time_text(out: dict) -> list[str]:
    """The totals at the CPU time over the machine's cores (``totals``' ``cpu_time``), a line, or nothing."""
    ct = out.get("cpu_time")
    if not ct:
        return []
    h, cp = ct["per_checkpoint_hours"], ct["critical_path_hours_64_jobs"]
    return [f"At the CPU seconds the timed calls took over the machine's {ct['cores']} cores (`cpu_time`: the same "
            "work on these cores with no other load, a lower bound on its wall time, where the measured wall on a "
            f"loaded machine is an upper one): **{h['total']:.1f} hours** per checkpoint"
            + (f" ({h['spectra_schur_chain_prefixes']:.1f} h of repeated prefixes)"
               if "spectra_schur_chain_prefixes" in h else "")
            + f", and the last job of the fanned-out checkpoint ends after **{cp['hours']:.2f} h** on 64 "
            "concurrent jobs.\n"]  # fmt: skip


def markdown(out: dict) -> str:
    res, models, mach, c = out["results"], out["models"], out["machine"], out["config"]
    d = out["d"]
    B = models[MODELS[0]]["boundaries"]
    per_model = ", ".join(f"{v['label']} {v['boundaries']}" for v in models.values())
    sch = res.get("spectra_schur_chains", {}).get(d)
    totals_text = [
        f"One {models[MODELS[0]]['label']} checkpoint: **{v['total']:.1f} {k.split('_')[2].upper()}-hours** "
        f"(`{k}` in long_jobs.json)"
        + (f", of which {v['spectra_schur_chain_prefixes']:.1f} h the Schur chain segments' repeated prefix "
           f"products ({v['total_one_job_per_chain']:.1f} h with one job per chain)"
           if "spectra_schur_chain_prefixes" in v else "")
        + ".\n"
        for k, v in out.items()
        if k.startswith("per_checkpoint_") and k.endswith("_hours")
    ]  # fmt: skip
    attn = (sch or {}).get("boundaries", {}).get("attention")
    L = [
        "# Long per-checkpoint jobs at papers scale (bench/bench_long_jobs.py)",
        "",
        f"One boundary of each job that loops over a checkpoint's boundaries, timed with the project's functions "
        f"and the settings of `{c['file']}` on synthetic d×d J̄ with {c['n_groups']} float32 group means (group "
        f"sizes {min(c['group_counts'])}–{max(c['group_counts'])} samples): an attention J̄ of grouped-query rank "
        f"d/4 (group means A(B + 2 % noise) plus a noise floor of {c.get('attn_floor', ATTN_FLOOR):.2g} of ‖J̄‖_F "
        "beyond the rank, shared by the groups, as SmolLM2-135M's attention J̄ carry)"
        + (f", measured {attn['tail']:.2g} outside its rank, {attn['n_nonzero']} non-zero modes" if attn else "")
        + "; an MLP J̄, a Gaussian bulk of spectral norm ≈ 1 plus a rank-32 part (full rank, non-normal), group "
        "means J̄ + 2 % noise. The tables, the cumulative chains and the Schur surgery are timed on both kinds "
        f"(their mean per boundary; the blocks alternate them); topology on {c['tokens']:,} float32 activation "
        f"rows (signed factor model as in bench_topology.py). Per checkpoint = per boundary × boundaries "
        f"({per_model}).",
        "",
        f"Machine: {mach['cpus']} CPUs ({mach['processor']}), {mach['platform']}, numpy {mach['numpy']} "
        f"(OpenBLAS, default threads: every core), scipy {mach['scipy']}; OMP_WAIT_POLICY={mach['OMP_WAIT_POLICY']}. "
        f"The bench ran in parts ({_loads(mach.get('runs', []))}): the machine is shared, and a load above the CPU "
        "count inflates the times."
        + "".join(f" `{job}` is carried over from {why}." for job, why in out.get("carried", {}).items()),
        "",
        f"## Per boundary (d = {d}) and per checkpoint, on these {mach['cpus']} cores"
        + (f" and the device `{out['device']}`" if out.get("device", "cpu") != "cpu" else ""),
        "",
        *totals_text,
        *_cpu_time_text(out),
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
            where += f", mean over {B} boundaries × {len(res[job][d]['sizes'])} sizes"
        mins = [f"**{v:.0f}**" if s["over_limit"][m] else f"{v:.1f}" for m, v in s["per_checkpoint_min"].items()]
        L.append(f"| `{job}` | {s['boundary_s']:.0f} | {where} | " + " | ".join(mins) + " |")
    cp = out.get("critical_path_hours_64_jobs")
    if cp:
        S = cp["chain_segments"]
        L += ["", f"Fanned out as `{c['file']}` sets it (`spectra.boundaries_per_job: {cp['boundaries_per_job']}`, "
              f"`spectra.chain_segments: {S}`: {cp['chain_jobs']} Schur chain jobs, {cp['jobs']} jobs per "
              f"{models[MODELS[0]]['label']} checkpoint) on 64 concurrent jobs, the last job ends after "
              f"**{cp['hours']:.2f} h** at these per-boundary speeds (`critical_path_hours_64_jobs`; "
              "`critical_path`: a list schedule with the workflow's priorities). Each kind's longest job: "
              + ", ".join(f"{k} {v:.2f} h" for k, v in cp["paths_hours"].items() if k != "spectra_schur_prep + chain")
              + f"; the Schur preps and chain jobs end at {cp['paths_hours'].get('spectra_schur_prep + chain', 0):.2f} h "
              f"(started shortest first instead of longest first: {cp.get('hours_chains_shortest_first', 0):.2f} h)."]  # fmt: skip
        one = out.get("critical_path_hours_64_jobs_one_job_per_chain")
        if one and sch:
            adv = ", ".join(f"{k} {v:.1f} s" for k, v in sch["advance_s"].items())
            L += ["", f"A chain of the costliest class runs as {S} jobs over consecutive depths, a cheaper one as "
                  f"ceil({S} × its one-job time / the costliest's) (`resources.schur_chain_segments`): a segment's "
                  f"job advances its chain's products through the depths before its own (no SVD: {adv} per depth, "
                  "timed at depths 2 and 3), then steps through its own. The repeated prefix products cost "
                  f"{out['per_checkpoint_cpu_hours']['spectra_schur_chain_prefixes']:.1f} CPU-hours per checkpoint "
                  f"(in the total above). With one job per chain ({one['chain_jobs']} chain jobs) the last job "
                  f"ends after {one['hours']:.2f} h."]  # fmt: skip
        for alts, how in ((out.get("fanout_alternatives"), "at the measured wall times"),
                          ((out.get("cpu_time") or {}).get("fanout_alternatives"),
                           f"at the CPU time over {mach['cpus']} cores")):  # fmt: skip
            if alts:
                L += ["", f"The alternatives {how} (`fanout_alternatives`): hours until the last job ends on 64 "
                      "concurrent jobs (jobs per checkpoint; hours of repeated prefix products):", "",
                      *_alternatives_table(alts)]  # fmt: skip
        variants = cumulative_variant_boundary_s(res, d)
        if variants and "spectra_convergence" in res:
            cum = res["spectra_cumulative"][d]
            how = ("measured through attention, MLP, attention, MLP, the last timed, with the deviations each "
                   "variant's job forms" if "variant_s" in cum else
                   "half of the measured two-variant step, the deviations counted in full")  # fmt: skip
            L += ["", f"The cumulative table runs as a job per variant ({how}): "
                  + ", ".join(f"{v} {s:.1f} s" for v, s in variants.items()) + " per boundary. The convergence "
                  "table runs as a job per subset size, each the measured per-size plain and edge steps over the "
                  "checkpoint's boundaries plus the final SVDs: "
                  + ", ".join(f"S = {S} {t / 3600:.2f} h" for S, t in convergence_size_s(
                      res["spectra_convergence"][d], B, c["convergence_boundaries"]).items()) + "."]  # fmt: skip
    L += ["", "## Where the time goes", ""]
    if "spectra_table" in res:
        L += [f"`spectra_table` (K = {c['n_groups'] if c['ci_blocks'] is None else c['ci_blocks']} replicates, "
              f"{c['ci_method']} intervals):", "",
              "| d | boundary | deviations | decompose (eig + vectors, SVD) | metrics + replicates | total | Henrici |",
              "|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for dd, t in res["spectra_table"].items():
            for kind, k in (t.get("by_kind") or {"mlp": t}).items():
                L.append(f"| {dd} | {kind} | {k['deviations_s']:.1f} | {k['decompose_s']:.1f} | "
                         f"{k['metrics_and_replicates_s']:.1f} | {k['boundary_s']:.1f} | {k['henrici']:.2f} |")  # fmt: skip
        L.append("")
    if "spectra_cumulative" in res:
        L += ["`spectra_cumulative`, one variant's job at depth 4 (K tangents): "
              + "; ".join(f"d={dd}: " + ", ".join(f"{v} {s:.1f} s" for v, s in t["variant_s"].items())
                          + f" (of which the deviations {np.mean(list(t['deviations_s'].values())):.1f} s)"
                          for dd, t in res["spectra_cumulative"].items() if "variant_s" in t) + ".", ""]  # fmt: skip
    if "spectra_schur" in res:
        L += [f"`spectra_schur` as one job (α = {c['alphas']}): "
              + "; ".join(f"d={dd}: boundary 1 {t['boundary1_s']:.1f} s, boundary 2 {t['boundary_s']:.1f} s"
                          for dd, t in res["spectra_schur"].items()) + ".", ""]  # fmt: skip
    if sch and "step_s" in sch:
        bk = sch["boundaries"]
        L += [f"`spectra_schur` as its fanned-out jobs take it (d = {d}, K = {sch['K']} blocks, random orders at α "
              f"{sch['order_alphas']}): a prep "
              + ", ".join(f"{k} {b['prep_s']:.1f} s (Henrici {b['henrici']:.2f}, {b['n_nonzero']} non-zero modes)"
                          for k, b in bk.items())
              + f", {sch['prep_s']:.1f} s per boundary on average; per cost class one chain through "
              f"{', '.join(sch['depths'])}, the step at depth {len(sch['depths'])} timed (it rebuilds its operators "
              "from the prep's arrays, forms the deviations where it carries an interval, multiplies and takes the "
              "singular values):", "",
              "| class | chains | step (s) | singular values | advance-only (s) | example |", "|---|---:|---:|---|---:|---|"]  # fmt: skip
        for cls, s in sch["step_s"].items():
            base = cls.split("_")[0]
            L.append(f"| `{cls}` | {sch['chains'][cls]} | {s:.1f} | {_routes(sch['routes'][cls])} | "
                     f"{sch['advance_s'].get(base, float('nan')):.1f} | `{tuple(sch['examples'][cls])}` |")  # fmt: skip
        if "order_s" in sch:
            o = sch["order_s"]
            L += ["", f"An order's step: its reordered normal part J₀^π {o['basis']:.1f} s, then per α the `update` "
                  f"product and singular values {o['update']:.1f} s and the `full` ones {o['full']:.1f} s."]  # fmt: skip
        L += ["", f"{sch['boundary_s']:.0f} s per boundary in all (the prep and every chain's step).", ""]
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
        "- Two synthetic boundaries, one of each kind, stand for a checkpoint's: real J̄ differ in spectrum and "
        "non-normality, which moves the eigen- and Schur decompositions' iterations; the products and SVDs, most "
        "of the time, are the same.",
        "- The `update` products take the certified low-rank route from the second attention boundary on (the "
        "first two depths of a real chain take the full SVD: 2 of 64 depths at about the `full` variant's step). "
        "A random control's `update` products are of full rank (R' fills the strictly upper triangle), so they "
        "take the full SVD after the range finder's attempt.",
        "- A J̄ with Henrici departure below 0.1 (near-normal) takes an exact `eigvals` per replicate in "
        "`spectra_table` (`linear.HENRICI_EXACT_BELOW`): K × `eigvals_s` more per such boundary.",
        "- Files are not read: the group means and a prep's arrays sit in memory. The jobs memory-map the group "
        "means (G·d²·4 B = 1.1 GB per boundary at d = 4096), read the prep's .npz (up to ~2 GB per boundary) and "
        "the activations (tokens·d·4 B = 2.1 GB per boundary) from disk; add that I/O on a slow file system.",
        "- `spectra_convergence` has no per-boundary entry point: its step is the loop body of "
        "`convergence_rows`, rebuilt from the same calls (`convergence_step` here).",
        f"- Gemma-4-E4B's rows are at d = {d} too; its text decoder is narrower (an effective-4B model: see "
        "hidden_size in its hub config), so they are upper bounds: scale by (d/4096)³ for the spectral jobs and "
        "by d² for the correlation.",
        "- Not timed: the resume snapshots (`layergeom.resume.Snapshots`, written every `snapshot_minutes`). One "
        f"of a single job holds its product chains, at d = {d}: "
        + ", ".join(f"`{j}` ≈ {gb:.1f} GB" for j, gb in snapshot_gb(d, c).items())
        + " (C and the K tangents of every chain), written atomically each time; a fanned-out job's holds its own "
        "chain's.",
        "",
    ]
    return "\n".join(L)


if __name__ == "__main__":
    main()
