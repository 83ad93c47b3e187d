"""Spectral metrics, cumulative operators and Schur surgery: known answers and independent recomputations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.linalg
import scipy.stats

from layergeom.spectral import cumulative, schur, spectra


def rng(seed=0):
    return np.random.default_rng(seed)


def rotation(d: int, angles) -> np.ndarray:
    """Block-diagonal rotation by the given angles (d even)."""
    R = np.zeros((d, d))
    for i, a in enumerate(angles):
        c, s = np.cos(a), np.sin(a)
        R[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, -s], [s, c]]
    return R


def spectrum_distance(a, b) -> float:
    """Largest distance between two eigenvalue multisets after the optimal one-to-one matching."""
    from scipy.optimize import linear_sum_assignment

    cost = np.abs(np.asarray(a)[:, None] - np.asarray(b)[None, :])
    r, c = linear_sum_assignment(cost)
    return float(cost[r, c].max())


def random_orthogonal(d, seed=0):
    return scipy.stats.ortho_group.rvs(d, random_state=seed)


# ---- single-matrix metrics --------------------------------------------------------------------
def test_symmetric_matrix_is_self_realigned_normal_and_real():
    A = rng(1).standard_normal((12, 12))
    S = A + A.T  # symmetric indefinite
    m = spectra.spectral_metrics(S, sr_k=12)
    assert m["self_realign"] == pytest.approx(1.0, abs=1e-12)  # k = d: the whole space
    assert m["henrici"] == pytest.approx(0.0, abs=1e-6)
    assert m["asymmetry"] == pytest.approx(0.0, abs=1e-15)
    assert m["frac_complex"] == 0.0
    P = A @ A.T + 0.1 * np.eye(12)  # symmetric positive definite: U = V for every k
    for k in (1, 3, 7):
        assert spectra.spectral_metrics(P, sr_k=k)["self_realign"] == pytest.approx(1.0, abs=1e-10)


def test_self_realignment_of_rank_one_maps():
    u, v = np.eye(6)[0], np.eye(6)[1]
    U, s, Vh = np.linalg.svd(np.outer(u, v) + 1e-3 * np.outer(v, u))  # top pair: left u, right v
    assert spectra.self_realignment(U, Vh, 1) == pytest.approx(0.0, abs=1e-12)
    U, s, Vh = np.linalg.svd(np.outer(u, u))
    assert spectra.self_realignment(U, Vh, 1) == pytest.approx(1.0, abs=1e-12)
    # random matrices sit near the baseline k/d
    d, k = 200, 20
    U, s, Vh = np.linalg.svd(rng(2).standard_normal((d, d)))
    assert spectra.self_realignment(U, Vh, k) == pytest.approx(k / d, abs=0.05)
    assert spectra.self_realignment(U, Vh, 10 * d) == pytest.approx(1.0)  # k capped at d


def test_rotations_have_complex_eigenvalues():
    d = 8
    R = rotation(d, [0.3, 0.7, 1.1, 2.0])
    Q = random_orthogonal(d, 3)
    for scale, expansive in ((1.1, 1.0), (0.9, 0.0)):
        m = spectra.spectral_metrics(scale * Q @ R @ Q.T, sr_k=2)
        assert m["frac_complex"] == 1.0
        assert m["frac_expansive"] == expansive
        assert m["henrici"] == pytest.approx(0.0, abs=1e-6)  # orthogonal matrices are normal
        assert m["cond"] == pytest.approx(1.0)
    half = rotation(d, [0.5, 0.0, np.pi, 0.2])  # two real pairs (angle 0 and π), two complex pairs
    assert spectra.frac_complex(np.linalg.eigvals(half)) == 0.5


def test_diagonal_matrix_by_hand():
    D = np.diag([3.0, -1.0, 0.0, 0.0])
    m = spectra.spectral_metrics(D, sr_k=2)
    p = np.array([3, 1]) / 4
    assert m["erank"] == pytest.approx(np.exp(-(p * np.log(p)).sum()))  # = 1.7548...
    assert m["erank"] == pytest.approx(1.75477, abs=1e-5)
    assert m["part_ratio"] == pytest.approx((9 + 1) ** 2 / (81 + 1))
    assert m["cond"] == np.inf  # singular
    assert m["frac_expansive"] == 0.25  # only |3| > 1; |-1| is not expansive
    assert m["henrici"] == 0.0 and m["asymmetry"] == 0.0
    assert spectra.effective_rank(np.ones(5)) == pytest.approx(5.0)
    assert spectra.participation_ratio(np.ones(5)) == pytest.approx(5.0)
    assert spectra.condition_number(np.array([4.0, 2.0, 1.0])) == 4.0


def test_henrici_and_asymmetry_known_answers():
    a = 2.0
    J = np.array([[1.0, a], [0.0, 1.0]])  # a Jordan-like block: Σ|λ|² = 2, ‖J‖² = 2 + a²
    assert spectra.henrici_departure(J, np.linalg.eigvals(J)) == pytest.approx(a / np.sqrt(2 + a**2))
    K = rng(3).standard_normal((5, 5))
    assert spectra.asymmetry(K - K.T) == pytest.approx(1.0)
    # complex input: conjugate transpose (a Hermitian matrix is symmetric in this sense)
    H = K + 1j * rng(4).standard_normal((5, 5))
    H = H + H.conj().T
    assert spectra.asymmetry(H) == pytest.approx(0.0, abs=1e-15)


def test_spectra_table_columns_and_order():
    mats = {f"L{i}.{k}": rng(i).standard_normal((6, 6)) / 3 for i in range(2) for k in ("attn", "mlp")}
    t = spectra.spectra_table(mats, {n: 4 for n in mats}, sr_k=64)
    required = ["boundary", "layer", "kind", "n_samples", *spectra.METRICS]
    assert list(t.columns[: len(required)]) == required
    assert list(t["boundary"]) == list(mats) and list(t["layer"]) == [0, 0, 1, 1]
    assert (t["sr_k"] == 6).all()  # capped at d
    ev = spectra.eigenvalue_table({n: spectra.decompose(J) for n, J in mats.items()})
    assert len(ev) == 4 * 6
    lam = np.linalg.eigvals(mats["L1.mlp"])
    np.testing.assert_allclose(np.sort(ev[ev["boundary"] == "L1.mlp"]["abs"]), np.sort(np.abs(lam)))


# ---- cumulative -------------------------------------------------------------------------------
def test_cumulative_matches_direct_products():
    mats = [rng(i).standard_normal((10, 10)) / np.sqrt(10) for i in range(6)]
    for variant in ("update", "full"):
        erank, log_norm = cumulative.cumulative_erank(mats, variant)
        C = np.eye(10)
        for n, J in enumerate(mats):
            C = (J if variant == "update" else np.eye(10) + J) @ C  # no renormalisation: short chain
            assert erank[n] == pytest.approx(spectra.effective_rank(np.linalg.svd(C, compute_uv=False)), rel=1e-10)
            assert log_norm[n] == pytest.approx(np.log(np.linalg.norm(C)), rel=1e-10)


def test_cumulative_of_diagonals_by_hand_and_long_chains_stay_finite():
    D = np.diag([2.0, 1.0, 0.5])
    erank, _ = cumulative.cumulative_erank([D, D, D], "update")
    for n in range(3):  # C_n = diag(2, 1, 0.5)^n
        s = np.array([2.0, 1.0, 0.5]) ** (n + 1)
        p = s / s.sum()
        assert erank[n] == pytest.approx(np.exp(-(p * np.log(p)).sum()))
    erank, log_norm = cumulative.cumulative_erank([10 * np.eye(3) + D] * 400, "update")  # ‖C‖ ~ 12^400
    assert np.isfinite(erank).all() and log_norm[-1] > 700
    table = cumulative.cumulative_table({"L0.attn": D, "L0.mlp": D})
    assert list(table.columns[:4]) == ["variant", "depth", "boundary", "erank"]
    assert list(table["variant"]) == ["update", "update", "full", "full"]
    assert list(table["depth"]) == [1, 2, 1, 2]


# ---- Schur surgery ----------------------------------------------------------------------------
def nonnormal(d=16, seed=5):
    """A real, strongly non-normal matrix with complex eigenvalues."""
    r = rng(seed)
    return r.standard_normal((d, d)) / np.sqrt(d) + np.triu(r.standard_normal((d, d)), 1)


def test_schur_alpha_one_reproduces_and_alpha_zero_is_normal():
    J = nonnormal()
    form = schur.schur_form(J)
    assert np.allclose(np.tril(form.N), 0)
    np.testing.assert_allclose(schur.schur_interpolate(form, 1.0), J, atol=1e-12)
    J0 = schur.schur_interpolate(form, 0.0)
    lam0, lam = np.linalg.eigvals(J0), np.linalg.eigvals(J)
    assert spectrum_distance(lam0, lam) < 1e-9
    assert spectra.henrici_departure(J0, lam0) == pytest.approx(0.0, abs=1e-6)
    assert np.allclose(J0 @ J0.conj().T, J0.conj().T @ J0, atol=1e-10)  # normal
    assert spectra.henrici_departure(J, lam) > 0.5
    # the non-normal part shrinks the Henrici departure monotonically
    h = [spectra.henrici_departure(schur.schur_interpolate(form, a), form.lam) for a in (0.25, 0.5, 0.75, 1.0)]
    assert np.all(np.diff(h) > 0)


def test_random_control_has_same_norm_and_shape():
    N = schur.random_strict_upper(9, 3.5, rng(0))
    assert np.allclose(np.tril(N), 0) and np.linalg.norm(N) == pytest.approx(3.5)
    np.testing.assert_array_equal(N, schur.random_strict_upper(9, 3.5, rng(0)))


def test_schur_surgery_table_against_independent_paths():
    mats = {f"L{i}.{k}": nonnormal(8, seed=10 * i + j) / 3 for i in range(2) for j, k in enumerate(("attn", "mlp"))}
    t = schur.schur_surgery(mats, alphas=[0, 0.5, 1], seed=7, sr_k=4, boundary_metrics="all")
    assert list(t.columns[:4]) == ["alpha", "control", "depth", "erank"]
    assert len(t) == 3 * 2 * 4
    # α=1 with the matrix's own N: the plain cumulative operator and the plain per-boundary metrics
    own = t[(t["alpha"] == 1) & (t["control"] == "none")]
    cum = cumulative.cumulative_table(mats, ["update"])
    np.testing.assert_allclose(own["erank"], cum["erank"], rtol=1e-9)
    plain = spectra.spectra_table(mats, {n: 1 for n in mats}, sr_k=4)
    for col in spectra.METRICS:
        np.testing.assert_allclose(own[f"b_{col}"], plain[col], rtol=1e-7, atol=1e-9, err_msg=col)
    # α=0: normal matrices; both controls coincide; eigenvalue metrics never change with α or control
    zero = t[t["alpha"] == 0]
    assert (zero["b_henrici"].abs() < 1e-6).all()
    a, b = (zero[zero["control"] == c].reset_index(drop=True) for c in ("none", "random"))
    pd.testing.assert_frame_equal(a.drop(columns="control"), b.drop(columns="control"))
    for col in ("b_frac_complex", "b_frac_expansive"):
        assert t.groupby("depth")[col].nunique().max() == 1
    # the random control keeps ‖N‖_F, so the Henrici departure is the same, the geometry is not
    half = t[t["alpha"] == 0.5]
    h = half.pivot(index="depth", columns="control", values="b_henrici")
    np.testing.assert_allclose(h["none"], h["random"], rtol=1e-9)
    s = half.pivot(index="depth", columns="control", values="b_self_realign")
    assert not np.allclose(s["none"], s["random"])
    # seeded
    pd.testing.assert_frame_equal(
        t, schur.schur_surgery(mats, alphas=[0, 0.5, 1], seed=7, sr_k=4, boundary_metrics="all")
    )
    own_only = schur.schur_surgery(mats, alphas=[0, 0.5, 1], seed=7, sr_k=4)  # default: metrics for own N only
    assert list(own_only.columns) == list(t.columns)
    rand = (own_only["control"] == "random") & (own_only["alpha"] > 0)
    assert own_only.loc[rand, "b_self_realign"].isna().all() and own_only.loc[~rand, "b_self_realign"].notna().all()
    pd.testing.assert_series_equal(own_only["erank"], t["erank"])
    assert not schur.schur_surgery(mats, alphas=[1], seed=8, sr_k=4)["erank"].equals(
        schur.schur_surgery(mats, alphas=[1], seed=7, sr_k=4)["erank"]
    )


def test_schur_form_of_a_real_matrix_is_scipy_complex_schur():
    J = nonnormal(6, seed=9)
    T, Q = scipy.linalg.schur(J.astype(complex), output="complex")
    form = schur.schur_form(J)
    np.testing.assert_allclose(form.Q @ (np.diag(form.lam) + form.N) @ form.Q.conj().T, J, atol=1e-12)
    np.testing.assert_allclose(np.abs(form.lam), np.abs(np.diag(T)), atol=1e-12)
