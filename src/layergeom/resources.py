"""What a job asks of the machine, estimated before it runs (torch-free: the workflow reads it when it
schedules jobs).

``materialize`` converts a checkpoint into safetensors in the model's dtype. Its peak host memory was measured
by ``bench/materialize_memory.py`` (``bench/results/materialize_memory.md``, docs/precision.md): about 1.2× the
weights in the target dtype above a baseline of torch and transformers, whatever the source dtype (files in
the target dtype already are memory-mapped, not copied). The job asks for 1.3× plus 2.5 GB, counted from the
safetensors headers of the files it reads (no tensor is loaded).

The spectral tables (``spectra_table``, ``_cumulative``, ``_schur``, ``_convergence``) and the topology jobs ask for
the memory their arrays hold at the peak, counted from the code in bytes per d², and for the runtime of their
boundaries at rates measured by ``bench/resources_rates.py`` (section below; docs/cluster.md).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from pathlib import Path

from .spectral.settings import chain_segment_bounds, convergence_sizes, schur_order_alphas
from .spectral.settings import schur_chains as schur_chain_plan

#: bytes per element of each safetensors dtype code and of each models.<m>.dtype
DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
    "F8_E4M3": 1, "F8_E5M2": 1, "float32": 4, "bfloat16": 2, "float16": 2,
}  # fmt: skip
#: materialize's peak host memory: this many times the weights in the target dtype, plus the baseline below
MATERIALIZE_FACTOR = 1.3
MATERIALIZE_BASE_MB = 2500
#: what a job asks when there are no safetensors to count (GGUF, trained and config models: small ones)
MATERIALIZE_MIN_MB = 4000


def _safetensors_tensors(path):
    """(element count, dtype) of each tensor in a safetensors file, from its JSON header (8-byte length, then
    JSON; no tensor is read)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    for name, t in header.items():
        if name != "__metadata__":
            yield math.prod(int(s) for s in t["shape"]), t["dtype"]


def safetensors_elements(path) -> int:
    """The number of tensor elements in a safetensors file."""
    return sum(count for count, _ in _safetensors_tensors(path))


def checkpoint_elements(folders: Iterable) -> int:
    """Tensor elements of every ``*.safetensors`` file in the given folders (missing folders count 0)."""
    return sum(
        safetensors_elements(p) for d in folders if Path(d).is_dir() for p in sorted(Path(d).glob("*.safetensors"))
    )


def pickle_weight_bytes(folders: Iterable) -> int:
    """Bytes of the ``pytorch_model*.bin`` weights in the given folders (hub revisions without safetensors)."""
    return sum(p.stat().st_size for d in folders if Path(d).is_dir() for p in Path(d).glob("pytorch_model*.bin"))


