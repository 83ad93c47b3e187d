"""The measured speeds of the spectral tables and the topology jobs: seconds per boundary at width d, measured
by bench/resources_rates.py (bench/results/resources_rates.json) at d = 256, 512 and 768 on the 2-core development
machine, fitted as c2·d² + c3·d³ (the LAPACK calls and d×d products the jobs spend their time in grow as d³); a
job's runtime is that times its boundaries, times the safety factor (:mod:`.margins`), at least a floor."""

from __future__ import annotations

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
    "spectra_table": (9.59e-6, 2.15e-9),
    "spectra_cumulative": (4.22e-6, 4.07e-9),
    "spectra_schur": (0.000172, 3.07e-8),
    "convergence_plain": (6.62e-7, 4.03e-10),
    "convergence_edge": (5.39e-6, 1.38e-9),
    "topology_graph": (0.00179, 4.47e-11),
    "coupling_perm_d": 5.62e-8,
    "cumulative_variants": {
        "full": 0.48,
        "update": 0.521,
    },
    "convergence_groups": (21.6, 21.1, 7.5),
    "convergence_final": (0.0, 1.61e-9),
    "schur_steps": {
        "K": 4,
        "d": 4096,
        "advance_order": 1.03e-9,
        "advance_plain": 4.41e-10,
        "advance_tangents": 1.02e-9,
        "order_basis": 1.03e-9,
        "order_full": 6.51e-10,
        "order_update": 1.35e-9,
        "plain_full": 9.53e-10,
        "plain_update": 1.61e-9,
        "prep": 1.44e-8,
        "tangents_full": 2.85e-9,
        "tangents_update": 3.15e-9,
    },  # fmt: skip
}


#: the Schur settings RATES["spectra_schur"] was measured at (bench/resources_rates.py: the schema's defaults); a
#: grid with more products scales the rate by their count
RATES_SCHUR_GRID = {"alphas": (0.0, 0.25, 0.5, 0.75, 1.0), "orders": 8, "ci_blocks": 4, "ci_controls": ("none",),
                    "order_alphas": None}  # fmt: skip


def boundary_seconds(stage: str, d: int) -> float:
    """Seconds of one boundary of a spectral stage at width d (RATES: c2·d² + c3·d³)."""
    c2, c3 = RATES[stage]
    return c2 * float(d) ** 2 + c3 * float(d) ** 3
