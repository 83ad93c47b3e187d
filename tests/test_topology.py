"""Paper B topology: streamed correlations, top-k graphs, signed Leiden, participation, coupling statistics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from layergeom.config import load_schema
from layergeom.io import read_tsv, write_tsv
from layergeom.spectral.spectra import henrici_departure
from layergeom.topology.communities import boundary_nodes, boundary_topology, participation, signed_leiden
from layergeom.topology.coupling import (
    AMPLIFICATIONS,
    COUPLING_COLUMNS,
    amplification,
    coupling_table,
    fdr_bh,
    henrici_split,
    operator_summary,
    permutation_count,
    significant_counts,
    spearman_permutation,
    sweep_table,
)
from layergeom.topology.graphs import SignedGraph, correlation_graph, streamed_correlation, topk_graph
from layergeom.topology.pipeline import coupling_tables, write_topology


def henrici(J: np.ndarray) -> float:
    """The spectra stage's normalised Henrici departure of J (eigenvalues by LAPACK)."""
    return henrici_departure(J, np.linalg.eigvals(J))


def henricis(jac: dict) -> dict:
    return {b: henrici(J) for b, J in jac.items()}


def _defaults(**over):
    """The topology section with the schema's defaults (the same path the workflow takes)."""
    schema = load_schema("topology")
    cfg = {k: v["default"] for k, v in schema["properties"].items()}
    cfg["leiden"] = {k: v["default"] for k, v in schema["properties"]["leiden"]["properties"].items()}
    cfg.update(over)
    return cfg


def _ari(a, b) -> float:
    import igraph as ig

    return ig.compare_communities(list(a), list(b), method="adjusted_rand")


def _factor_data(rng, n, groups, signs=None, noise=1.0):
    """Tokens (n, d): unit j of group g is s_j · z_g + noise, with z_g one shared latent per group."""
    signs = np.ones(len(groups)) if signs is None else np.asarray(signs)
    z = rng.normal(size=(n, int(max(groups)) + 1))  # (n, n_factors)
    return (z[:, groups] * signs + noise * rng.normal(size=(n, len(groups)))).astype(np.float32)


# ---- correlations and graphs --------------------------------------------------------------------
def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not _cuda_available(), reason="no CUDA device"))]


def _numpy_correlation(x: np.ndarray) -> np.ndarray:
    """Pearson r of the columns of x (n, d) in one float64 pass of numpy: centred by the exact mean, the
    cross-products by matmul, scaled by the standard deviations (an independent reference)."""
    xc = x.astype(np.float64) - x.astype(np.float64).mean(axis=0)
    m2 = xc.T @ xc
    sd = np.sqrt(np.diag(m2))
    return m2 / np.outer(sd, sd)


@pytest.mark.parametrize("device", DEVICES)
def test_streamed_correlation_on_a_device_matches_numpy(tmp_path, device):
    """The torch path (float64 accumulation on `device`) against an independent numpy computation: <= 1e-10
    (the correlations are in [-1, 1]) over several chunks, a mask and a massive coordinate mean."""
    rng = np.random.default_rng(11)
    n, d = 2501, 48
    x = (rng.normal(size=(n, d)) @ rng.normal(size=(d, d))).astype(np.float32)
    x[:, 5] += 3e3  # a massive activation: the streamed centring must not lose it
    np.save(tmp_path / "s.npy", x)
    states = np.load(tmp_path / "s.npy", mmap_mode="r")
    mask = rng.random(n) > 0.1
    want = _numpy_correlation(x[mask])
    for chunk in (97, 1000, 4096):
        got = streamed_correlation(states, mask, chunk_tokens=chunk, device=device)
        assert got.dtype == np.float64 and got.shape == (d, d)
        err = np.abs(got - want).max()
        assert err <= 1e-10, (chunk, err)
        assert np.all(np.diag(got) == 1.0)
    # the test can fail: a float32 accumulation misses by far more than the tolerance
    x32 = x[mask] - x[mask].mean(axis=0)
    m32 = x32.T @ x32
    assert np.abs(m32 / np.sqrt(np.outer(np.diag(m32), np.diag(m32))) - want).max() > 1e-10


