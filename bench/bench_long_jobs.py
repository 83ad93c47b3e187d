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
  per-boundary work) on an attention and an MLP boundary, and per cost class (``resources.schur_jobs.schur_chain_class``:
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
config's spectra.boundaries_per_job and spectra.chain_segments and the alternatives (``fanout_alternatives``),
as bench/long_jobs_plan.py computes them from the measurements; this script holds the measurements.

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

import os
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.linalg
from bench_topology import synthetic_states  # the signed factor model of bench/bench_topology.py
from harness import RESULTS, ROOT, Run, Seconds, log, machine, machine_info, mean, parser, timed, with_cpu, write_text
from long_jobs_plan import ATTN_FLOOR, MODELS, markdown, read, render, summarise, totals, write

from layergeom import config as lgconfig
from layergeom.names import boundaries_for
from layergeom.resources import schur_jobs
from layergeom.spectral import intervals
from layergeom.spectral.convergence import VARIANTS
from layergeom.spectral.cumulative import ProductChain, cumulative_rows, step_operator, tangent_floor
from layergeom.spectral.linear import metric_replicates, spectra_intervals
from layergeom.spectral.schur import (
    BoundaryStep,
    SchurTangent,
    SurgeryBoundary,
    prepare_boundary,
    schur_surgery,
    step_chain,
    wants_interval,
)
from layergeom.spectral.settings import convergence_sizes, schur_alphas, schur_chains, schur_order_alphas
from layergeom.spectral.spectra import (
    decompose,
    eigenvalue_frame,
    henrici_departure,
    rank_tolerance,
    spectra_row,
    spectral_metrics,
)
from layergeom.topology.communities import boundary_topology
from layergeom.topology.graphs import streamed_correlation


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

    class Devs(dict):  # as _Deviations: computed when read
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
    """What a chain job reads at one depth (``write_schur_chain``): a SurgeryBoundary rebuilt from the
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
    boundary (``prep_s``: their mean), and per cost class (``resources.schur_jobs.schur_chain_class``) its first chain of
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
        cls = schur_jobs.schur_chain_class(cfg, ch)
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
                advance.setdefault(schur_jobs.schur_chain_base(cfg, ch), []).append(t)
        log(f"schur chain advance d={d} {cls} ({ch}): {advance[schur_jobs.schur_chain_base(cfg, ch)][-2:]} s")
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
    ap = parser(out=RESULTS)
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
    ap.add_argument("--device", default="cpu", help="torch device of the spectral and topology functions (cpu, cuda)")
    ap.add_argument("--render", action="store_true", help="only rewrite long_jobs.md from long_jobs.json")
    args = ap.parse_args()
    if args.jobs == ["schur_advance"]:  # merged into the existing long_jobs.json, then rendered
        return merge_schur_advance(args)
    if args.render:
        return render(args.out)

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
        "machine": machine_info(os.cpu_count())
        | machine("cpus", "numpy", "scipy", "OMP_NUM_THREADS", "OMP_WAIT_POLICY") | {"runs": []},
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
        old = read(path)
        mismatch = [k for k in ("d", "device") if old.get(k) != out[k]]
        mismatch += [k for k in out["config"] if k != "tokens" and old["config"].get(k) != out["config"][k]]
        if mismatch:
            raise SystemExit(f"--merge: long_jobs.json was measured with other {', '.join(mismatch)}; run without it")
        out["results"] = old["results"]
        out["machine"]["runs"] = old["machine"].get("runs", [])
    res = out["results"]
    run = Run(jobs=list(args.jobs))
    log(f"start {args.jobs}; group counts {counts.tolist()}")

    def save():  # the raw results so far (a later part may fail)
        write(path, out)

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
    out["machine"]["runs"].append(run.end())
    save()
    out["summary"] = summarise(out, args.d, config_tokens, int(cfg["convergence_boundaries"]))
    totals(out, args.d)  # job -> hours for one Llama-3.1-8B checkpoint on this device, and the critical path
    save()
    md = markdown(out)
    write_text(path / "long_jobs.md", md)
    print(md)


def merge_schur_advance(args) -> None:
    """``--jobs schur_advance``: time the advance-only chain steps again (``bench_schur_chains`` without its
    steps) at --d with the config's settings, put them beside the chain steps of long_jobs.json
    (``spectra_schur_chains``, same d) and render it again (``--render``)."""
    path = Path(args.out)
    out = read(path)
    if args.d not in out["results"].get("spectra_schur_chains", {}):
        raise SystemExit(f"long_jobs.json has no schur_chains timing at d = {args.d}: run --jobs schur_chains first")
    config = lgconfig.load(args.config)
    cfg = lgconfig.model_section(config, MODELS[0], "spectra")
    counts = group_counts(config["corpus"], cfg)
    run = Run(jobs=["schur_advance"])
    log(f"start (schur_advance at d = {args.d})")
    adv = bench_schur_chains(boundary_kinds(args.d, counts, out["config"].get("attn_floor", ATTN_FLOOR)), counts,
                             cfg, config["seed"], args.device, steps=False)  # fmt: skip
    out["results"]["spectra_schur_chains"][args.d]["advance_s"] = adv["advance_s"]
    out["machine"].setdefault("runs", []).append(run.end())
    write(path, out)
    log(f"schur advance d={args.d}: {adv['advance_s']}")
    render(path)


if __name__ == "__main__":
    main()