def materialize_mem_mb(n_params: int, dtype: str = "float32", extra_mb: float = 0.0) -> int:
    """Host memory (MB) for materialising `n_params` weights in `dtype`: 1.3× their size + 2.5 GB (+ `extra_mb`),
    at least 4 GB."""
    if n_params <= 0:
        return MATERIALIZE_MIN_MB
    mb = MATERIALIZE_FACTOR * n_params * DTYPE_BYTES[dtype] / 1e6 + MATERIALIZE_BASE_MB + extra_mb
    return int(max(MATERIALIZE_MIN_MB, -(-mb // 1)))


def materialize_request_mb(folders: Iterable, dtype: str = "float32") -> int:
    """What materialize asks for, from the weight files in `folders`: safetensors counted from their headers
    (mapped, not copied); ``pytorch_model*.bin`` files (old hub revisions) are read whole by torch.load before
    the conversion, so their bytes count on top, with at most bytes / 2 parameters (float16 files). Not
    measured for .bin files: a bound from how they are read."""
    folders = [d for d in folders if d]
    n = checkpoint_elements(folders)
    b = pickle_weight_bytes(folders)
    return materialize_mem_mb(n + b // 2, dtype, extra_mb=b / 1e6)


# ---- the spectral tables and the topology jobs --------------------------------------------------------------
# Memory: the arrays each job holds at its peak, counted from the code (layergeom.spectral.*, layergeom.topology.*)
# in bytes per d² (d = d_model, one boundary at a time: the tables stream the boundaries in depth order), plus a
# baseline of the interpreter with numpy, scipy and pandas, times a safety factor, at least a floor. Runtime: the
# seconds per boundary measured by bench/resources_rates.py (bench/results/resources_rates.json) at d = 256, 512
# and 768 on the 2-core development machine, fitted as c2·d² + c3·d³ (the LAPACK calls and d×d products the jobs
# spend their time in grow as d³), times the number of boundaries, times a safety factor, at least a floor. Both double on a retry
# (``attempt``, rules/common.smk).

#: every estimate below is multiplied by this (allocator slack, BLAS/LAPACK workspaces not counted term by term)
SAFETY = 1.25
#: the interpreter with numpy, scipy, pandas and the layergeom modules the job imports (MB; the bench measures
#: ~200 MB after the imports, and a Snakemake script job adds its own objects)
BASE_MB = 400
#: what a spectral/topology job asks at least (MB) and at least how long (minutes); UNKNOWN_MINUTES when d is
#: not known yet (a dry run of a hub model whose config.json is neither downloaded nor cached)
MIN_MB = 2000
MIN_MINUTES = 10
UNKNOWN_MINUTES = 60
#: the figure and trend jobs: small tables and one matplotlib figure
FIGURE_MB = 2000
FIGURE_MINUTES = 15
#: the gather of a fanned-out spectra table (spectra.boundaries_per_job): it unpickles its parts' rows and
#: eigenvalue frames (about 50·d bytes per boundary pickled, a few times that in memory: 13 MB pickled at
#: d = 4096 and 64 boundaries) and writes two TSVs
GATHER_MB = MIN_MB
GATHER_MINUTES = MIN_MINUTES

#: seconds per boundary of each stage at its default settings as (c2, c3): c2·d² + c3·d³, fitted over d = 256,
#: 512, 768 (convergence: per boundary and subset size, and the extra of an edge boundary); a graph's seconds as
#: (c1, c_t): c1·d + c_t·tokens·d² (Leiden, the streamed correlation); a permutation test's per permutation·unit. Measured by bench/resources_rates.py with one BLAS
#: thread on the shared 2-core development machine (bench/results/resources_rates.json, "rates"), then anchored at
#: the papers' width: each d³ term raised to reach bench/bench_long_jobs.py's d = 4096 time of one boundary on
#: this machine's two cores (bench/results/long_jobs.json; ``anchor_rates`` of the bench), where the small-d fit
#: falls short. ``convergence_groups``: (offset_plain, offset_edge, mean_size): a subset size S's share of a
#: convergence rate is (S + offset)/(mean_size + offset) (the rates are means over the bench's sizes, the
#: offsets from an upper envelope of its d = 4096 seconds per size); ``convergence_final``: the final
#: boundary's erank SVDs per size; ``cumulative_variants``: each variant's share of the cumulative table's d³
#: term (its job's step at d = 4096 less the deviations); ``schur_steps``: seconds per d³ at width d with K tangents (``schur_chain_class``,
#: bench/bench_long_jobs.py): ``prep`` a Schur prep per boundary (the mean of an attention and an MLP boundary);
#: a run chain's step per class and variant, ``{tangents|plain}_{update|full}`` (the `update` products
#: through the certified low-rank singular values where they hold, ``linalg.certified_svd``); an order chain's
#: step in parts, ``order_basis`` (its reordered normal part J₀^π) and per α of spectra.schur_order_alphas
#: ``order_update`` and ``order_full`` (a product and its singular values); and the products alone (a chain
#: segment's prefix, spectra.chain_segments), ``advance_{tangents|plain}`` (the same for both variants) and
#: ``advance_order`` (J₀^π and both variants' products at one α). A node with more threads and less load is
#: faster, so these are upper bounds.
RATES = {
    "spectra_table": (9.59e-06, 0.0),
    "spectra_cumulative": (4.22e-06, 1.52e-09),
    "spectra_schur": (0.000172, 9.71e-09),
    "convergence_plain": (6.62e-07, 1.35e-10),
    "convergence_edge": (5.39e-06, 3.74e-10),
    "topology_graph": (0.00179, 2.68e-11),
    "coupling_perm_d": 5.62e-08,
    "convergence_groups": (5.8, 46.1, 7.5),
    "convergence_final": (0.0, 6.64e-10),
    "cumulative_variants": {"full": 0.5, "update": 0.5},
    "schur_steps": {
        "K": 4,
        "d": 4096,
        "advance_order": 2.42e-10,
        "advance_plain": 9.82e-11,
        "advance_tangents": 4.59e-10,
        "order_basis": 1.0e-10,
        "order_full": 4.08e-10,
        "order_update": 4.08e-10,
        "plain_full": 4.61e-10,
        "plain_update": 4.61e-10,
        "prep": 7.46e-09,
        "tangents_full": 1.66e-09,
        "tangents_update": 1.66e-09,
    },  # fmt: skip
}


#: the Schur settings RATES["spectra_schur"] was measured at (bench/resources_rates.py: the schema's defaults); a
#: grid with more products scales the rate by their count
RATES_SCHUR_GRID = {"alphas": (0.0, 0.25, 0.5, 0.75, 1.0), "orders": 8, "ci_blocks": 4, "ci_controls": ("none",),
                    "order_alphas": None}  # fmt: skip


def schur_settings_chains(s: dict) -> dict:
    """:func:`schur_chains` of a spectra section."""
    return schur_chains(s["alphas"], s["schur_orders"], s["schur_ci_blocks"], s["schur_ci_controls"],
                        order_alphas=s.get("schur_order_alphas"))  # fmt: skip


def boundary_seconds(stage: str, d: int) -> float:
    """Seconds of one boundary of a spectral stage at width d (RATES: c2·d² + c3·d³)."""
    c2, c3 = RATES[stage]
    return c2 * float(d) ** 2 + c3 * float(d) ** 3


def npy_shape(path) -> tuple[int, ...] | None:
    """The shape in a ``.npy`` file's header (no data read, no numpy import); None for a missing file."""
    try:
        with open(path, "rb") as f:
            if f.read(6) != b"\x93NUMPY":
                return None
            major = f.read(2)[0]
            n = struct.unpack("<H" if major == 1 else "<I", f.read(2 if major == 1 else 4))[0]
            import ast

            return tuple(int(s) for s in ast.literal_eval(f.read(n).decode("latin1"))["shape"])
    except (OSError, ValueError, SyntaxError, KeyError, IndexError):
        return None


def store_meta(store_dir) -> dict | None:
    """An activation store's store.json (d_model, n_windows, window_tokens), or None when it is not there yet."""
    try:
        return json.loads((Path(store_dir) / "store.json").read_text())
    except (OSError, ValueError, TypeError):
        return None


def _mb(bytes_: float, base_mb: float = BASE_MB) -> int:
    return int(max(MIN_MB, -(-(SAFETY * (bytes_ / 1e6 + base_mb)) // 1)))


def _minutes(seconds: float) -> int:
    return int(max(MIN_MINUTES, -(-(SAFETY * seconds / 60.0) // 1)))


def schur_chains(alphas, orders: int, ci_blocks: int, ci_controls, variants: int = 2, order_alphas=None) -> dict:
    """What ``schur_surgery`` composes, per cumulative variant: its complex products C with their complex64
    tangents (K = ci_blocks each), and the products of the random orders (complex, no tangents: one per order and
    α of ``settings.schur_order_alphas``). α = 1 with the own N is J̄ itself: cumulative.tsv's products, not
    composed here (``settings.schur_chains``)."""
    spread = schur_order_alphas(alphas, order_alphas)
    alphas = sorted({float(a) for a in alphas})
    runs = [(a, c) for c in ("none", "random") for a in alphas if not (a == 0 and c == "random")]
    runs = [r for r in runs if r != (1.0, "none")]
    K = int(ci_blocks) if ci_blocks else 0
    tangents = [(a, c) for a, c in runs if K and (c in set(ci_controls) or a == 0)]
    return {
        "complex": variants * len(runs),
        "complex_tangents": variants * K * len(tangents),
        "orders": variants * int(orders) * len(spread),
    }


def spectra_bytes(stage: str, d: int, n_groups: int, spectra: dict, n_boundaries: int = 1) -> float:
    """Peak bytes a spectral table job holds besides the interpreter, counted from the code (d² terms).

    Common to all: the boundary's group means (G, d, d) float32, memory-mapped (their pages count in the RSS
    once read) and J̄_b in float64. ``spectra`` is the model's merged spectra section (every key set: the
    schema's defaults are filled in by validation).
    """
    s = spectra
    d2, G = float(d) * d, int(n_groups)
    blocks = s["ci_blocks"]
    K = G if blocks is None else min(int(blocks), G)
    common = 4 * G + 8  # group means (mapped) + J̄
    decomposition = 32 + 16  # left/right eigenvectors (complex128) + U, Vh of the SVD
    if stage == "spectra_table":
        # Δ_k float32; the linearised replicates (LinearSpectra: U, V float32, eigenvectors in float32 and
        # complex128 ≈ 28) and one replicate's temporaries (ΔV, J + Δ, Δx, eigvals(J+Δ); 60 counts the r'×r' block
        # the replicates no longer form, so it over-counts by up to 16);
        # LAPACK's eig holds real and complex vectors at once (+16)
        per_d2 = common + 4 * K + decomposition + 16 + 28 + 60
        return per_d2 * d2 + 100.0 * d * n_boundaries  # + the eigenvalue rows kept for eigenvalues.tsv
    if stage == "spectra_cumulative":
        # two variants' products C (float64) and K float32 tangents; a step: this and the previous boundary's
        # Δ (the generator's), the new tangents Δ·C + M·Ċ (three K-stacks while the old ones live), the SVD of
        # C with its gradient Γ (≈ 40) and I + J̄
        per_d2 = common + 2 * 4 * K + 2 * (8 + 4 * K) + 3 * 4 * K + 40 + 8
        return per_d2 * d2
    if stage == "spectra_schur":
        ch = schur_settings_chains(s)
        state = 16 * ch["complex"] + 8 * ch["complex_tangents"] + 16 * ch["orders"]
        return (4 * G + state + schur_boundary_d2(s, G)) * d2
    if stage == "spectra_schur_prep":
        # one boundary at a time, as the single job's (its arrays are streamed into the .npz), no chain
        return (4 * G + schur_boundary_d2(s, G)) * d2
    if stage == "spectra_convergence":
        # at S = G groups: the boundary's first max(S) group means (read once per boundary, copied) and the
        # subset's float64 mean, Δ (K = S) and the products' block deviations (4 blocks); every subset size's
        # chains, carried across the boundaries (the boundary-outer loop): two variants' products with ≤ 4
        # tangents each per size; an edge boundary's decomposition and linearised replicates (as
        # spectra_table), a chain step's temporaries
        n_sizes = max(1, convergence_counts(G, n_boundaries, s)[0])
        chains = n_sizes * 2 * (8 + 4 * 4)
        per_d2 = common + 4 * G + 4 * 4 + chains + decomposition + 16 + 28 + 60 + 3 * 4 * 4
        return per_d2 * d2
    raise ValueError(f"no memory model for '{stage}'")


def schur_boundary_d2(spectra: dict, n_groups: int) -> float:
    """Bytes per d² of one boundary of the Schur surgery besides the chains (``schur.prepare_boundary`` and a
    step of every chain; the single job and a prep job)."""
    s = spectra
    Ks = int(s["schur_ci_blocks"] or 0)
    Ks = min(Ks, int(n_groups)) if Ks else 0
    # J̄'s decomposition (dropped after its metrics), the Schur form Q, T, N, J₀, J − J₀, N', the control's canonical
    # basis Q_c and R' = Q_c N' Q_cᴴ and the order sampler's J₀ parts (≈ 11 complex), one reordering J₀^π and its M
    # (2), Δ_k, the tangent δJ₀ (and for a random control with intervals the rotations W and δR', both K-stacks
    # while δR' is formed), dM and the chain step's three complex64 K-stacks, the complex SVD of C or of Λ + αN
    # (U, Vh, workspace ≈ 4 complex; the certified low-rank route of an `update` product holds about as much: its
    # residual, basis and projection, freed before a fallback SVD)
    rot = 2 * 8 * Ks if "random" in set(s["schur_ci_controls"]) else 0
    return 8 + 16 * 11 + 16 * 2 + 4 * Ks + 8 * Ks + rot + 2 * 8 * Ks + 3 * 8 * Ks + 16 * 4


def schur_order_count(spectra: dict) -> int:
    """The α at which the random orders are composed (``settings.schur_order_alphas`` of the section)."""
    return len(schur_order_alphas(spectra["alphas"], spectra.get("schur_order_alphas")))


def schur_chain_steps(spectra: dict, chain: tuple) -> dict:
    """What one chain job of the fanned-out Schur surgery composes (a chain of ``settings.schur_chains``): its
    products' state in bytes per d² (``state``), its chain steps per boundary (``steps``: a product and its
    singular values each) and whether it reads the replicates' deviations and the Schur form's tangents
    (``deviations``, ``tangents``: 0 or 1). An order ("order", k) composes both variants at every α of
    ``schur_order_alphas`` from one reordered normal part: 2·n_α complex products."""
    s = spectra
    K = int(s["schur_ci_blocks"] or 0)
    if chain[0] == "order":
        n = 2 * schur_order_count(s)
        return {"state": 16 * n, "steps": n, "deviations": 0, "tangents": 0}
    _, _, a, c = chain
    ci = int(bool(K) and (c in set(s["schur_ci_controls"]) or a == 0))
    return {"state": 16 + 8 * K * ci, "steps": 1, "deviations": ci, "tangents": ci}


def schur_chain_bytes(d: int, n_groups: int, spectra: dict, chain: tuple) -> float:
    """Peak bytes of one chain job: its products (``schur_chain_steps``) and one boundary's operators rebuilt from
    the prep (Q, N, J₀, R = J̄ − J₀ or the prep's R', M: 5 complex; an order's sampler T11, Y, the zero block's
    J₀ part, Z, Q₁Z and J₀^π: 6 more), J̄, the singular values of C (the complex SVD or the certified low-rank
    route, ≈ 4 complex), and with an interval the group means (mapped), Δ_k, δJ₀ (and the prep's δR' for a
    random control), dM and the step's three complex64 K-stacks."""
    s = spectra
    d2, G = float(d) * d, int(n_groups)
    K = int(s["schur_ci_blocks"] or 0)
    K = min(K, G) if K else 0
    ch = schur_chain_steps(s, chain)
    per_d2 = ch["state"] + 8 + 16 * 5 + 16 * 4 + (16 * 6 if chain[0] == "order" else 0)
    random = chain[0] == "run" and chain[3] == "random"  # δR': the random control's tangent, read from the prep
    per_d2 += ch["deviations"] * (4 * G + 4 * K + 8 * K + 3 * 8 * K) + ch["tangents"] * 8 * K * (1 + random)
    return per_d2 * d2


def schur_chain_mem_mb(d: int | None, n_groups: int, spectra: dict, chain: tuple) -> int:
    if not d:
        return MIN_MB
    return _mb(schur_chain_bytes(int(d), n_groups, spectra, chain))


def schur_chain_base(spectra: dict, chain: tuple) -> str:
    """What a chain step multiplies, whatever its variant: ``order`` (a random order's reordered normal part and its
    products), ``tangents`` (a complex J(α) with its replicates' tangents) or ``plain`` (a complex J(α) without). A segment's advance-only prefix costs the same for both variants
    (RATES["schur_steps"]: ``advance_<base>``)."""
    if chain[0] == "order":
        return "order"
    return "tangents" if schur_chain_steps(spectra, chain)["tangents"] else "plain"


def schur_chain_class(spectra: dict, chain: tuple) -> str:
    """The cost class of a Schur chain (RATES["schur_steps"]): ``order`` (J₀^π, then both variants' products and
    singular values at every α of ``schur_order_alphas``), or for a run ``{tangents|plain}_{update|full}``
    (``schur_chain_base`` and the variant: the `update` products take the certified low-rank singular values where
    they hold, the `full` ones, I + J(α), are of full rank and always take the full SVD)."""
    base = schur_chain_base(spectra, chain)
    return base if base == "order" else f"{base}_{chain[1]}"


def _tangent_scale(spectra: dict, chain: tuple) -> float:
    """How much a chain's step grows beyond the measured K tangents (RATES["schur_steps"]["K"]): K / K_measured
    where it carries more (an upper bound: the rest of the step does not grow with K), else 1."""
    if not (chain[0] == "run" and schur_chain_steps(spectra, chain)["tangents"]):
        return 1.0
    return max(1.0, int(spectra["schur_ci_blocks"] or 0) / RATES["schur_steps"]["K"])


def _schur_class_step_rate(spectra: dict, chain: tuple) -> float:
    """Seconds per d³ of one boundary's step of the chain (RATES["schur_steps"], measured at d = 4096): an order's
    J₀^π plus both variants at each of its α; a run's class (``schur_chain_class``), its tangents grown with K
    (``_tangent_scale``). The `tangents` classes are measured on the own N (α = 0 comes first), whose `update`
    products are of low rank; a random control's are not (R' fills the whole strictly upper triangle, the zero
    block's too: the certified route fails and the full SVD follows), so a random control with intervals
    (schur_ci_controls) costs at least the `tangents_full` step. (The `plain` classes are measured on the random
    control where it carries no intervals, as in config/papers.yaml: an own N without them costs less.)"""
    rate = RATES["schur_steps"]
    if chain[0] == "order":
        return rate["order_basis"] + schur_order_count(spectra) * (rate["order_update"] + rate["order_full"])
    cls, base = schur_chain_class(spectra, chain), schur_chain_base(spectra, chain)
    step = rate[cls]
    if base == "tangents" and chain[1] == "update" and chain[3] == "random":
        step = max(step, rate["tangents_full"])
    return step * _tangent_scale(spectra, chain)


def _schur_advance_rate(spectra: dict, chain: tuple) -> float:
    """Seconds per d³ of the chain's advance-only step (a segment's prefix: its products, no singular values): the
    base's (``advance_<base>``), an order's J₀^π and both variants' products at each of its α (``advance_order``
    at one α, its products part once more per further α)."""
    rate = RATES["schur_steps"]
    base = schur_chain_base(spectra, chain)
    if base == "order":
        n = max(1, schur_order_count(spectra))
        return rate["advance_order"] + (n - 1) * max(0.0, rate["advance_order"] - rate["order_basis"])
    return rate[f"advance_{base}"] * _tangent_scale(spectra, chain)


def schur_prefix_fraction(spectra: dict, chain: tuple) -> float:
    """The seconds of the chain's advance-only step (a segment's prefix: the products, no SVD) over a full step's,
    at the papers' width (RATES["schur_steps"]), in [0, 1], to 3 decimals."""
    return min(1.0, max(0.0, round(_schur_advance_rate(spectra, chain) / _schur_class_step_rate(spectra, chain), 3)))


def schur_segment_count(spectra: dict, chain: tuple) -> int:
    """How many segment jobs the chain runs as (spectra.chain_segments S): S for the chains of the longest one-job
    time, ceil(S · its one-job seconds / the longest's) for the others (at least 1), so that a cheap chain is not
    split and its prefix products are not repeated. Every chain runs through the same boundaries, so the ratio is
    that of the d³-scaled step rates (``_schur_class_step_rate``): it does not depend on d, and the DAG's shape
    depends only on the config and RATES."""
    S = int(spectra.get("chain_segments") or 1)
    if S <= 1:
        return 1
    plan = schur_chain_plan(spectra["alphas"], spectra["schur_orders"], order_alphas=spectra.get("schur_order_alphas"))
    longest = max(_schur_class_step_rate(spectra, c) for c in plan)
    share = _schur_class_step_rate(spectra, chain) / longest
    return max(1, min(S, math.ceil(round(S * share, 9))))


def schur_chain_segments(n_boundaries: int, spectra: dict, chain: tuple) -> list[tuple[int, int]]:
    """The depth ranges of a chain's segment jobs (``schur_segment_count`` of them, at most the boundaries;
    ``settings.chain_segment_bounds`` with the chain's ``schur_prefix_fraction``): [(0, n)] with one segment."""
    S = schur_segment_count(spectra, chain)
    if S <= 1:
        return [(0, int(n_boundaries))]
    return chain_segment_bounds(int(n_boundaries), S, schur_prefix_fraction(spectra, chain))


def schur_chain_runtime_min(
    d: int | None, n_boundaries: int, spectra: dict, chain: tuple, segment: tuple[int, int] | None = None
) -> int:
    """A chain job's runtime: per boundary the larger of two measured rates, × the boundaries; a segment's job
    (`segment` (start, end) of ``schur_chain_segments``) takes its own end − start boundaries at that rate and
    the start boundaries of its prefix at that rate × ``schur_prefix_fraction`` (the products alone).

    - the single job's seconds per boundary (RATES, at its grid) shared evenly among the chain steps of a
      boundary (so the prep's share is spread over them), × the chain's steps plus one (it forms its operator
      again from the prep arrays: about one step's products): the small-d measurement;
    - its cost class at the papers' width (``_schur_class_step_rate``, d³-scaled).
    """
    if not d:
        return UNKNOWN_MINUTES
    s = spectra
    ch = schur_settings_chains(s)
    steps = schur_chain_steps(s, chain)
    per_step = boundary_seconds("spectra_schur", d) / (ch["complex"] + ch["orders"])
    small = per_step * max(1.0, _schur_grid_factor(s)) * (steps["steps"] + 1)
    per = max(small, _schur_class_step_seconds(s, chain, d))
    return _minutes(_segment_seconds(per, s, chain, n_boundaries, segment))


def _segment_seconds(per: float, spectra: dict, chain: tuple, n_boundaries: int, segment) -> float:
    """A chain job's seconds at `per` seconds per full step: its own depths in full, its prefix's (a segment's
    start) at the chain's advance-only fraction (``schur_prefix_fraction``)."""
    start, end = (0, int(n_boundaries)) if segment is None else (int(segment[0]), int(segment[1]))
    return per * (end - start) + per * schur_prefix_fraction(spectra, chain) * start


def _schur_class_step_seconds(spectra: dict, chain: tuple, d: int) -> float:
    """Seconds of one boundary's step of the chain at width d: ``_schur_class_step_rate`` × d³."""
    return _schur_class_step_rate(spectra, chain) * float(d) ** 3


def schur_chain_seconds(d: int, n_boundaries: int, spectra: dict, chain: tuple, segment=None) -> float:
    """Expected seconds of a chain job at the measured speeds (no margin, unlike its runtime): its own boundaries
    at its class's step (``_schur_class_step_seconds``), those of its segment's prefix at the advance-only
    fraction (``schur_prefix_fraction``), as bench_long_jobs' critical path counts them. Its scheduling priority:
    with more chain jobs than free slots the longest start first."""
    return _segment_seconds(_schur_class_step_seconds(spectra, chain, d), spectra, chain, n_boundaries, segment)


def schur_prep_seconds(d: int, spectra: dict) -> float:
    """Seconds of one boundary of a Schur prep job: the prep's share of a single job's boundary at the width it was
    measured (RATES["schur_steps"]), applied to the single job's rate at d, or its d³-scaled time if larger."""
    rate = RATES["schur_steps"]
    share = rate["prep"] * float(rate["d"]) ** 3 / boundary_seconds("spectra_schur", rate["d"])
    single = boundary_seconds("spectra_schur", d) * max(1.0, _schur_grid_factor(spectra))
    return max(share * single, rate["prep"] * float(d) ** 3)


def convergence_size_seconds(d: int, size: int, n_boundaries: int, n_edge: int) -> float:
    """Seconds of one subset size of the convergence table (S = `size` groups): every boundary's products, the
    `n_edge` edge boundaries' decompositions and replicates, the final boundary's erank SVDs. The rates are means
    over the bench's subset sizes; a size's share grows with S (RATES["convergence_groups"])."""
    op, oe, mean = RATES["convergence_groups"]
    plain = boundary_seconds("convergence_plain", d) * (size + op) / (mean + op)
    edge = boundary_seconds("convergence_edge", d) * (size + oe) / (mean + oe)
    return n_boundaries * plain + n_edge * edge + boundary_seconds("convergence_final", d)


def _schur_grid_factor(s: dict) -> float:
    """The products of this grid relative to the measured one (RATES_SCHUR_GRID): how the per-boundary rate scales."""
    ch = schur_settings_chains(s)
    measured = schur_chains(**RATES_SCHUR_GRID)
    return (ch["complex"] + ch["orders"]) / (measured["complex"] + measured["orders"])


def spectra_mem_mb(stage: str, d: int | None, n_groups: int, spectra: dict, n_boundaries: int = 1) -> int:
    """mem_mb of a spectral table job (MB): :func:`spectra_bytes` + BASE_MB, × SAFETY, at least MIN_MB (d unknown:
    MIN_MB)."""
    if not d:
        return MIN_MB
    return _mb(spectra_bytes(stage, int(d), n_groups, spectra, n_boundaries))


def convergence_counts(n_groups: int, n_boundaries: int, spectra: dict) -> tuple[int, int]:
    """(subset sizes, boundaries whose metrics are recomputed per size) of the convergence job."""
    s = spectra
    n_sizes = len(convergence_sizes(n_groups, s["convergence_sizes"]))
    n_edge = max(1, min(int(s["convergence_boundaries"]), n_boundaries))
    return n_sizes, min(n_boundaries, 2 * n_edge + 1)


def spectra_runtime_min(stage: str, d: int | None, n_boundaries: int, n_groups: int, spectra: dict) -> int:
    """runtime (minutes) of a spectral table job over `n_boundaries` boundaries: RATES per boundary (Schur:
    × its products relative to the default grid; convergence: per subset size, every boundary's products and
    the edge boundaries' decompositions), × SAFETY, at least MIN_MINUTES (d unknown: UNKNOWN_MINUTES)."""
    if not d:
        return UNKNOWN_MINUTES
    s = spectra
    if stage == "spectra_convergence":
        _, n_edge = convergence_counts(n_groups, n_boundaries, s)
        sizes = convergence_sizes(n_groups, s["convergence_sizes"])
        return _minutes(sum(convergence_size_seconds(d, S, n_boundaries, n_edge) for S in sizes))
    if stage == "spectra_schur_prep":
        return _minutes(schur_prep_seconds(d, s) * n_boundaries)
    rate = boundary_seconds(stage, d)
    if stage == "spectra_schur":
        rate *= max(1.0, _schur_grid_factor(s))
    return _minutes(rate * n_boundaries)


# ---- the cumulative chains and the convergence sizes fanned out (spectra.boundaries_per_job) ----------------
def cumulative_variant_bytes(d: int, n_groups: int, spectra: dict) -> float:
    """Peak bytes of one variant's job (rule ``spectra_cumulative_variant``): ``spectra_bytes("spectra_cumulative")``
    less the other variant's product and its K tangents (8 + 4·K bytes per d²); the boundary's J̄, Δ and the
    step's temporaries are the same."""
    s = spectra
    K = int(n_groups) if s["ci_blocks"] is None else min(int(s["ci_blocks"]), int(n_groups))
    return spectra_bytes("spectra_cumulative", d, n_groups, s) - (8 + 4 * K) * float(d) * d


def cumulative_variant_mem_mb(d: int | None, n_groups: int, spectra: dict) -> int:
    if not d:
        return MIN_MB
    return _mb(cumulative_variant_bytes(int(d), n_groups, spectra))


def cumulative_variant_runtime_min(d: int | None, n_boundaries: int, variant: str | None = None) -> int:
    """A variant's job: per boundary, the d² term of RATES["spectra_cumulative"] (reading J̄ and forming the
    replicates' deviations, which every variant's job does again) and the variant's share of its d³ term (the
    products and the singular values, RATES["cumulative_variants"]: the `update` products take the certified
    low-rank route, the `full` ones a full SVD; None: the larger share), × the boundaries."""
    if not d:
        return UNKNOWN_MINUTES
    c2, c3 = RATES["spectra_cumulative"]
    shares = RATES["cumulative_variants"]
    share = shares[variant] if variant is not None else max(shares.values())
    d = float(d)
    return _minutes((c2 * d**2 + c3 * d**3 * share) * n_boundaries)


def _one_size(spectra: dict, n_groups: int) -> dict:
    """The spectra section with one convergence size: what one subset's job computes (its size at most G)."""
    return {**spectra, "convergence_sizes": [max(2, int(n_groups))]}


def convergence_subset_mem_mb(d: int | None, n_groups: int, spectra: dict, n_boundaries: int) -> int:
    """A subset size's job (rule ``spectra_convergence_subset``): the convergence model at one size (one size's
    chains; the group means of S ≤ G groups counted at G: the job's size is known only once it runs)."""
    return spectra_mem_mb("spectra_convergence", d, n_groups, _one_size(spectra, n_groups), n_boundaries)


def convergence_subset_runtime_min(
    d: int | None, n_boundaries: int, n_groups: int, spectra: dict, subset: int | None = None
) -> int:
    """A subset size's job: its size's share of the single job (every boundary's products, the edge boundaries'
    decompositions, the final erank SVDs; ``convergence_size_seconds``), the `subset`-th of the sizes of
    `n_groups` groups (the Jacobian job's, or the config's before it ran: the sizes of fewer groups are no larger);
    None or an index past them: the largest size."""
    if not d:
        return UNKNOWN_MINUTES
    sizes = convergence_sizes(n_groups, spectra["convergence_sizes"]) or [2]
    S = sizes[subset] if subset is not None and 0 <= subset < len(sizes) else sizes[-1]
    n_edge = convergence_counts(n_groups, n_boundaries, spectra)[1]
    return _minutes(convergence_size_seconds(int(d), S, n_boundaries, n_edge))


def convergence_subsets(n_groups: int, n_boundaries: int, spectra: dict) -> int:
    """How many subset jobs a fanned-out convergence table has: the sizes the config's n_groups allows (the
    Jacobian job's G is at most that, and fewer groups never give more sizes), at least one (it writes the
    empty table of a single group)."""
    return max(1, convergence_counts(n_groups, n_boundaries, spectra)[0])


def topology_graph_bytes(d: int, n_tokens: int, chunk_tokens: int = 4096, top_k: int = 20) -> float:
    """Peak bytes of one boundary's graph: the boundary's float32 states (memory-mapped, their pages count once
    read), a float64 chunk with its masked copy and centred copy, the cross-products, the correlation and its
    scaling temporary, then |r| and its negation, the partner indices and the boolean adjacency (and transpose)."""
    d2 = float(d) * d
    return 4.0 * n_tokens * d + 3 * 8.0 * chunk_tokens * d + (8 * 3 + 8 * 2 + 3) * d2 + 8.0 * d * top_k


def topology_graph_mem_mb(d: int | None, n_tokens: int, chunk_tokens: int = 4096, top_k: int = 20) -> int:
    if not d:
        return MIN_MB
    return _mb(topology_graph_bytes(int(d), int(n_tokens), int(chunk_tokens), int(top_k)))


def topology_graph_runtime_min(d: int | None, n_tokens: int, n_boundaries: int) -> int:
    """Per boundary c1·d (the Leiden passes) + c_t·tokens·d² (the streamed correlation), RATES["topology_graph"]."""
    if not d:
        return UNKNOWN_MINUTES
    c1, ct = RATES["topology_graph"]
    return _minutes((c1 * float(d) + ct * float(n_tokens) * float(d) ** 2) * n_boundaries)


def coupling_mem_mb(d: int | None, n_boundaries: int, n_sweep: int = 0) -> int:
    """One J̄_b (float64) and I + J̄_b at a time, and every boundary's node and sweep tables (~100 B per row)."""
    if not d:
        return MIN_MB
    return _mb(2 * 8.0 * d * d + 100.0 * d * n_boundaries * (2 + n_sweep))


def coupling_runtime_min(d: int | None, n_boundaries: int, n_permutations: int, n_sweep: int = 0) -> int:
    """Permutation tests: 3 amplifications per boundary (and one per swept γ), each `n_permutations` rank
    correlations of d units (an upper bound: the tests stop early once p is clearly above q)."""
    if not d:
        return UNKNOWN_MINUTES
    return _minutes(RATES["coupling_perm_d"] * float(d) * n_permutations * n_boundaries * (3 + n_sweep))


def config_width(cfg: dict | None) -> int | None:
    """d_model of a config.json dict (its text config for a multimodal wrapper), or None."""
    from .modelinfo import _WIDTH_KEYS, _first

    return _first(cfg, _WIDTH_KEYS) if cfg else None


# ---- the model jobs: activations, the Jacobians, the tokenwise fits and KL, training ------------------------
# Memory: the arrays a job holds at its peak, counted from the code in bytes (a comment per term), plus the
# interpreter with torch and transformers (TORCH_BASE_MB), × SAFETY, at least MIN_MB. Pages of the files a job
# keeps memory-mapped count in full while they are mapped: the weights (``models.load_model`` maps the safetensors,
# and every forward pass reads every page) and a boundary's activation store while it is read. Snakemake's SLURM
# executor passes mem_mb as ``sbatch --mem``; SLURM enforces it with the job's memory cgroup, which charges the
# page cache of the files the job reads and writes as well as its own memory (clean pages are reclaimed under the
# limit, but pages the job reads on every pass then come back from disk each time), and some clusters kill a job
# whose sampled RSS exceeds its request (``JobAcctGatherParams=OverMemoryKill``), an RSS that counts mapped file
# pages. So a request covers the job's RSS, mapped pages included. The activation dump releases the pages it has
# written (``store.dump_activations``), so its store counts one batch, not the whole file.
# Runtime: the job's work (counted from the same shapes) × seconds per unit measured by
# bench/resources_model_rates.py at small widths (bench/results/resources_model_rates.json: one thread on the shared
# 2-core development machine), × SAFETY, at least MIN_MINUTES; doubles on a retry like the rest.
#
# The shapes come from the model's config.json where it is at hand (``model_dims``) and the weights' bytes from the
# safetensors header once the checkpoint is materialised; a hub model before its download with only d_model (and
# n_layers) known is sized with the upper bounds below.

#: the interpreter with torch, transformers and numpy imported and a model's modules built (MB): ~450 MB measured
#: by the bench after the imports; the 600 covers a Snakemake script job's own objects and the allocator's arenas
TORCH_BASE_MB = 600
#: a block's weights when only d is known: 16·d² bounds attention (4·d²: q, k, v, o at full width) plus a gated MLP
#: of width 4·d (12·d²); the vocabulary: 262144 entries, untied (Gemma's; the largest of the supported families)
UNKNOWN_BLOCK_D2 = 16
UNKNOWN_VOCAB = 262144
#: ``tokenwise.neighbours.knn``: a distance block (queries × points) holds at most this many elements
KNN_ELEMENTS = 1 << 24
#: ``spectral.structured``: per-sample tensors of one chunk and a (G', d, m) batch of scaled weights (elements)
STRUCTURED_CHUNK_ELEMENTS = 1 << 24
STRUCTURED_PRODUCT_ELEMENTS = 1 << 26
#: model types whose MLP has two matrices (up, down) instead of three (gate, up, down)
UNGATED_TYPES = ("gpt2", "gpt_neox")


def _cfg_int(cfg: dict, *keys) -> int | None:
    return next((int(cfg[k]) for k in keys if cfg.get(k) is not None), None)


def model_dims(cfg: dict | None, d: int | None = None, n_layers: int | None = None) -> dict | None:
    """The shapes the model jobs' requests follow, from a config.json dict (the decoder's part of a multimodal
    wrapper): d, n_layers, d_ff (the MLP's inner width; Mamba's mixer width), vocab, heads, kv_heads, head_dim,
    gated (three MLP matrices), mamba, the weights of one block (``block_params``) and of the model (``params``,
    embeddings included, an untied head counted twice). Without a config (``estimated``: True) from d and n_layers
    alone: UNKNOWN_BLOCK_D2·d² per block, d_ff = 4·d, full-width heads of 128, UNKNOWN_VOCAB untied. None without d.
    """
    from .modelinfo import _LAYER_KEYS, _WIDTH_KEYS, text_config

    text = text_config(cfg) if cfg else {}
    d = _cfg_int(text, *_WIDTH_KEYS) or (int(d) if d else None)
    if not d:
        return None
    L = _cfg_int(text, *_LAYER_KEYS) or int(n_layers or 1)
    if not text:
        heads = max(1, d // 128)
        return {"d": d, "n_layers": L, "d_ff": 4 * d, "vocab": UNKNOWN_VOCAB, "heads": heads, "kv_heads": heads,
                "head_dim": d // heads, "gated": True, "mamba": False, "estimated": True,
                "block_params": UNKNOWN_BLOCK_D2 * d * d, "params": L * UNKNOWN_BLOCK_D2 * d * d + 2 * UNKNOWN_VOCAB * d}  # fmt: skip
    mtype = str((cfg or {}).get("model_type") or text.get("model_type") or "")
    mamba = mtype.startswith("mamba") or "ssm_state_size" in text
    heads = _cfg_int(text, "num_attention_heads", "n_head") or max(1, d // 64)
    kv = _cfg_int(text, "num_key_value_heads") or heads
    hd = _cfg_int(text, "head_dim") or d // heads
    expand = _cfg_int(text, "expand") or 2
    d_ff = _cfg_int(text, "intermediate_size", "n_inner", "ffn_dim") or (expand * d if mamba else 4 * d)
    vocab = _cfg_int(text, "vocab_size") or UNKNOWN_VOCAB
    gated = mtype not in UNGATED_TYPES and not mamba
    tied = bool(text.get("tie_word_embeddings", (cfg or {}).get("tie_word_embeddings", False)))
    if mamba:  # in_proj d × 2·d_inner, out_proj d_inner × d (x_proj, dt_proj and the convolution are O(d_inner))
        block = 3 * d * d_ff
    else:  # q, o: d × heads·hd; k, v: d × kv_heads·hd; the MLP: (2 or 3) × d × d_ff
        block = d * hd * (2 * heads + 2 * kv) + (3 if gated else 2) * d * d_ff
    return {"d": d, "n_layers": L, "d_ff": d_ff, "vocab": vocab, "heads": heads, "kv_heads": kv, "head_dim": hd,
            "gated": gated, "mamba": mamba, "estimated": False, "block_params": block,
            "params": L * block + vocab * d * (1 if tied else 2)}  # fmt: skip


def safetensors_bytes(path) -> int:
    """The bytes of the tensors in a safetensors file, from its JSON header (no tensor is read)."""
    return sum(count * DTYPE_BYTES[dtype] for count, dtype in _safetensors_tensors(path))


def _torch_mb(bytes_: float) -> int:
    return _mb(bytes_, TORCH_BASE_MB)


def store_names(n_boundaries_kept: int) -> int:
    """The store's files: the kept boundaries and ``final``."""
    return int(n_boundaries_kept) + 1


# -- activations (store.dump_activations) --
def activations_bytes(dims: dict, *, n_windows: int, window_tokens: int, batch_size: int, n_names: int,
                      model_bytes: int, store_bytes: int, weight_bytes: float) -> float:  # fmt: skip
    """Peak bytes of the activation dump besides the interpreter: the weights, one batch's forward pass with every
    captured boundary, its checks and the store rows it writes, and a snapshot's hashing of one file."""
    d, T, B = dims["d"], int(window_tokens), min(int(batch_size), int(n_windows))
    rows, N = B * T, int(n_windows) * T
    H, KV, hd = dims["heads"], dims["kv_heads"], dims["head_dim"]
    total = weight_bytes  # the safetensors, memory-mapped: each forward pass reads every page
    total += 8 * N  # the windows' token ids (int64)
    total += n_names * rows * d * model_bytes  # the hooks keep each kept boundary's (B, T, d) input (and final)
    total += rows * hd * (2 * H + 2 * KV) * model_bytes  # one block's q, k, v and attention output
    total += 2 * B * H * T * T * 4  # eager attention's scores and softmax (B, H, T, T), float32
    total += 4 * rows * dims["d_ff"] * model_bytes  # the MLP's gate, up, act(gate) and product (Mamba: its mixer)
    total += 2 * rows * dims["vocab"] * 4  # the batch's logits (B, T, V) and their float32 copy
    total += rows * d * (4 + 4 + 1 + 1 + store_bytes)  # per boundary: its float32 copy for the checks, the squared
    # norms' operand, two isfinite masks, the rows in the store's dtype
    total += n_names * rows * d * store_bytes + n_names * 2 * 4096  # the rows just written to each file (released
    # once written: one batch per file, and a page at each end)
    total += N * d * store_bytes  # a snapshot hashes the rows written since the last one, mapped: at most one file
    return total


def activations_mem_mb(dims: dict | None, **kw) -> int:
    if not dims:
        return MIN_MB
    return _torch_mb(activations_bytes(dims, **kw))


# -- the tokenwise fits (tokenwise.pipeline.fit_layer) --
def tokenwise_fit_bytes(
    d: int, *, n_tokens: int, n_pool: int, n_anchors: int, k: int, classes, store_bytes: int
) -> float:
    """Peak bytes of one layer's fits besides the interpreter, the largest of the job's phases."""
    d, N, n, k = int(d), int(n_tokens), int(n_pool), int(k)
    m = min(int(n_anchors), n)
    classes = set(classes)
    states = 2 * 4 * n * d  # H0, H1: the pool's rows of the two boundaries, float32 copies (kept to the end)
    read = N * d * store_bytes  # a boundary's store file, mapped while its rows are copied out
    c = min(m, max(1, KNN_ELEMENTS // max(n, 1)))  # kNN queries per distance block
    knn = 2 * 4 * c * n + 3 * 4 * c * 2 * (k + 1) * d  # the distance block and its top-k; the candidates' states,
    # their differences to the query and the squares (c, 2(k+1), d)
    neigh = 2 * 4 * m * k * d + 3 * 4 * m * d  # X, Y (m, k, d) and xa, ya, the radius (m, d)
    glob = 0.0
    if "global" in classes:  # fit_global: H0, H1 in float64 and H1 - H0 while H0ᵀ(H1 - H0) forms, then the solve
        glob = max(3 * 8 * n * d + 3 * 8 * d * d, 2 * 8 * n * d + 7 * 8 * d * d)  # gram, eye, λ·eye, their sum,
        # the Cholesky factor, the right side and the solution (d, d) float64
    gmap = 8 * d * d if "global" in classes else 0  # the global map A, kept for apply_global
    p2 = 2 * k  # localise: [X Y]ᵀ (m, d, 2k) in float64 and geqrf's reflectors; the float32 concatenation first
    local = (8 * m * d * p2 + max(4 * m * d * p2, 8 * m * d * p2)) if classes & {"lowrank", "orthogonal", "mlp"} else 0
    after = (8 * m * d * p2 + 8 * m * p2 * p2) if local else 0  # the reflectors and the coordinates R (m, 2k, 2k)
    # kept for the fits and the geometry; then the largest of: the diag fit's X·Y (m, k, d) float32, the global
    # map's SVDs (A - I, U, S, Vᵀ, LAPACK's workspace), a local fit's arrays in coordinates (fit_orthogonal's locals:
    # the SVD factors of YᵀX, the principal vectors, L, E and their temporaries, ~14 (m, 2k, k) float64, then the
    # singular vectors of L through its (2k, 2k) Gram matrix, 4 more (m, 2k, 2k); fit_mlp's are fewer)
    after += max(4 * m * k * d if "diag" in classes else 0, 5 * 8 * d * d if "global" in classes else 0,
                 11 * 8 * m * p2 * p2 if local else 0)  # fmt: skip
    patches = (
        len(classes) * m * d * (8 + 4)
    )  # every class's prediction t (m, d) float64 and the stacked float32 patches
    return states + max(read, knn, neigh + glob, neigh + gmap + local, neigh + gmap + after + patches)


def tokenwise_fit_mem_mb(d: int | None, **kw) -> int:
    if not d:
        return MIN_MB
    return _torch_mb(tokenwise_fit_bytes(int(d), **kw))


# -- the functional KL (tokenwise.pipeline.kl_checkpoint, tokenwise.kl.patched_kl) --
def tokenwise_kl_bytes(dims: dict, *, n_windows: int, window_tokens: int, n_anchors: int, n_classes: int,
                       batch_rows: int, model_bytes: int, weight_bytes: float) -> float:  # fmt: skip
    """Peak bytes of the KL job besides the interpreter: the weights, every layer's patched states, and one chunk of
    windows resumed together (their clean runs, stacked, and the patched rows' logits and KL). A chunk holds
    R = batch_rows rows of at least C (the classes) per window; a window whose anchors alone exceed R (more than
    R/C of them, 43 with the defaults) is not counted."""
    d, L, T, V = dims["d"], dims["n_layers"], int(window_tokens), dims["vocab"]
    H, KV, hd, b = dims["heads"], dims["kv_heads"], dims["head_dim"], model_bytes
    C = max(1, int(n_classes))
    m = min(int(n_anchors), int(n_windows) * (T - 1))
    R = max(int(batch_rows), C)  # the chunk's patched rows
    W = min(int(n_windows), R // C)  # its windows
    slots = min(W * R, (R + C) ** 2 // (4 * C))  # the query grid (windows × the most rows of one): at most (R+C)²/4C
    total = weight_bytes  # the safetensors, memory-mapped: the clean passes and the resumes read every page
    total += 3 * 8 * int(n_windows) * T  # the store's index (rows × 3, int64)
    total += L * C * m * d * 4  # every layer's patched states (classes, anchors, d) float32
    run = (L + 1) * T * d * b + L * 2 * KV * T * hd * b  # a window's clean run: the block inputs and final state,
    # every layer's keys and values
    total += 2 * W * run  # the chunk's clean runs and their stacked copy
    clean = T * V * 4 + 2 * H * T * T * 4 + 4 * T * dims["d_ff"] * b  # a clean pass: its logits (T, V), attention
    # scores and softmax, the MLP's intermediates (freed after each window)
    resume = 2 * W * (KV + H) * (T + R) * hd * b + slots * H * (T + R) * 4  # a resumed block: the prefix's keys and
    # values with the queries' appended, repeated onto the query heads; the attention weights over the grid
    resume += slots * (3 * d + 4 * dims["d_ff"]) * b  # the grid's states, norms and MLP intermediates
    kl = R * V * (4 + 8) + (R // C) * V * (4 + 8)  # the patched logits (R, V) and their differences D in float64; the
    # chunk's clean logits at the anchors and their softmax in float64
    return total + max(clean, resume + kl)


def tokenwise_kl_mem_mb(dims: dict | None, **kw) -> int:
    if not dims:
        return MIN_MB
    return _torch_mb(tokenwise_kl_bytes(dims, **kw))


# -- the mean Jacobians (spectral.jobs.jacobians.boundary_jacobians: one boundary at a time) --
def jacobian_sample_count(n_windows: int, window_tokens: int, spectra: dict) -> tuple[int, int]:
    """(samples N, sample windows) of the Jacobian job (``jacobians.select_samples``): the first
    min(n_windows, spectra.n_samples) windows' non-BOS tokens (``samples: all``), their last tokens (``last``), or
    a seeded subset of that many (an integer); ``samples: null`` is ``all`` isolated, ``last`` in context."""
    T = int(window_tokens)
    wins = min(int(n_windows), int(spectra["n_samples"]))
    samples = spectra.get("samples")
    if samples is None:
        samples = "last" if spectra.get("context") == "in_context" else "all"
    if samples == "last":
        return wins, wins
    allrows = wins * (T - 1)
    return (allrows if samples == "all" else min(int(samples), allrows)), wins


def jacobian_route(dims: dict, kind: str, spectra: dict) -> str:
    """``structured`` or ``autodiff`` for a boundary kind (``jacobians.choose_method``): autodiff for Mamba's blocks,
    with ``method: autodiff``, and for attention in context."""
    if dims.get("mamba") or spectra.get("method") == "autodiff":
        return "autodiff"
    if spectra.get("context") == "in_context" and kind not in ("mlp", "pli"):
        return "autodiff"
    return "structured"


def jacobian_inner_width(dims: dict, kind: str) -> int:
    """The widest inner dimension m of a boundary's sublayer: the MLP's d_ff, attention's heads·head_dim, Mamba's
    mixer width, the per-layer input's width (Gemma-4: at most d)."""
    if kind == "attn":
        return dims["heads"] * dims["head_dim"]
    if kind == "pli":
        return dims["d"]
    return dims["d_ff"]


def jacobian_terms(dims: dict, kind: str) -> int:
    """Core terms L diag(g) R of a boundary's sublayer: a gated MLP 2, an ungated one and attention 1."""
    return 2 if kind == "mlp" and dims["gated"] else 1


def jacobian_boundary_bytes(dims: dict, kind: str, *, n_samples: int, n_tokens: int, window_tokens: int, n_groups: int,
                            spectra: dict, store_bytes: int, model_bytes: int) -> float:  # fmt: skip
    """Peak bytes of one boundary of the Jacobian job besides the interpreter and the weights."""
    d, N, G = dims["d"], int(n_samples), max(1, int(n_groups))
    m = jacobian_inner_width(dims, kind)
    b = 8 if spectra.get("dtype") == "float64" else 4  # the per-sample work's dtype
    d2 = float(d) * d
    total = n_tokens * d * store_bytes  # the boundary's store file, mapped while the samples' rows are read
    total += N * d * (4 + (b if b != 4 else 0))  # the samples' states x (N, d) float32 (and in the work's dtype)
    if jacobian_route(dims, kind, spectra) == "autodiff":
        c = int(spectra.get("chunk_size") or 16)
        prefix = int(window_tokens) - 1 if spectra.get("context") == "in_context" else 0
        total += c * prefix * d * (4 + b)  # the chunk's prefixes (in context), read and in the work's dtype
        # the chunk's Jacobians (c, d, d), their float64 copy for the sums; vmapped jacrev's d cotangents through
        # the sublayer's widest activation, a few tensors of (c, d, m)
        total += c * d2 * (b + 8) + 4 * c * d * m * b
        return total + 2 * G * d2 * 8  # the group sums (G, d, d) float64 and their means
    terms = jacobian_terms(dims, kind)
    total += terms * m * d * b  # the core's right factors with the pre-norm's scale folded in, R·D_P (m, d)
    if kind == "attn":
        total += m * d * model_bytes  # the value weights repeated onto the query heads (heads·head_dim, d)
    c = min(N, max(1, STRUCTURED_CHUNK_ELEMENTS // (4 * m)))  # samples per chunk
    # per chunk (c, m): up, gate, the tangent of ones, act and act' from torch.func.jvp of the activation with its
    # two temporaries (SiLU: the sigmoid and its derivative's factor), the term's product; two float64 weights
    chunk = c * m * (8 * b + 2 * 8)
    product = min(G, max(1, STRUCTURED_PRODUCT_ELEMENTS // (d * m))) * (d * m * b + d2 * (b + 8))  # a batch of
    # scaled weights (G', d, m) and its product (G', d, d) with the float64 copy
    S = min(N, int(spectra.get("summary_samples") or 0))
    per = min(S, max(1, STRUCTURED_PRODUCT_ELEMENTS // (4 * d * d)))  # per-sample summaries formed together
    summaries = 3 * per * d2 * 8  # their sums (per, d, d) float64: the sum, its D_Q-scaled copy, the branches' total
    groups = G * d2 * 8  # the group sums (G, d, d) float64
    total += groups + max(
        chunk + 2 * d2 * 8,  # the low-rank terms' (d, d) float64 update per group
        product + d2 * (b + 8),  # the diagonal terms (attention: one L·R (d, d) shared by the groups)
        groups + d2 * 16,  # the sums scaled by D_Q (and their copy in the sum over branches); later the group means
        summaries + per * d * m * b,  # the summary samples' Jacobians, formed while the sums are kept
        G * d2 * 4,  # the group means written in float32
    )
    return total


def jacobians_bytes(dims: dict, kinds, *, weight_bytes: float, **kw) -> float:
    """Peak bytes of the Jacobian job besides the interpreter: the weights (memory-mapped; converted when
    spectra.dtype differs from the model's) and its largest boundary."""
    b_model, b_work = kw["model_bytes"], 8 if kw["spectra"].get("dtype") == "float64" else 4
    weights = weight_bytes * (1 + (b_work / b_model if b_work != b_model else 0))
    return weights + max(jacobian_boundary_bytes(dims, k, **kw) for k in set(kinds))


def jacobians_mem_mb(dims: dict | None, kinds, **kw) -> int:
    if not dims:
        return MIN_MB
    return _torch_mb(jacobians_bytes(dims, kinds, **kw))


# -- the work of each model job, in units whose seconds bench/resources_model_rates.py measures (its fit of seconds
# per unit is not used yet: the model jobs' runtimes are the profile's) --
def activations_work(dims: dict, *, n_windows: int, window_tokens: int, n_names: int, **_) -> dict:
    """The dump's work: every token through the blocks and the head (multiply-adds per token: the weights of the
    matrix products), eager attention (T keys per token and layer at heads·head_dim), and the rows checked and
    written per store file."""
    N, T, d, L = int(n_windows) * int(window_tokens), int(window_tokens), dims["d"], dims["n_layers"]
    return {
        "forward": float(N) * (L * dims["block_params"] + dims["vocab"] * d),
        "attention": float(N) * T * L * dims["heads"] * dims["head_dim"],
        "store": float(N) * d * int(n_names),
    }


def tokenwise_fit_work(d: int, *, n_pool: int, n_anchors: int, k: int, classes, **_) -> dict:
    """One layer's fits: the kNN distances (anchors × pool × d), the global map's Gram products (pool × d²) and
    its d³ factorisations and SVDs, the local QR and fits (anchors × d × (2k)²), and the per-anchor MLP training."""
    n, d, k = int(n_pool), int(d), int(k)
    m, classes = min(int(n_anchors), n), set(classes)
    glob = "global" in classes
    return {
        "knn": float(m) * n * d,
        "gram": float(n) * d * d if glob else 0.0,
        "cube": float(d) ** 3 if glob else 0.0,
        "local": float(m) * d * (2 * k) ** 2 if classes & {"lowrank", "orthogonal", "mlp"} else 0.0,
        "anchors": float(m) * k if "mlp" in classes else 0.0,
    }


def tokenwise_kl_work(dims: dict, *, n_windows: int, window_tokens: int, n_anchors: int, n_classes: int, **_) -> dict:
    """The KL's work: a clean pass over each window with an anchor (tokens × the blocks' and head's weights), each
    patched row (anchors × classes, per layer l) resumed through the blocks after l and the head, and its KL over
    the vocabulary."""
    T, L, d, V = int(window_tokens), dims["n_layers"], dims["d"], dims["vocab"]
    m = min(int(n_anchors), int(n_windows) * (T - 1))
    rows = float(m) * max(1, int(n_classes))
    return {
        "clean": float(min(m, int(n_windows))) * T * (L * dims["block_params"] + V * d),
        "resume": rows * (L * (L - 1) / 2 * dims["block_params"] + L * V * d),
        "kl": rows * L * V,
    }


def jacobians_work(dims: dict, kinds, *, n_samples: int, n_groups: int, spectra: dict, **_) -> dict:
    """The Jacobian job's work over its boundaries (``kinds``: one entry per boundary): structured, each sample
    through the sublayer and its norms' low-rank terms (N·d·m per core term and one more) and the low-rank terms'
    (d, d) sums (N·d²), the group means' and summary samples' d×m×d products (attention's one product is shared by
    the groups); by autodiff, d cotangents through the sublayer per sample (N·d²·m)."""
    N, G, d = int(n_samples), max(1, int(n_groups)), dims["d"]
    S = int(spectra.get("summary_samples") or 0)
    per = max(1, STRUCTURED_PRODUCT_ELEMENTS // (4 * d * d))
    work = {"sample": 0.0, "lowrank": 0.0, "product": 0.0, "autodiff": 0.0}
    for kind in kinds:
        m, t = jacobian_inner_width(dims, kind), jacobian_terms(dims, kind)
        if jacobian_route(dims, kind, spectra) == "autodiff":
            work["autodiff"] += float(N) * d * d * m
            continue
        work["sample"] += float(N) * d * m * (t + 1)
        work["lowrank"] += float(N) * d * d
        products = (1 + -(-S // per)) if kind == "attn" else t * (G + S)
        work["product"] += float(products) * d * d * m
    return work