@pytest.mark.parametrize("device", DEVICES)
def test_correlation_graph_on_a_device_is_the_cpu_graph(device):
    """Same input, same graph on every device: edges, signs and (to 1e-10) weights."""
    rng = np.random.default_rng(12)
    x = _factor_data(rng, 1500, np.repeat([0, 1, 2], [10, 12, 8]), np.tile([1.0, -1.0], 15), noise=1.5)
    cpu = correlation_graph(x, None, k=6, chunk_tokens=400)
    got = correlation_graph(x, None, k=6, chunk_tokens=400, device=device)
    np.testing.assert_array_equal(got.src, cpu.src)
    np.testing.assert_array_equal(got.dst, cpu.dst)
    np.testing.assert_allclose(got.r, cpu.r, rtol=0, atol=1e-10)
    want = _numpy_correlation(x)
    np.testing.assert_allclose(got.r, want[got.src, got.dst], rtol=0, atol=1e-10)


def test_streamed_correlation_equals_corrcoef_on_a_memmap(tmp_path):
    rng = np.random.default_rng(0)
    n, d = 1003, 17
    x = rng.normal(size=(n, d)) @ rng.normal(size=(d, d))
    x[:, 3] += 1e4  # a huge mean (massive activation) must not cost precision
    mm = np.lib.format.open_memmap(tmp_path / "s.npy", mode="w+", dtype=np.float32, shape=(n, d))
    mm[:] = x
    mm.flush()
    states = np.load(tmp_path / "s.npy", mmap_mode="r")
    mask = rng.random(n) > 0.2
    want = np.corrcoef(np.asarray(states, dtype=np.float64)[mask], rowvar=False)
    for chunk in (1, 64, 250, 5000):
        got = streamed_correlation(states, mask, chunk_tokens=chunk)
        np.testing.assert_allclose(got, want, atol=1e-12, rtol=0)


def test_constant_coordinate_gets_zero_correlation():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 5))
    x[:, 2] = 7.0
    r = streamed_correlation(x, None, chunk_tokens=33)
    assert np.all(r[2, [0, 1, 3, 4]] == 0) and r[2, 2] == 1
    g = topk_graph(r, 2)
    assert not np.any((g.src == 2) | (g.dst == 2))  # zero correlations never become edges


def test_topk_graph_is_the_union_of_each_nodes_top_partners():
    rng = np.random.default_rng(2)
    d, k = 30, 4
    r = np.corrcoef(rng.normal(size=(100, d)), rowvar=False)
    g = topk_graph(r, k)
    want = set()
    for i in range(d):  # independent brute force: sort each row
        order = [j for j in np.argsort(-np.abs(r[i])) if j != i][:k]
        want |= {(min(i, j), max(i, j)) for j in order}
    assert set(zip(g.src.tolist(), g.dst.tolist())) == want
    np.testing.assert_array_equal(g.r, r[g.src, g.dst])
    deg_pos, deg_neg = g.degrees()
    assert np.all(deg_pos + deg_neg >= k)
    pos, neg = g.layer(+1), g.layer(-1)
    assert pos.vcount() == neg.vcount() == d
    assert pos.ecount() + neg.ecount() == len(g.r)
    assert min(pos.es["weight"] + neg.es["weight"]) > 0  # both layers weighted by |r|


# ---- communities ---------------------------------------------------------------------------------
def test_planted_communities_are_recovered():
    rng = np.random.default_rng(3)
    groups = np.repeat([0, 1, 2], [20, 15, 25])
    x = _factor_data(rng, 3000, groups)
    g = correlation_graph(x, None, k=20, chunk_tokens=512)
    comm = signed_leiden(g, resolution=0.05, seed=0, negative_resolution=0.0, n_iterations=-1)
    assert _ari(comm.membership, groups) == pytest.approx(1.0)


def test_anticorrelated_units_end_up_in_different_communities():
    # one latent drives both halves with opposite signs: |r| alone cannot tell them apart
    rng = np.random.default_rng(4)
    groups = np.zeros(40, dtype=int)
    signs = np.repeat([1.0, -1.0], 20)
    x = _factor_data(rng, 3000, groups, signs)
    g = correlation_graph(x, None, k=20, chunk_tokens=4096)
    assert g.negative.sum() > 0.3 * len(g.r)
    comm = signed_leiden(g, resolution=0.05, seed=0, negative_resolution=0.0, n_iterations=-1)
    assert _ari(comm.membership, signs > 0) == pytest.approx(1.0)
    # control: the same graph with the signs dropped puts everything together, so the test can fail
    unsigned = SignedGraph(g.n_nodes, g.src, g.dst, np.abs(g.r))
    assert signed_leiden(unsigned, resolution=0.05, seed=0, negative_resolution=0.0, n_iterations=-1).n_communities == 1


