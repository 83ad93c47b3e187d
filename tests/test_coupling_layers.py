"""The per-layer coupling test (Simes within a layer, BH across layers) on constructed p-values."""

from __future__ import annotations

import numpy as np
import pandas as pd

from layergeom.topology.coupling import (
    apply_layer_fdr,
    fdr_bh,
    layer_fdr,
    significant_counts,
    simes,
)

Q = 0.05


def _table(p_by_layer: list[tuple[float, ...]]) -> pd.DataFrame:
    """A coupling table with the given p-values, the boundary-level BH of docs/methods.md §3.5 applied."""
    rows = [{"boundary": f"L{ly}.{k}", "layer": ly, "kind": k, "rho": 0.5, "p_value": p}
            for ly, ps in enumerate(p_by_layer) for k, p in zip(("attn", "mlp"), ps)]  # fmt: skip
    t = pd.DataFrame(rows)
    t["significant"], t["q_value"] = fdr_bh(t["p_value"].to_numpy(), Q)
    return t


def simes_by_rejection(p: np.ndarray) -> float:
    """Simes' p as the smallest level α at which Simes' test rejects (some p_(i) ≤ iα/m), by bisection."""
    p = np.sort(p)
    m = len(p)
    lo, hi = 0.0, 1.0
    if not np.any(p <= np.arange(1, m + 1) * hi / m):
        return 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if np.any(p <= np.arange(1, m + 1) * mid / m) else (mid, hi)
    return hi


def test_simes_is_the_smallest_rejecting_level():
    rng = np.random.default_rng(0)
    for m in (1, 2, 3, 5):
        for _ in range(50):
            p = rng.random(m) ** 3
            assert abs(simes(p) - simes_by_rejection(p)) < 1e-12
    assert np.isnan(simes(np.array([np.nan, np.nan])))
    assert simes(np.array([0.01, np.nan])) == 0.01  # a missing test is not counted


def test_simes_is_exact_under_independent_nulls():
    """P(Simes p ≤ α) = α for independent uniform p-values (Simes 1986); the minimum p would give 1 − (1 − α)²."""
    rng = np.random.default_rng(1)
    n = 40_000
    p = rng.random((n, 2))
    rate = np.mean([simes(row) <= Q for row in p])
    se = np.sqrt(Q * (1 - Q) / n)
    assert abs(rate - Q) < 4 * se, rate
    assert np.mean(p.min(axis=1) <= Q) > Q + 20 * se  # the any-boundary rule at the layer level is not a test


def test_any_boundary_count_exceeds_the_per_layer_test_by_construction():
    """10 layers with two tiny p's and 5 with one p = 0.02, 15 null layers (p = 0.4, 0.6), 60 boundaries:
    boundary-level BH rejects the 25 smallest (0.02 ≤ 25·q/60 = 0.0208), so 15 layers have a significant
    boundary; the layers' Simes p are 1e-5 (min(2p, p)), 0.04 and 0.6, and BH over 30 layers stops at 10
    (0.04 > 15·q/30 = 0.025): the strong layers' second boundaries carried the weak ones past the threshold."""
    t = _table([(1e-5, 1e-5)] * 10 + [(0.02, 1.0)] * 5 + [(0.4, 0.6)] * 15)
    assert int(t["significant"].sum()) == 25
    per = layer_fdr(t, Q)
    np.testing.assert_allclose(per["p_layer"], [1e-5] * 10 + [0.04] * 5 + [0.6] * 15)
    assert per["significant_layer"].tolist() == [True] * 10 + [False] * 20
    counts = significant_counts({("m", "c"): apply_layer_fdr(t, Q)}).iloc[0]
    assert (counts["n_significant_layers"], counts["n_significant_layers_simes"]) == (15, 10)
    assert counts["n_significant_boundaries"] == 25


def test_layer_columns_repeat_on_every_boundary_of_the_layer():
    t = apply_layer_fdr(_table([(0.001, 0.3), (0.5, 0.02), (0.9, 0.8)]), Q)
    for _, g in t.groupby("layer"):
        assert g["p_layer"].nunique() == 1 and g["significant_layer"].nunique() == 1
        assert abs(g["p_layer"].iloc[0] - simes_by_rejection(g["p_value"].to_numpy())) < 1e-12
    # BH over the three layers' Simes p (0.002, 0.04, 0.9): q = 0.006, 0.06, 0.9
    np.testing.assert_allclose(t.groupby("layer")["q_layer"].first(), [0.006, 0.06, 0.9])
    assert t.groupby("layer")["significant_layer"].first().tolist() == [True, False, False]


def test_per_layer_test_controls_the_layer_fdr():
    """Simulated: 10 coupled layers (both boundaries' p from Beta(0.1, 1)), 20 null layers (uniform p); the
    false-discovery proportion among the layers the per-layer test calls significant averages ≤ q."""
    rng = np.random.default_rng(2)
    fdp = []
    for _ in range(400):
        p = np.vstack([rng.beta(0.1, 1, size=(10, 2)), rng.random((20, 2))])
        per = layer_fdr(_table([tuple(r) for r in p]), Q)
        found = per["significant_layer"].to_numpy()
        fdp.append(found[10:].sum() / max(found.sum(), 1))
    # BH's FDR is (m0/m)·q = (20/30)·0.05 here; allow 4 standard errors of the mean FDP
    assert np.mean(fdp) < Q * 20 / 30 + 4 * np.std(fdp) / np.sqrt(len(fdp)), np.mean(fdp)


def test_coupling_table_carries_the_per_layer_test():
    """coupling.tsv: a layer with one planted coupling (L0.mlp) and a null layer; p_layer is the Simes p of
    each layer's two permutation p-values and significant_layer its BH decision over the two layers."""
    from test_topology import _defaults, _graph_nodes, henricis

    from layergeom.topology.coupling import coupling_table

    rng = np.random.default_rng(5)
    d, graphs, jac = 60, {}, {}
    for i, b in enumerate(["L0.attn", "L0.mlp", "L1.attn", "L1.mlp"]):
        p = rng.random(d)
        gain = 0.3 * p + 0.05 * rng.normal(size=d) if i == 1 else 0.3 * rng.random(d)
        jac[b] = np.diag(np.exp(gain) - 1) + 1e-3 * rng.normal(size=(d, d))
        graphs[b] = _graph_nodes(p)
    cfg = _defaults(n_permutations=999)
    t = coupling_table(graphs, jac, cfg, seed=0, henrici_values=henricis(jac))
    for _, g in t.groupby("layer"):
        assert np.allclose(g["p_layer"], simes_by_rejection(g["p_value"].to_numpy()), atol=1e-12)
    per = t.groupby("layer")[["p_layer", "significant_layer"]].first()
    reject, _ = fdr_bh(per["p_layer"].to_numpy(), cfg["fdr_q"])
    assert per["significant_layer"].tolist() == reject.tolist()
    assert per["significant_layer"].tolist()[0]  # the planted coupling makes layer 0 significant
