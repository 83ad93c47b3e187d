"""Memory and runtime of the Schur surgery's jobs: the single job's product counts, a prep job's boundary, a
chain job's products and steps at the measured rates of its cost class, and the segments a chain is split into
(spectra.chain_segments)."""

from __future__ import annotations

import math

from ..spectral.settings import chain_segment_bounds, schur_order_alphas
from ..spectral.settings import schur_chains as schur_chain_plan
from .margins import MIN_MB, UNKNOWN_MINUTES, _mb, _minutes
from .rates import RATES, RATES_SCHUR_GRID, boundary_seconds


def schur_settings_chains(s: dict) -> dict:
    """:func:`schur_chains` of a spectra section."""
    return schur_chains(s["alphas"], s["schur_orders"], s["schur_ci_blocks"], s["schur_ci_controls"],
                        order_alphas=s.get("schur_order_alphas"))  # fmt: skip


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


def _schur_grid_factor(s: dict) -> float:
    """The products of this grid relative to the measured one (RATES_SCHUR_GRID): how the per-boundary rate scales."""
    ch = schur_settings_chains(s)
    measured = schur_chains(**RATES_SCHUR_GRID)
    return (ch["complex"] + ch["orders"]) / (measured["complex"] + measured["orders"])