def test_resolution_acts_through_the_positive_layer_only():
    rng = np.random.default_rng(5)
    x = _factor_data(rng, 2000, np.repeat([0, 1], 15), np.tile([1.0, -1.0], 15), noise=2.0)
    g = correlation_graph(x, None, k=10, chunk_tokens=4096)
    gammas = (0.01, 0.15, 0.3)  # below, inside and above the range of the edge weights |r| ≈ 0.17 … 0.25
    n_comm = [signed_leiden(g, gamma, 0.0, seed=0, n_iterations=-1).n_communities for gamma in gammas]
    assert n_comm[0] < n_comm[1] < n_comm[2]
    # equal resolutions on both layers cancel: every γ gives the same partition (why γ⁻ is its own key)
    same = [signed_leiden(g, gamma, gamma, seed=0, n_iterations=-1).membership for gamma in gammas]
    assert all(np.array_equal(same[0], m) for m in same[1:])


def test_leiden_is_seeded():
    rng = np.random.default_rng(6)
    x = _factor_data(rng, 500, np.repeat([0, 1, 2, 3], 10), noise=3.0)
    g = correlation_graph(x, None, k=8, chunk_tokens=4096)
    a, b = (
        signed_leiden(g, 0.05, seed=11, negative_resolution=0.0, n_iterations=-1),
        signed_leiden(g, 0.05, seed=11, negative_resolution=0.0, n_iterations=-1),
    )
    np.testing.assert_array_equal(a.membership, b.membership)


def test_participation_matches_a_hand_computation():
    #   0 -1 (w 1)   0 -2 (w 2)   0 -3 (w 1)   2 -3 (w 1)   1 -3 negative (ignored)   node 4 isolated
    g = SignedGraph(5, np.array([0, 0, 0, 2, 1]), np.array([1, 2, 3, 3, 3]), np.array([1.0, 2.0, 1.0, 1.0, -0.9]))
    membership = np.array([0, 0, 1, 1, 2])
    p = participation(g, membership)
    want = [1 - (1 / 4) ** 2 - (3 / 4) ** 2, 0.0, 1 - (2 / 3) ** 2 - (1 / 3) ** 2, 1 - 0.5**2 - 0.5**2, np.nan]
    np.testing.assert_allclose(p, want, atol=1e-15)
    flags = boundary_nodes(p, 50)  # median of the finite values {0, 0.375, 0.444, 0.5} is 0.41
    np.testing.assert_array_equal(flags, [False, False, True, True, False])
    mostly_inside = np.r_[np.zeros(9), 0.3, np.nan]  # 80th percentile is 0: only the mixing node qualifies
    np.testing.assert_array_equal(np.flatnonzero(boundary_nodes(mostly_inside, 80)), [9])


def test_boundary_topology_tables_roundtrip(tmp_path):
    rng = np.random.default_rng(7)
    x = _factor_data(rng, 600, np.repeat([0, 1], 16), noise=1.5)
    mask = np.arange(len(x)) % 30 != 0  # like the store's non-BOS rows
    topo = boundary_topology(x, mask, _defaults(resolution_sweep=[0.2, 0.05]), seed=0)
    paths = [tmp_path / f for f in ("n.tsv", "e.tsv", "s.tsv")]
    write_topology(topo, *paths)
    nodes, edges, sweep = (read_tsv(p) for p in paths)
    assert list(nodes.columns)[:4] == ["node", "community", "participation", "boundary"]
    assert nodes["boundary"].dtype == bool and "true" in paths[0].read_text()
    assert nodes["boundary"].mean() == pytest.approx(0.2, abs=0.1)
    assert set(sweep["gamma"]) == {0.05, 0.2} and len(sweep) == 2 * 32
    prim = sweep[sweep["gamma"] == 0.05].sort_values("node")
    np.testing.assert_allclose(prim["participation"], nodes["participation"])
    assert (edges["source"] < edges["target"]).all() and (edges["r"] != 0).all()


# ---- amplification and statistics ------------------------------------------------------------------
def test_amplification_variants_by_hand():
    J = np.array([[1.0, 0.5], [2.0, -3.0]])  # I + J = [[2, .5], [2, -2]]
    np.testing.assert_allclose(amplification(J, "full"), np.log([np.sqrt(8), np.sqrt(4.25)]))
    np.testing.assert_allclose(amplification(J, "update"), np.log([np.sqrt(5), np.sqrt(9.25)]))
    np.testing.assert_allclose(amplification(J, "self"), np.log([2.0, 2.0]))


def test_henrici_of_normal_and_nonnormal_matrices():
    rng = np.random.default_rng(8)
    q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    assert henrici(q @ np.diag(rng.normal(size=6)) @ q.T) == pytest.approx(0.0, abs=1e-7)
    assert henrici(np.triu(np.ones((4, 4)), 1)) == pytest.approx(1.0)  # nilpotent: all departure
    np.testing.assert_array_equal(
        henrici_split(np.array([0.1, 0.9, 0.5])), ["near-symmetric", "non-normal", "near-symmetric"]
    )


def test_spearman_rho_equals_scipy_and_is_small_for_a_planted_coupling():
    rng = np.random.default_rng(9)
    x = rng.normal(size=300)
    y = 0.5 * x + rng.normal(size=300)
    rho, p, n, used = spearman_permutation(x, y, 999, np.random.default_rng(0))
    assert rho == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12) and n == 300 and used == 999
    assert p == pytest.approx(2 / 1000)  # the smallest two-sided value 999 permutations can give
    x[:5] = np.nan
    assert spearman_permutation(x, y, 99, np.random.default_rng(0))[2] == 295


def test_permutation_p_value_agrees_with_the_exact_null_on_a_small_case():
    # n = 6: all 720 permutations enumerated give the exact two-sided p of this statistic
    from itertools import permutations

    x, y = np.array([1.0, 3, 2, 5, 4, 6]), np.array([2.0, 1, 4, 3, 6, 5])
    rx, ry = stats.rankdata(x) - 3.5, stats.rankdata(y) - 3.5
    null = np.array([rx[list(q)] @ ry for q in permutations(range(6))])
    obs = rx @ ry
    exact = min(1.0, 2 * min(np.mean(null >= obs - 1e-9), np.mean(null <= obs + 1e-9)))
    p = spearman_permutation(x, y, 20000, np.random.default_rng(1))[1]
    assert p == pytest.approx(exact, abs=4 * np.sqrt(exact * (1 - exact) / 20000) + 2e-4)


def test_adaptive_stop_spends_permutations_only_near_the_threshold():
    rng = np.random.default_rng(11)
    x = np.linspace(-1, 1, 201)
    null_y, strong_y = x**2, 0.6 * x + rng.normal(size=201)  # ρ(x, x²) = 0 on a symmetric grid: p ≈ 1
    _, p_null, _, used_null = spearman_permutation(x, null_y, 20000, np.random.default_rng(0), stop_above=0.05)
    _, p_strong, _, used_strong = spearman_permutation(x, strong_y, 20000, np.random.default_rng(0), stop_above=0.05)
    assert p_null > 0.05 and used_null < 20000  # stopped: can never pass BH at 0.05
    assert used_strong == 20000 and p_strong == pytest.approx(2 / 20001)


@pytest.mark.parametrize("model", sorted(__import__("conftest").TEST_CONFIG["models"]))
def test_permutation_count_lets_one_boundary_pass_bh_on_the_test_config(model):
    from conftest import TEST_CONFIG

    from layergeom.adapters import boundaries_for

    m_cfg = TEST_CONFIG["models"][model]
    h = m_cfg["hf_config"]
    m = len(boundaries_for(m_cfg["family"], int(h.get("num_hidden_layers") or h.get("n_layer"))))
    q = _defaults()["fdr_q"]
    n = permutation_count(m, q, _defaults()["n_permutations"])
    assert n >= np.ceil(2 * m / q)
    assert 2 / (n + 1) <= q / m  # the smallest p passes BH alone: p_(1) ≤ q·1/m
    # and on a table: a planted coupling at one boundary among m nulls is significant alone
    rng = np.random.default_rng(21)
    d = 80
    names = [f"L{i}.block" for i in range(m)]
    graphs, jac = {}, {}
    for i, b in enumerate(names):
        p = rng.random(d)
        gain = 0.5 * p if i == 0 else 0.3 * rng.random(d)
        jac[b] = np.diag(np.exp(gain) - 1)
        graphs[b] = _graph_nodes(p)
    t = coupling_table(graphs, jac, _defaults(), seed=0, henrici_values=henricis(jac))
    assert bool(t["significant"].iloc[0]) and int(t["n_permutations"].iloc[0]) == n


def test_permutation_p_value_is_uniform_under_the_null():
    # 400 independent null data sets; a valid permutation p is uniform on its grid (super-uniform at worst).
    # Criteria fixed in advance at the 0.001 level: binomial test of #{p < 0.1} against 0.1 and a KS test.
    m, n = 400, 40
    rng = np.random.default_rng(10)
    p = np.array(
        [
            spearman_permutation(rng.normal(size=n), rng.normal(size=n), 999, np.random.default_rng(s))[1]
            for s in range(m)
        ]
    )
    assert stats.binomtest(int((p < 0.1).sum()), m, 0.1).pvalue > 1e-3
    assert stats.kstest(p, "uniform").pvalue > 1e-3


def test_bh_matches_a_hand_computation():
    p = np.array([0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, np.nan, 0.9])
    reject, q = fdr_bh(p, 0.05)
    ok = np.isfinite(p)
    assert np.isnan(q[~ok]).all() and not reject[~ok].any()
    # hand: q_(i) = min_{j >= i} m p_(j) / j over the sorted finite p-values, capped at 1
    pf = np.sort(p[ok])
    mf = len(pf)
    hand = np.minimum(1, [min(mf * pf[j] / (j + 1) for j in range(i, mf)) for i in range(mf)])
    np.testing.assert_allclose(np.sort(q[ok]), hand)
    np.testing.assert_array_equal(reject[ok], q[ok] <= 0.05)
    assert reject[ok].sum() == 2  # by hand: 0.001 ≤ .05/9, 0.008 ≤ 2·.05/9, and 0.039 > 3·.05/9 …


# ---- the coupling table ----------------------------------------------------------------------------
def _graph_nodes(p, percentile=80):
    return pd.DataFrame(
        {"community": np.arange(len(p)) % 3, "participation": p, "boundary": boundary_nodes(p, percentile)}
    )


def test_coupling_table_finds_planted_couplings_only():
    rng = np.random.default_rng(12)
    d = 60
    names = ["L0.attn", "L0.mlp", "L1.attn", "L1.mlp"]
    graphs, jac = {}, {}
    for i, b in enumerate(names):
        p = rng.random(d)
        gain = 0.3 * p + 0.05 * rng.normal(size=d) if i < 2 else 0.3 * rng.random(d)  # coupled, then null
        sign = -1 if i == 1 else 1
        jac[b] = np.diag(np.exp(sign * gain) - 1) + 1e-3 * rng.normal(size=(d, d))  # ln|col| of I+J ≈ ±gain
        graphs[b] = _graph_nodes(p)
    cfg = _defaults(n_permutations=999)
    t = coupling_table(graphs, jac, cfg, seed=0, henrici_values=henricis(jac))
    assert list(t.columns[: len(COUPLING_COLUMNS)]) == COUPLING_COLUMNS
    assert t["significant"].tolist()[:2] == [True, True]
    assert t["rho"].iloc[0] > 0.8 and t["rho"].iloc[1] < -0.8
    # (the nulls' false-positive rate is the uniformity test's business; here: q is BH's and decides significance)
    assert (t["q_value"] >= t["p_value"]).all()
    np.testing.assert_array_equal(t["significant"], t["q_value"] <= cfg["fdr_q"])
    assert (t["layer"].tolist(), t["kind"].tolist()) == ([0, 0, 1, 1], ["attn", "mlp", "attn", "mlp"])
    for v in AMPLIFICATIONS:
        assert f"rho_{v}" in t and f"q_{v}" in t
    np.testing.assert_allclose(t["rho"], t["rho_full"])
    # the same seed gives the same p-values
    pd.testing.assert_frame_equal(t, coupling_table(graphs, jac, cfg, seed=0, henrici_values=henricis(jac)))
    summ = operator_summary(t)
    row = summ[(summ.grouping == "kind") & (summ.group == "mlp")].iloc[0]
    assert (row.n_significant_negative, row.n_significant_positive) == (1, 0)
    counts = significant_counts({("m", "c"): t}).iloc[0]
    assert counts["n_significant_boundaries"] == t["significant"].sum()
    assert counts["n_significant_layers"] == t.loc[t["significant"], "layer"].nunique()


def test_coupling_rejects_a_mismatched_jacobian():
    from layergeom.runtime import LayergeomError

    with pytest.raises(LayergeomError, match="does not match"):
        coupling_table(
            {"L0.block": _graph_nodes(np.random.default_rng(0).random(5))},
            {"L0.block": np.eye(4)},
            _defaults(),
            0,
            henrici_values={"L0.block": 0.0},
        )


def test_sweep_table_has_one_bh_family_per_resolution():
    rng = np.random.default_rng(13)
    d = 30
    sweeps = {
        b: pd.DataFrame(
            {
                "gamma": np.repeat([0.05, 0.5], d),
                "node": np.tile(np.arange(d), 2),
                "community": 0,
                "participation": rng.random(2 * d),
            }
        )
        for b in ("L0.block", "L1.block")
    }
    jac = {b: rng.normal(size=(d, d)) * 0.1 for b in sweeps}
    t = sweep_table(sweeps, jac, _defaults(n_permutations=99), seed=0)
    assert t.groupby("gamma").size().tolist() == [2, 2]
    assert t["significant"].dtype == bool


def test_schema_defaults_are_the_methods_choices():
    cfg = _defaults()
    assert (cfg["top_k"], cfg["resolution"], cfg["boundary_percentile"]) == (20, 0.05, 80)
    assert (cfg["amplification"], cfg["fdr_q"]) == ("full", 0.05)
    assert cfg["n_permutations"] is None and permutation_count(60, 0.05) == 4800


def test_checkpoint_coupling_from_files_uses_the_spectra_henrici(tmp_path):

    rng = np.random.default_rng(14)
    d, names = 25, ["L0.block", "L1.block", "L2.block"]
    paths = {k: [] for k in ("graphs", "sweeps", "jacobians")}
    jac = {}
    for b in names:
        p = rng.random(d)
        nodes = _graph_nodes(p)
        sweep = pd.DataFrame({"gamma": 0.05, "node": np.arange(d), "community": nodes["community"], "participation": p})
        jac[b] = rng.normal(size=(d, d)) * 0.2
        for key, obj in (("graphs", nodes), ("sweeps", sweep)):
            paths[key].append(tmp_path / f"{b}.{key}.tsv")
            write_tsv(obj, paths[key][-1])
        paths["jacobians"].append(tmp_path / f"{b}.npy")
        np.save(paths["jacobians"][-1], jac[b])
    spectra = pd.DataFrame({"boundary": names, "henrici": [henrici(jac[b]) for b in names]})
    write_tsv(spectra, tmp_path / "spectra.tsv")
    cfg = _defaults(n_permutations=199)
    table, by_op, sweep = coupling_tables(
        names, paths["graphs"], paths["sweeps"], paths["jacobians"], tmp_path / "spectra.tsv", cfg, seed=3
    )
    direct = coupling_table(
        {b: _graph_nodes(read_tsv(p)["participation"].to_numpy()) for b, p in zip(names, paths["graphs"])},
        jac,
        cfg,
        3,
        henrici_values=henricis(jac),
    )
    pd.testing.assert_frame_equal(table, direct, check_exact=False, atol=1e-9)  # file H == recomputed H
    np.testing.assert_allclose(sweep["p_value"], table["p_value"])  # the primary γ in the sweep: same draws
    assert set(by_op["grouping"]) == {"all", "kind", "operator", "kind_operator"}
    write_tsv(spectra.iloc[:2], tmp_path / "short.tsv")
    from layergeom.runtime import LayergeomError

    with pytest.raises(LayergeomError, match="no henrici"):
        coupling_tables(names, paths["graphs"], paths["sweeps"], paths["jacobians"], tmp_path / "short.tsv", cfg, 3)
