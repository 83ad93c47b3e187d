"""Spectral metrics, cumulative operators and Schur surgery: known answers and independent recomputations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.linalg
import scipy.stats
from schema_defaults import SEED, SPECTRA, schur_surgery, spectral_metrics, table_kw, tol

from layergeom.spectral import cumulative, intervals, linear, schur, schur_basis, spectra


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


# ---- the workflow's paths, called as its table jobs call them (without files) --------------------------------
def spectra_rows(mats: dict, n_samples: int, sr_k: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """spectra.tsv without intervals and the eigenvalue table, as ``jobs.table.write_spectra`` builds them."""
    rows, eig = [], []
    for name, J in mats.items():
        row, dec = spectra.spectra_row(name, J, n_samples, sr_k=sr_k, tol=tol(len(J)))
        rows.append(row)
        eig.append(spectra.eigenvalue_frame(name, dec, tol(len(J))))
    return spectra.order_columns(pd.DataFrame(rows)), pd.concat(eig, ignore_index=True)


def spectra_row_with_intervals(name, J, n_samples, D, weights, sr_k):
    """One spectra.tsv row with its intervals, as ``jobs.table.write_spectra`` builds it."""
    t = tol(len(J))
    row, dec = spectra.spectra_row(name, J, n_samples, sr_k=sr_k, tol=t)
    return row | linear.spectra_intervals(J, dec, row, D, weights, tol=t, ci_level=SPECTRA["ci_level"],
                                          ci_method=SPECTRA["ci_method"])  # fmt: skip


def cumulative_table(mats: dict, variants=cumulative.VARIANTS, deviations=None, weights=None) -> pd.DataFrame:
    """cumulative.tsv, as ``jobs.cumulative.write_cumulative`` composes it (``cumulative_rows``)."""
    steps = ((b, J, None if deviations is None else deviations[b]) for b, J in mats.items())
    return cumulative.cumulative_rows(steps, variants, weights=weights, ci_level=SPECTRA["ci_level"])


def cumulative_erank(mats: list, variant: str) -> tuple[np.ndarray, np.ndarray]:
    """erank(C_n) and log‖C_n‖_F against depth, from ``cumulative_table``."""
    t = cumulative_table({f"L{i}.attn": J for i, J in enumerate(mats)}, [variant])
    return t["erank"].to_numpy(), t["log_norm"].to_numpy()


def product_eranks(mats: list[np.ndarray], variant: str) -> np.ndarray:
    """Reference: erank of the products C_n = M_n ⋯ M_1 (M = step_operator), composed directly, renormalised."""
    C, out = None, []
    for J in mats:
        M = cumulative.step_operator(np.asarray(J, dtype=np.result_type(J, np.float64)), variant)
        C = M if C is None else M @ C
        C = C / np.linalg.norm(C)
        out.append(spectra.effective_rank(np.linalg.svd(C, compute_uv=False)))
    return np.asarray(out)


def product_replicates_exact(mats: list[np.ndarray], deltas: list[np.ndarray], variant: str) -> np.ndarray:
    """Reference: erank of every exact replicate product Π step(J_b + Δ_{b,k}) against depth -> (K, n)."""
    return np.array([product_eranks([J + D[k] for J, D in zip(mats, deltas)], variant) for k in range(len(deltas[0]))])


# ---- single-matrix metrics --------------------------------------------------------------------
def test_symmetric_matrix_is_self_realigned_normal_and_real():
    A = rng(1).standard_normal((12, 12))
    S = A + A.T  # symmetric indefinite
    m = spectral_metrics(S, sr_k=12)
    assert m["self_realign"] == pytest.approx(1.0, abs=1e-12)  # k = d: the whole space
    assert m["henrici"] == pytest.approx(0.0, abs=1e-6)
    assert m["asymmetry"] == pytest.approx(0.0, abs=1e-15)
    assert m["frac_complex"] == 0.0
    P = A @ A.T + 0.1 * np.eye(12)  # symmetric positive definite: U = V for every k
    for k in (1, 3, 7):
        assert spectral_metrics(P, sr_k=k)["self_realign"] == pytest.approx(1.0, abs=1e-10)


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
        m = spectral_metrics(scale * Q @ R @ Q.T, sr_k=2)
        assert m["frac_complex"] == 1.0
        assert m["frac_expansive"] == expansive
        assert m["henrici"] == pytest.approx(0.0, abs=1e-6)  # orthogonal matrices are normal
        assert m["cond"] == pytest.approx(1.0)
        assert m["numerical_rank"] == d and m["n_modes"] == d
    half = rotation(d, [0.5, 0.0, np.pi, 0.2])  # two real pairs (angle 0 and π), two complex pairs
    assert spectra.frac_complex(np.linalg.eigvals(half), tol(d)) == 0.5
    assert spectral_metrics(Q @ half @ Q.T)["frac_complex"] == 0.5


def test_diagonal_matrix_by_hand():
    D = np.diag([3.0, -1.0, 0.0, 0.0])
    m = spectral_metrics(D, sr_k=2)
    p = np.array([3, 1]) / 4
    assert m["erank"] == pytest.approx(np.exp(-(p * np.log(p)).sum()))  # = 1.7548...
    assert m["erank"] == pytest.approx(1.75477, abs=1e-5)
    assert m["part_ratio"] == pytest.approx((9 + 1) ** 2 / (81 + 1))
    assert m["numerical_rank"] == 2 and m["n_modes"] == 2
    assert m["cond"] == 3.0 and m["cond_full"] == np.inf  # σ₁/σ_r over the non-zero part; σ₁/σ_d = ∞
    assert m["frac_expansive"] == 0.5 and m["frac_expansive_d"] == 0.25  # only |3| > 1; |-1| is not expansive
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
    t, ev = spectra_rows(mats, 4, sr_k=64)
    required = ["boundary", "layer", "kind", "n_samples", "numerical_rank", *spectra.METRICS]
    assert list(t.columns[: len(required)]) == required
    assert list(t["boundary"]) == list(mats) and list(t["layer"]) == [0, 0, 1, 1]
    assert (t["sr_k"] == 6).all()  # capped at d
    assert len(ev) == 4 * 6
    lam = np.linalg.eigvals(mats["L1.mlp"])
    np.testing.assert_allclose(np.sort(ev[ev["boundary"] == "L1.mlp"]["abs"]), np.sort(np.abs(lam)))


# ---- cumulative -------------------------------------------------------------------------------
def test_cumulative_matches_direct_products():
    mats = [rng(i).standard_normal((10, 10)) / np.sqrt(10) for i in range(6)]
    for variant in ("update", "full"):
        erank, log_norm = cumulative_erank(mats, variant)
        C = np.eye(10)
        for n, J in enumerate(mats):
            C = (J if variant == "update" else np.eye(10) + J) @ C  # no renormalisation: short chain
            assert erank[n] == pytest.approx(spectra.effective_rank(np.linalg.svd(C, compute_uv=False)), rel=1e-10)
            assert log_norm[n] == pytest.approx(np.log(np.linalg.norm(C)), rel=1e-10)


def test_cumulative_of_diagonals_by_hand_and_long_chains_stay_finite():
    D = np.diag([2.0, 1.0, 0.5])
    erank, _ = cumulative_erank([D, D, D], "update")
    for n in range(3):  # C_n = diag(2, 1, 0.5)^n
        s = np.array([2.0, 1.0, 0.5]) ** (n + 1)
        p = s / s.sum()
        assert erank[n] == pytest.approx(np.exp(-(p * np.log(p)).sum()))
    erank, log_norm = cumulative_erank([10 * np.eye(3) + D] * 400, "update")  # ‖C‖ ~ 12^400
    assert np.isfinite(erank).all() and log_norm[-1] > 700
    table = cumulative_table({"L0.attn": D, "L0.mlp": D})
    assert list(table.columns[:4]) == ["variant", "depth", "boundary", "erank"]
    assert list(table["variant"]) == ["update", "update", "full", "full"]
    assert list(table["depth"]) == [1, 2, 1, 2]


# ---- Schur surgery ----------------------------------------------------------------------------
def nonnormal(d=16, seed=5):
    """A real, strongly non-normal matrix with complex eigenvalues."""
    r = rng(seed)
    return r.standard_normal((d, d)) / np.sqrt(d) + np.triu(r.standard_normal((d, d)), 1)


def schur_interpolate(form, alpha: float):
    """Reference J(α) = Q (Λ + αN) Qᴴ, formed directly from a Schur form."""
    return form.Q @ (np.diag(form.lam) + alpha * form.N) @ form.Q.conj().T


def test_schur_alpha_one_reproduces_and_alpha_zero_is_normal():
    J = nonnormal()
    form = schur_basis.schur_form(J, tol(len(J)))
    assert np.allclose(np.tril(form.N), 0)
    np.testing.assert_allclose(schur_interpolate(form, 1.0), J, atol=1e-12)
    J0 = schur_interpolate(form, 0.0)
    lam0, lam = np.linalg.eigvals(J0), np.linalg.eigvals(J)
    assert spectrum_distance(lam0, lam) < 1e-9
    assert spectra.henrici_departure(J0, lam0) == pytest.approx(0.0, abs=1e-6)
    assert np.allclose(J0 @ J0.conj().T, J0.conj().T @ J0, atol=1e-10)  # normal
    assert spectra.henrici_departure(J, lam) > 0.5
    # the non-normal part shrinks the Henrici departure monotonically
    h = [spectra.henrici_departure(schur_interpolate(form, a), form.lam) for a in (0.25, 0.5, 0.75, 1.0)]
    assert np.all(np.diff(h) > 0)


def test_random_control_has_same_norm_and_shape():
    N = schur.random_strict_upper(9, 3.5, rng(0))
    assert np.allclose(np.tril(N), 0) and np.linalg.norm(N) == pytest.approx(3.5)
    np.testing.assert_array_equal(N, schur.random_strict_upper(9, 3.5, rng(0)))


def test_schur_surgery_table_against_independent_paths():
    mats = {f"L{i}.{k}": nonnormal(8, seed=10 * i + j) / 3 for i in range(2) for j, k in enumerate(("attn", "mlp"))}
    t_both = schur_surgery(mats, alphas=[0, 0.5, 1], seed=7, sr_k=4, boundary_metrics="all")
    assert list(t_both.columns[:7]) == ["alpha", "control", "depth", "erank", "erank_ci_low", "erank_ci_high",
                                        "variant"]  # fmt: skip
    assert len(t_both) == 2 * 3 * 2 * 4 and list(dict.fromkeys(t_both["variant"])) == ["update", "full"]
    # α=1 with the matrix's own N: the plain cumulative operator (both variants) and the per-boundary metrics
    for v in ("update", "full"):
        own = t_both[(t_both["alpha"] == 1) & (t_both["control"] == "none") & (t_both["variant"] == v)]
        cum = cumulative_table(mats, [v])
        np.testing.assert_allclose(own["erank"], cum["erank"], rtol=1e-9)
    # the full variant composes I + J(α): its α=0 product by hand
    forms = [schur_basis.schur_form(J, tol(len(J))) for J in mats.values()]
    C = np.eye(8)
    for f in forms:
        C = (np.eye(8) + f.normal_part) @ C
    full0 = t_both[(t_both["alpha"] == 0) & (t_both["control"] == "none") & (t_both["variant"] == "full")]
    assert full0["erank"].iloc[-1] == pytest.approx(spectra.effective_rank(np.linalg.svd(C, compute_uv=False)))
    t = t_both[t_both["variant"] == "update"].reset_index(drop=True)
    own = t[(t["alpha"] == 1) & (t["control"] == "none")]
    plain, _ = spectra_rows(mats, 1, sr_k=4)
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
        t_both, schur_surgery(mats, alphas=[0, 0.5, 1], seed=7, sr_k=4, boundary_metrics="all")
    )
    own_only = schur_surgery(mats, alphas=[0, 0.5, 1], seed=7, sr_k=4, variants=["update"])  # own N only
    assert list(own_only.columns) == list(t.columns)
    rand = (own_only["control"] == "random") & (own_only["alpha"] > 0)
    assert own_only.loc[rand, "b_self_realign"].isna().all() and own_only.loc[~rand, "b_self_realign"].notna().all()
    pd.testing.assert_series_equal(own_only["erank"], t["erank"])
    assert not schur_surgery(mats, alphas=[1], seed=8, sr_k=4)["erank"].equals(
        schur_surgery(mats, alphas=[1], seed=7, sr_k=4)["erank"]
    )


def test_schur_form_of_a_real_matrix_is_scipy_complex_schur():
    J = nonnormal(6, seed=9)
    T, Q = scipy.linalg.schur(J.astype(complex), output="complex")
    form = schur_basis.schur_form(J, tol(len(J)))
    np.testing.assert_allclose(form.Q @ (np.diag(form.lam) + form.N) @ form.Q.conj().T, J, atol=1e-12)
    np.testing.assert_allclose(np.abs(form.lam), np.sort(np.abs(np.diag(T)))[::-1], atol=1e-12)  # |λ| descending


# ---- numerical rank and mode counts over the non-zero part -------------------------------------------
def rank_r_rotation(d=64, r=24, n_real=4, seed=0, noise=True):
    """Q_r B Q_rᵀ: an exact rank-r block of rotations (r − n_real complex eigenvalues, n_real real ones),
    plus float32-level noise E (entries ε_fp32·max|J|, the rounding a float32 Jacobian carries)."""
    g = rng(seed)
    Q = random_orthogonal(d, seed)[:, :r]
    angles = g.uniform(0.3, 2.5, (r - n_real) // 2)
    B = np.zeros((r, r))
    B[: r - n_real, : r - n_real] = 1.3 * rotation(r - n_real, angles)
    B[r - n_real :, r - n_real :] = np.diag([-0.7, 0.6, 1.2, 1.5][:n_real])  # two expansive, two not
    J = Q @ B @ Q.T
    if noise:
        J = J + g.standard_normal((d, d)) * np.finfo(np.float32).eps * np.abs(J).max()
    return J, (r - n_real) / r


def test_cond_full_is_a_function_of_the_matrix_not_of_its_rounding():
    """σ₁/σ_d of a numerically singular J̄ is rounding: float32 storage of J̄ (and a one-ulp move of each entry)
    moves it by orders of magnitude, so cond_full is ∞ there and unmoved; where J̄ has full numerical rank it is
    σ₁/σ_d itself, equal to cond."""
    d, r = 64, 24
    J, _ = rank_r_rotation(d, r)
    g = rng(7)
    J32 = J.astype(np.float32)
    stored = [J32.astype(np.float64), (J32 + np.spacing(J32) * g.integers(-1, 2, J.shape)).astype(np.float64)]
    raw = [np.linalg.svd(M, compute_uv=False) for M in (J, *stored)]
    raw = [s[0] / s[-1] for s in raw]
    assert max(raw) / min(raw) > 2, "the raw σ₁/σ_d should move with the rounding (else the check below is idle)"
    for M in (J, *stored):
        m = spectral_metrics(M)
        assert m["numerical_rank"] == r and m["cond_full"] == np.inf
    F = J + np.eye(d)  # full numerical rank
    m = spectral_metrics(F)
    s = np.linalg.svd(F, compute_uv=False)
    assert m["numerical_rank"] == d and m["cond_full"] == m["cond"] == pytest.approx(s[0] / s[-1], rel=1e-12)


def test_rank_r_rotation_with_float32_noise_known_answers():
    d, r = 64, 24
    J, true_complex = rank_r_rotation(d, r)
    m = spectral_metrics(J)
    assert m["numerical_rank"] == r and m["n_modes"] == r
    assert m["frac_complex"] == true_complex  # 20 of the 24 non-zero modes
    assert m["frac_complex_d"] == pytest.approx(true_complex * r / d)
    assert m["frac_expansive"] == pytest.approx((r - 4 + 2) / r)  # the 20 rotations (|λ| = 1.3), 1.2 and 1.5
    assert m["cond"] == pytest.approx(1.5 / 0.6, rel=1e-5)  # σ₁ = 1.5, σ_r = 0.6 (a normal block)
    assert m["cond_full"] == np.inf  # σ_d is rounding: numerically zero
    # the old rule (|Im λ| > 1e-9·max|λ| over all d) counts the rounding-split zero eigenvalues as rotations
    lam = np.linalg.eigvals(J)
    naive = np.mean(np.abs(lam.imag) > 1e-9 * np.abs(lam).max())
    assert naive > m["frac_complex_d"] + 0.1
    # the threshold follows the compute precision: float64 noise, float64 τ, same answer
    J64, _ = rank_r_rotation(d, r, noise=False)
    m64 = spectral_metrics(J64, tol=d * np.finfo(np.float64).eps * 10)
    assert (m64["numerical_rank"], m64["frac_complex"]) == (r, true_complex)


def test_rank_tolerance_is_derived_from_dtype_and_d():
    assert spectra.rank_tolerance(576, "float32", None) == pytest.approx(576 * np.finfo(np.float32).eps)
    assert spectra.rank_tolerance(576, "float64", None) == spectra.rank_tolerance(576, "float32", None)  # floor
    assert spectra.rank_tolerance(576, "float32", 1e-3) == 1e-3
    with pytest.raises(ValueError, match="dtype"):
        spectra.rank_tolerance(8, "bfloat16", None)


def test_complex_pair_within_eigenvalue_precision_counts_as_real():
    # a Jordan-like block with a double real eigenvalue: rounding splits it into a pair with |Im λ| ≈ √ε,
    # far above ε·max|λ| but inside its precision κ·τ·σ₁ (κ ~ 1/√ε for a defective eigenvalue)
    J = np.array([[1.0, 1.0], [0.0, 1.0]]) + np.array([[0.0, 0.0], [-1e-7, 0.0]])  # eigenvalues 1 ± i·3e-4
    lam = np.linalg.eigvals(J)
    assert np.abs(lam.imag).max() > 1e-4
    assert spectral_metrics(J)["frac_complex"] == 0.0
    R = 0.9 * rotation(2, [0.05])  # a genuine slow rotation: |Im λ| = 0.045 ≫ precision
    assert spectral_metrics(R)["frac_complex"] == 1.0


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-gemma3"])
def tiny_llama_jacobians(request):
    """J̄ of every boundary of a tiny GQA model (config/test.yaml) at 40 random states, in float32 and float64."""
    import torch
    from conftest import TEST_CONFIG, tiny_model
    from schema_defaults import jacobian_kw

    from layergeom.adapters import get_adapter
    from layergeom.spectral.jacobians import mean_jacobian

    m = TEST_CONFIG["models"][request.param]
    hf = m["hf_config"]
    out = {}
    for name, dt in (("float32", torch.float32), ("float64", torch.float64)):
        ad = get_adapter(tiny_model(m["family"], seed=3).to(dt))  # the same weights, computed in each dtype
        x = torch.randn(40, ad.d_model, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        out[name] = {b.name: mean_jacobian(ad, b, x, **jacobian_kw(dtype=dt))[0] for b in ad.boundaries}
    return hf, out


def test_gqa_attention_rank_is_n_kv_times_d_head(tiny_llama_jacobians):
    hf, jacs = tiny_llama_jacobians
    d = hf["hidden_size"]
    expected = hf["num_key_value_heads"] * hf.get("head_dim", d // hf["num_attention_heads"])  # n_kv · d_head = 2 · 8
    for dtype, mats in jacs.items():
        for name, J in mats.items():
            m = spectral_metrics(J, tol=tol(d, dtype))
            if name.endswith("attn"):
                assert m["numerical_rank"] == expected < d, (dtype, name)
                assert m["n_modes"] <= expected
                assert np.isfinite(m["cond"]) and m["cond"] < 1e4 < m["cond_full"]
            else:
                assert m["numerical_rank"] == d, (dtype, name)


def test_float32_and_float64_compute_agree_on_the_mode_metrics(tiny_llama_jacobians):
    hf, jacs = tiny_llama_jacobians
    d = hf["hidden_size"]
    for name in jacs["float32"]:
        m32, m64 = (spectral_metrics(jacs[t][name], tol=tol(d, t)) for t in jacs)
        for key in ("numerical_rank", "n_modes", "frac_complex", "frac_expansive"):
            assert m32[key] == m64[key], (name, key)
        # σ_r moves by at most ~τσ₁ under float32 rounding: cond = σ₁/σ_r by at most τ·cond relative
        tau = tol(d)
        assert m32["cond"] == pytest.approx(m64["cond"], rel=tau * m64["cond"] + 1e-12), name


# ---- intervals ----------------------------------------------------------------------------------------
def sampled_groups(M: np.ndarray, G: int, n: int, sigma: float, g: np.random.Generator):
    """Group means of n samples J_s = M + σ·Z_s each: J̄_g = M + σ/√n·Z_g (float32, like the job's files)."""
    return (M[None] + sigma / np.sqrt(n) * g.standard_normal((G, *M.shape))).astype(np.float32)


def interval_run(
    mats, G, n, sigma, g, sr_k=3, schur_blocks=4, rows_of=None, alphas=(0, 0.5), variants=cumulative.VARIANTS
):
    """One synthetic data set: group means per boundary -> spectra rows (of the boundaries `rows_of`, default
    all), cumulative and Schur tables (at `alphas`, in `variants`) with CIs."""
    counts = np.full(G, n)
    groups = {b: sampled_groups(M, G, n, sigma, g) for b, M in mats.items()}
    means = {b: gr.astype(np.float64).mean(0) for b, gr in groups.items()}
    reps = intervals.replicates(counts)
    devs = {b: intervals.deviations(means[b], groups[b], counts, reps) for b in mats}
    rows = {b: spectra_row_with_intervals(b, means[b], G * n, devs[b], reps.weights, sr_k) for b in rows_of or mats}
    cum = cumulative_table(means, list(variants), deviations=devs, weights=reps.weights)
    breps = intervals.replicates(counts, schur_blocks)
    bdevs = {b: intervals.deviations(means[b], groups[b], counts, breps) for b in mats}
    # no random orders: the order spread is not what these tests check (tests/test_schur_order.py does)
    sch = schur_surgery(means, alphas=list(alphas), seed=1, sr_k=sr_k, boundary_metrics="none", orders=0,
                        variants=list(variants), deviations=bdevs, weights=breps.weights)  # fmt: skip
    return rows, cum, sch


def truth_tables(mats, sr_k=3):
    rows = {b: spectral_metrics(M, sr_k=sr_k) for b, M in mats.items()}
    cum = cumulative_table(mats)
    sch = schur_surgery(mats, alphas=[0, 0.5], seed=1, sr_k=sr_k, boundary_metrics="none", orders=0)
    return rows, cum, sch


def coverage_mats(pair_im: float = 0.4, real_top: float = 0.9):
    """Three non-normal 6×6 boundaries with two complex pairs (0.5 ± i·`pair_im`, 1.3 ± 0.3i) and two real
    eigenvalues (0.2, `real_top`). By default separated by more than the sampling noise moves them: the
    mode counts are those of the truth and every smooth metric is differentiable there. With a pair close
    to the real axis and a real eigenvalue close to the unit circle, noise moves modes across the axis and
    the circle, and the mode fractions' intervals get a width. (With real eigenvalues closer than the
    noise, noise pushes them into complex pairs: the complex fraction of J̄ is then biased upwards, which no
    interval around it corrects; ``intervals`` notes it.)"""
    out = {}
    for i, b in enumerate(["L0.attn", "L0.mlp", "L1.attn"]):
        Q = random_orthogonal(6, 40 + i)
        T = np.zeros((6, 6))
        T[:2, :2] = [[0.5, pair_im], [-pair_im, 0.5]]
        T[2:4, 2:4] = [[1.3, 0.3], [-0.3, 1.3]]
        T[4, 4], T[5, 5] = 0.2, real_top
        T += np.triu(rng(50 + i).standard_normal((6, 6)), 2) * 0.3  # non-normal part above the blocks
        out[b] = Q @ T @ Q.T
    return out


#: trials of the coverage tests, and the coverage docs/methods.md promises for a 95 % interval
COVERAGE_TRIALS, COVERAGE_PROMISED = 500, 0.92


def test_intervals_cover_the_true_metrics_at_the_promised_rate():
    # 500 synthetic data sets, G = 16 groups: a 95 % interval covers the metric of the true mean Jacobian in
    # ≥ 92 % of them (docs/methods.md). With 500 trials the observed rate has sd ≈ 1 % at 94-95 %, so 92 % is
    # ≈ 2 sd below an interval with the jackknife's ≈ 1 % undercoverage, and ≈ 3 sd above a bad one (88 %;
    # ignoring the group variance, a wrong scale or no t-quantile with 4 Schur blocks: ≲ 60 %).
    mats = coverage_mats()
    truth = truth_tables(mats)
    g = rng(123)
    metrics = ["cond", "self_realign", "henrici", "erank", "part_ratio", "asymmetry", "frac_complex",
               "frac_expansive"]  # fmt: skip
    hits = {m: 0 for m in metrics} | {"cumulative": 0, "schur": 0}
    for _ in range(COVERAGE_TRIALS):
        # only what is checked below: L0.mlp's row, the update variant, the Schur chains at α = 0.5
        rows, cum, sch = interval_run(mats, G=16, n=20, sigma=0.15, g=g, rows_of=["L0.mlp"], alphas=[0.5],
                                      variants=["update"])  # fmt: skip
        for m in metrics:  # one boundary per trial (the middle one): independent trials
            r, t = rows["L0.mlp"], truth[0]["L0.mlp"][m]
            hits[m] += r[f"{m}_ci_low"] <= t <= r[f"{m}_ci_high"]
        last = cum[(cum["variant"] == "update")].iloc[-1]
        t = truth[1][truth[1]["variant"] == "update"]["erank"].iloc[-1]
        hits["cumulative"] += last["erank_ci_low"] <= t <= last["erank_ci_high"]
        sel = (sch["variant"] == "update") & (sch["alpha"] == 0.5) & (sch["control"] == "none")
        tsel = (truth[2]["variant"] == "update") & (truth[2]["alpha"] == 0.5) & (truth[2]["control"] == "none")
        row, t = sch[sel].iloc[-1], truth[2][tsel]["erank"].iloc[-1]
        hits["schur"] += row["erank_ci_low"] <= t <= row["erank_ci_high"]
    assert min(hits.values()) >= COVERAGE_PROMISED * COVERAGE_TRIALS, hits


def test_mode_fraction_intervals_near_the_axis_and_the_circle_have_width_and_cover():
    # a pair 0.5 ± 0.02i and a real eigenvalue 0.985, against noise that moves eigenvalues by ~1e-2: the
    # sample's pair lands on the real axis in some data sets, its real eigenvalue outside the unit circle in
    # others, and the jackknife replicates move them back and forth, so the mode fractions' intervals are not
    # all of zero width (else coverage would be vacuous); they still cover at the promised rate
    M = coverage_mats(pair_im=0.02, real_top=0.985)["L0.mlp"]
    truth = spectral_metrics(M, sr_k=3)
    g = rng(321)
    counts = np.full(16, 20)
    reps = intervals.replicates(counts)
    metrics = ["frac_complex", "frac_expansive", "cond", "henrici"]
    hits, wide = dict.fromkeys(metrics, 0), dict.fromkeys(metrics, 0)
    for _ in range(COVERAGE_TRIALS):
        groups = sampled_groups(M, 16, 20, 0.15, g)
        mean = groups.astype(np.float64).mean(0)
        D = intervals.deviations(mean, groups, counts, reps)
        row = spectra_row_with_intervals("L0.mlp", mean, 320, D, reps.weights, 3)
        for m in metrics:
            hits[m] += row[f"{m}_ci_low"] <= truth[m] <= row[f"{m}_ci_high"]
            wide[m] += row[f"{m}_ci_high"] > row[f"{m}_ci_low"]
    assert min(wide["frac_complex"], wide["frac_expansive"]) >= 0.05 * COVERAGE_TRIALS, wide
    assert min(hits.values()) >= COVERAGE_PROMISED * COVERAGE_TRIALS, hits


def test_intervals_shrink_with_the_number_of_samples():
    # 4x the samples per group: widths halve (1/√N) up to the jackknife's own noise
    mats = coverage_mats()
    widths = {}
    for n in (10, 40):
        g = rng(7)
        w = []
        for _ in range(20):
            rows, cum, sch = interval_run(mats, G=16, n=n, sigma=0.3, g=g, rows_of=["L0.attn"], alphas=[0],
                                          variants=["update"])  # fmt: skip
            r = rows["L0.attn"]
            last = cum.iloc[len(mats) - 1]
            s = sch[(sch["alpha"] == 0) & (sch["variant"] == "update")].iloc[-1]
            w.append(
                [r[f"{m}_ci_high"] - r[f"{m}_ci_low"] for m in ("cond", "henrici", "erank", "self_realign")]
                + [last["erank_ci_high"] - last["erank_ci_low"], s["erank_ci_high"] - s["erank_ci_low"]]
            )
        widths[n] = np.mean(w, axis=0)
    ratio = widths[10] / widths[40]
    assert np.all((ratio > 1.6) & (ratio < 2.5)), ratio


def test_linear_replicates_match_exact_replicates():
    # first-order replicates (intervals.method linear) against recomputing each replicate (exact), on a
    # full-rank non-normal and on a GQA-like rank-deficient J̄ (deviations inside its range, like real groups)
    g = rng(5)
    d, r = 40, 16
    A = nonnormal(d, seed=3) / 4
    P = random_orthogonal(d, 9)[:, :r]
    L = P @ (g.standard_normal((r, d)) / np.sqrt(d))
    for J, D in ((A, 2e-3 * g.standard_normal((6, d, d)) / np.sqrt(d)),
                 (L, np.stack([P @ (2e-3 * g.standard_normal((r, d)) / np.sqrt(d)) for _ in range(6)]))):  # fmt: skip
        tau = tol(d)
        lin = linear.metric_replicates(J, D, tol=tau, sr_k=6, method="linear")
        ex = linear.metric_replicates(J, D, tol=tau, sr_k=6, method="exact")
        base = spectral_metrics(J, sr_k=6, tol=tau)
        for m in ("cond", "self_realign", "henrici", "erank", "part_ratio", "asymmetry"):
            change = np.abs(ex[m] - base[m]).max()
            assert np.abs(lin[m] - ex[m]).max() <= 0.1 * change + 1e-12, m  # second order: ≤ 10 % of the change
        for m in ("frac_complex", "frac_expansive"):
            np.testing.assert_array_equal(lin[m], ex[m])


def test_cumulative_tangents_match_exact_replicate_products():
    g = rng(6)
    d = 12
    mats = [g.standard_normal((d, d)) / np.sqrt(d) for _ in range(6)]
    devs = [1e-3 * g.standard_normal((4, d, d)) for _ in mats]
    for v in ("update", "full"):
        chain = cumulative.ProductChain(cumulative.tangent_floor(d))
        lin = np.array([chain.step(cumulative.step_operator(J, v), D)[2] for J, D in zip(mats, devs)]).T  # (K, n)
        ex = product_replicates_exact(mats, devs, v)
        base = product_eranks(mats, v)
        np.testing.assert_allclose(cumulative_erank(mats, v)[0], base, rtol=1e-12)  # the workflow's products
        assert np.abs(lin - ex).max() <= 0.05 * np.abs(ex - base).max()


def test_schur_tangent_matches_finite_differences_and_freezes_the_zero_block():
    d = 10
    J = nonnormal(d, seed=4) / 3
    D = rng(2).standard_normal((1, d, d))
    form = schur_basis.schur_form(J, tol(len(J)))
    tan = schur_basis.schur_tangent(form, J, D)
    h = 1e-6
    fd = (
        schur_basis.schur_form(J + h * D[0], tol(d)).normal_part
        - schur_basis.schur_form(J - h * D[0], tol(d)).normal_part
    ) / (2 * h)
    np.testing.assert_allclose(tan.dJ0[0], fd, atol=1e-4 * np.abs(fd).max())

    # the random control R' = Q_c N' Q_cᴴ in its canonical basis (phases and zero block fixed by J̄ and the seed):
    # a function of J̄, so its finite difference is the tangent's, with no gauge to align by hand — also where
    # J̄ has a numerically zero block (rank r < d), whose basis rotates with the non-zero modes' subspace
    g = rng(9)
    low = g.standard_normal((d, 4)) @ g.standard_normal((4, d)) / d  # rank 4, non-normal
    for M0, Dk in ((J, D[0]), (low, g.standard_normal((d, d)) / d)):
        b = schur.SurgeryBoundary(J=M0, form=schur_basis.schur_form(M0, tol(d)), seed=5, index=2)

        def control(M, n=b.form.n_nonzero):  # the tangent holds the modes fixed: so does the difference
            return schur.SurgeryBoundary(
                J=M, form=schur_basis.schur_form(M, tol(len(M)), n_modes=n), seed=5, index=2
            ).R_rand

        t = schur_basis.schur_tangent(b.form, M0, Dk[None], keep_rotation=True)
        fd = (control(M0 + h * Dk) - control(M0 - h * Dk)) / (2 * h)
        lin = schur.control_tangent(b, t)[0]
        np.testing.assert_allclose(lin, fd, atol=1e-4 * np.abs(fd).max())
    assert b.form.n_nonzero == 4  # the second case has a zero block
    # and it is a function of J̄: LAPACK's phases and its zero block's basis do not reach it
    ph = np.exp(1j * g.uniform(0, 2 * np.pi, d))
    U = scipy.linalg.qr(g.standard_normal((d - 4, d - 4)) + 1j * g.standard_normal((d - 4, d - 4)))[0]
    Q2 = b.form.Q * ph[None]
    Q2[:, 4:] = Q2[:, 4:] @ U
    T2 = Q2.conj().T @ low @ Q2
    other = schur_basis.SchurForm(Q=Q2, lam=np.diag(T2).copy(), N=np.triu(T2, 1), n_nonzero=4)
    again = schur.SurgeryBoundary(J=low, form=other, seed=5, index=2).R_rand
    np.testing.assert_allclose(again, b.R_rand, atol=1e-12 * np.abs(b.R_rand).max())
    assert np.abs(schur.SurgeryBoundary(J=low, form=other, seed=6, index=2).R_rand - b.R_rand).max() > 1e-3
    # a rank-deficient J̄: the non-zero modes lead the Schur form, whatever the order it came in
    g = rng(8)
    d, r = 12, 4
    T = np.triu(g.standard_normal((d, d)) + 1j * g.standard_normal((d, d)), 1)
    T[: d - r, : d - r] = 0  # a semisimple zero eigenvalue of multiplicity d − r: rank r
    T[np.arange(d), np.arange(d)] = np.r_[np.zeros(d - r) + 1e-12, 1 + np.arange(r)]  # zeros first
    Q = scipy.linalg.qr(g.standard_normal((d, d)) + 1j * g.standard_normal((d, d)))[0]
    J = Q @ T @ Q.conj().T
    lam = np.diag(T)
    n = int(spectra.nonzero_modes(lam, tol(d)).sum())
    T2, Q2 = schur_basis.reorder_schur(T, Q, schur_basis.canonical_order(lam, n, real=False))
    assert n == r and np.all(np.abs(np.diag(T2)[:r]) > 0.5) and np.all(np.abs(np.diag(T2)[r:]) < 1e-9)
    np.testing.assert_allclose(Q2 @ T2 @ Q2.conj().T, J, atol=1e-10)
    assert np.allclose(np.tril(T2, -1), 0)
    # then J₀ = QΛQᴴ maps into the invariant subspace of the non-zero modes: for a semisimple zero, range(J)
    U = np.linalg.svd(J)[0][:, :r]
    J0 = (Q2 * np.diag(T2)) @ Q2.conj().T
    assert np.linalg.norm(J0 - U @ (U.conj().T @ J0)) < 1e-8 * np.linalg.norm(J0)
    J0_before = (Q * np.diag(T)) @ Q.conj().T  # zeros first: J₀ maps outside range(J)
    assert np.linalg.norm(J0_before - U @ (U.conj().T @ J0_before)) > 0.1 * np.linalg.norm(J0_before)


def test_replicates_and_deviations():
    counts = np.array([3, 3, 4, 4, 5])
    reps = intervals.replicates(counts)
    assert reps.K == 5 and reps.weights.sum() == pytest.approx(1)
    blocks = intervals.replicates(counts, 2)
    assert [m.tolist() for m in blocks.members] == [[0, 1, 2], [3, 4]]
    groups = rng(0).standard_normal((5, 3, 3)).astype(np.float32)
    mean = np.tensordot(counts / counts.sum(), groups.astype(np.float64), axes=1)
    D = intervals.deviations(mean, groups, counts, reps)
    for k in range(5):  # J̄_(−k) by hand
        keep = np.arange(5) != k
        loo = np.tensordot(counts[keep] / counts[keep].sum(), groups[keep].astype(np.float64), axes=1)
        np.testing.assert_allclose(mean + D[k], loo, atol=1e-6)
    # the variance of a linear statistic is the sandwich of the weighted mean
    theta = rng(1).standard_normal(5)
    w = counts / counts.sum()
    lin = float(w @ theta)
    loo = [(lin - w[k] * theta[k]) / (1 - w[k]) for k in range(5)]
    lo, hi = intervals.jackknife_interval(lin, loo, w, 0.95)
    sandwich = 5 / 4 * np.sum(w**2 * (theta - lin) ** 2)
    assert (hi - lo) / 2 == pytest.approx(scipy.stats.t.ppf(0.975, 4) * np.sqrt(sandwich))
    with pytest.raises(ValueError, match="at least 2"):
        intervals.replicates([5])


def test_t_quantile_is_scipy_stats_t_ppf_to_the_bit():
    # the intervals' quantile comes from scipy.special (no scipy.stats import in a job): the same floats
    for level in (0.5, 0.8, 0.9, 0.95, 0.99, 0.999):
        for df in (*range(1, 70), 127, 511, 4095):
            assert intervals.t_quantile(level, df) == float(scipy.stats.t.ppf((1 + level) / 2, df)), (level, df)


# ---- files: group means, tables, convergence ---------------------------------------------------------
#: the table writers' settings at their defaults, as scripts/spectra_*.py pass them (sr_k set by the tests)
SPECTRA_KW = table_kw("dtype", "rank_tol", "ci_level", "ci_method", "ci_blocks")
CUMULATIVE_KW = table_kw("ci_level", "ci_blocks")
SCHUR_KW = table_kw("alphas", "dtype", "rank_tol", "ci_level", "sr_k") | {
    "seed": SEED, "boundary_metrics": SPECTRA["schur_boundary_metrics"], "orders": SPECTRA["schur_orders"],
    "order_alphas": SPECTRA["schur_order_alphas"], "ci_blocks": SPECTRA["schur_ci_blocks"],
    "ci_controls": SPECTRA["schur_ci_controls"]}  # fmt: skip
CONVERGENCE_KW = table_kw("sr_k", "dtype", "rank_tol", "ci_level") | {
    "sizes": SPECTRA["convergence_sizes"], "n_edge": SPECTRA["convergence_boundaries"]}  # fmt: skip


def write_boundary_files(folder, mats, G=8, n=5, sigma=0.2, seed=0, counts=None):
    import json

    from layergeom.spectral.jobs.common import BoundaryFiles

    g = rng(seed)
    counts = np.full(G, n) if counts is None else counts
    paths = {k: [] for k in ("npy", "groups", "meta")}
    for b, M in mats.items():
        groups = sampled_groups(M, len(counts), n, sigma, g)
        mean = np.tensordot(counts / counts.sum(), groups.astype(np.float64), axes=1)
        np.save(folder / f"{b}.npy", mean)
        np.save(folder / f"{b}.groups.npy", groups)
        (folder / f"{b}.json").write_text(json.dumps({"boundary": b, "n_samples": int(counts.sum()),
                                                       "group_counts": list(map(int, counts))}))  # fmt: skip
        for k, ext in (("npy", "npy"), ("groups", "groups.npy"), ("meta", "json")):
            paths[k].append(folder / f"{b}.{ext}")
    return BoundaryFiles(list(mats), paths["npy"], paths["groups"], paths["meta"])


def test_table_writers_from_files(tmp_path):
    from layergeom.io import read_tsv
    from layergeom.spectral.jobs.convergence import write_convergence
    from layergeom.spectral.jobs.cumulative import write_cumulative
    from layergeom.spectral.jobs.schur import write_schur
    from layergeom.spectral.jobs.table import write_spectra

    mats = {f"L{i}.{k}": nonnormal(6, seed=10 * i + j) / 3 for i in range(3) for j, k in enumerate(("attn", "mlp"))}
    files = write_boundary_files(tmp_path, mats)
    t = write_spectra(files, tmp_path / "spectra.tsv", tmp_path / "eig.tsv", **SPECTRA_KW, sr_k=2)
    back = read_tsv(tmp_path / "spectra.tsv")
    cols = ["boundary", "layer", "kind", "n_samples", "numerical_rank", *spectra.METRICS]
    assert list(back.columns[: len(cols)]) == cols and (back["n_samples"] == 40).all()
    for m in ("cond", "self_realign", "henrici", "frac_expansive", "frac_complex", "erank"):
        assert (back[f"{m}_ci_low"] <= back[m] + 1e-12).all() and (back[m] <= back[f"{m}_ci_high"] + 1e-12).all()
    assert set(read_tsv(tmp_path / "eig.tsv").columns) >= {"boundary", "real", "imag", "nonzero", "complex"}
    cum = write_cumulative(files, tmp_path / "cumulative.tsv", **CUMULATIVE_KW)
    assert {"erank_ci_low", "erank_ci_high"} <= set(cum.columns) and cum["erank_ci_low"].notna().all()
    sch = write_schur(files, tmp_path / "schur.tsv", tmp_path / "cumulative.tsv",
                      **SCHUR_KW | {"alphas": [0, 0.5, 1], "sr_k": 2})  # fmt: skip
    assert set(sch["variant"]) == {"update", "full"}
    # α = 1 with the own N is J̄ itself: its rows are cumulative.tsv's, to the bit (the same products)
    one = sch[(sch["alpha"] == 1) & (sch["control"] == "none")].sort_values(["variant", "depth"])
    ref = read_tsv(tmp_path / "cumulative.tsv", exact=True).sort_values(["variant", "depth"])
    for col in ("erank", "log_norm", "erank_ci_low", "erank_ci_high"):
        np.testing.assert_array_equal(one[col].to_numpy(), ref[col].to_numpy(), err_msg=col)
    np.testing.assert_array_equal(one["erank_order_min"].to_numpy(), ref["erank"].to_numpy())
    own = sch[sch["control"] == "none"]
    assert own["erank_ci_low"].notna().all()
    assert sch[(sch["control"] == "random") & (sch["alpha"] > 0)]["erank_ci_low"].isna().all()  # default: own N
    both = write_schur(files, tmp_path / "schur2.tsv", tmp_path / "cumulative.tsv",
                       **SCHUR_KW | {"alphas": [0.5], "sr_k": 2, "ci_controls": ["none", "random"]})  # fmt: skip
    assert both["erank_ci_low"].notna().all() and (both["erank_ci_low"] <= both["erank"]).all()
    conv = write_convergence(files, tmp_path / "convergence.tsv", **CONVERGENCE_KW | {"n_edge": 2, "sr_k": 2})
    assert list(conv.columns[:5]) == ["metric", "n_samples", "value", "ci_low", "ci_high"]
    assert (conv.groupby("metric")["n_samples"].nunique() >= 4).all()  # ≥ 4 nested sizes per metric
    full = conv[conv["n_samples"] == conv["n_samples"].max()].set_index("metric")["value"]
    assert full["erank_middle"] == pytest.approx(t["erank"].iloc[len(t) // 2], rel=1e-6)
    assert full["cumulative_erank_full"] == pytest.approx(cum[cum["variant"] == "full"]["erank"].iloc[-1], rel=1e-6)
    assert t["henrici"].iloc[:2].mean() == pytest.approx(full["henrici_early"], rel=1e-6)
    # one grouping per checkpoint, or a clear error
    bad = write_boundary_files(tmp_path / "bad" if (tmp_path / "bad").mkdir() is None else None, mats,
                               counts=np.array([4, 4, 4, 4, 4, 4, 4, 12]))  # fmt: skip
    bad._meta[bad.names[-1]].write_text('{"n_samples": 40, "group_counts": [5, 5, 5, 5, 5, 5, 5, 5]}')
    from layergeom.runtime import LayergeomError

    with pytest.raises(LayergeomError, match="group_counts"):
        write_cumulative(bad, tmp_path / "x.tsv", **CUMULATIVE_KW)


def test_convergence_reads_each_boundarys_group_means_once_and_keeps_the_sizes_apart(tmp_path):
    from layergeom.io import read_tsv
    from layergeom.spectral.jobs.common import BoundaryFiles
    from layergeom.spectral.jobs.convergence import write_convergence

    mats = {f"L{i}.{k}": nonnormal(6, seed=10 * i + j) / 3 for i in range(3) for j, k in enumerate(("attn", "mlp"))}
    files = write_boundary_files(tmp_path, mats)
    reads = []

    class Counting(BoundaryFiles):
        def groups(self, name):
            reads.append(name)
            return super().groups(name)

    counting = Counting(files.names, *([files._npy[n] for n in files.names], [files._groups[n] for n in files.names],
                                       [files._meta[n] for n in files.names]))  # fmt: skip
    kw = CONVERGENCE_KW | {"n_edge": 2, "sr_k": 2, "sizes": [2, 4, 8]}
    conv = write_convergence(counting, tmp_path / "all.tsv", **kw)
    assert sorted(reads) == sorted(files.names)  # once per boundary for all three subset sizes
    assert sorted(set(conv["n_groups"])) == [2, 4, 8]
    whole = read_tsv(tmp_path / "all.tsv")
    for S in (2, 8):  # each size's rows as a job of that size alone: the chains of the sizes stay apart
        one = write_convergence(files, tmp_path / f"s{S}.tsv", **kw | {"sizes": [S]})
        assert len(one) and read_tsv(tmp_path / f"s{S}.tsv").equals(
            whole[whole["n_groups"] == S].reset_index(drop=True)
        )


def test_boundary_jacobians_write_group_means_that_average_to_the_mean(tmp_path):
    import json

    import torch
    from conftest import tiny_model

    from layergeom.adapters import get_adapter
    from layergeom.spectral.jobs.jacobians import boundary_jacobians
    from layergeom.store import ActivationStore, dump_activations

    ad = get_adapter(tiny_model("llama"))
    windows = torch.randint(0, 512, (7, 9), generator=torch.Generator().manual_seed(6)).numpy()
    dump_activations(ad, windows, tmp_path / "acts", batch_size=4)
    names = [b.name for b in ad.boundaries]
    files = {"npy": "npy", "tsv": "tsv", "groups": "groups.npy", "json": "json"}
    outs = {n: {k: tmp_path / f"{n}.{e}" for k, e in files.items()} for n in names}
    settings = {"n_samples": 8, "n_groups": 3, "samples": "last"}
    boundary_jacobians(ad, ActivationStore(tmp_path / "acts"), names, outs, settings, seed=SEED)
    for n in names:
        J, groups = np.load(outs[n]["npy"]), np.load(outs[n]["groups"])
        meta = json.loads(outs[n]["json"].read_text())
        assert groups.shape == (3, ad.d_model, ad.d_model) and groups.dtype == np.float32
        assert meta["n_samples"] == 7 and meta["group_counts"] == [3, 2, 2]
        assert meta["group_windows"] == [[0, 2], [3, 4], [5, 6]]
        w = np.array(meta["group_counts"]) / 7
        np.testing.assert_allclose(np.tensordot(w, groups.astype(np.float64), axes=1), J, atol=1e-6 * np.abs(J).max())


def test_one_sample_group_gives_nan_intervals_not_a_crash(tmp_path):
    from layergeom.spectral.jobs.convergence import write_convergence
    from layergeom.spectral.jobs.cumulative import write_cumulative
    from layergeom.spectral.jobs.schur import write_schur
    from layergeom.spectral.jobs.table import write_spectra

    mats = {f"L{i}.attn": nonnormal(5, seed=i) / 3 for i in range(3)}
    files = write_boundary_files(tmp_path, mats, G=1)
    t = write_spectra(files, tmp_path / "s.tsv", **SPECTRA_KW, sr_k=2)
    assert t["erank_ci_low"].isna().all() and t["erank"].notna().all()
    c = write_cumulative(files, tmp_path / "c.tsv", **CUMULATIVE_KW)
    assert list(c.columns[:6]) == ["variant", "depth", "boundary", "erank", "erank_ci_low", "erank_ci_high"]
    assert c["erank_ci_low"].isna().all()
    u = write_schur(files, tmp_path / "u.tsv", tmp_path / "c.tsv", **SCHUR_KW | {"alphas": [0, 1], "sr_k": 2})
    assert u["erank_ci_low"].isna().all()
    assert len(write_convergence(files, tmp_path / "v.tsv", **CONVERGENCE_KW | {"sr_k": 2})) == 0


def test_repeated_alphas_are_refused_by_the_schema_and_stepped_once_by_the_code():
    import copy

    from conftest import TEST_CONFIG

    from layergeom.config import LayergeomError, validate

    for alphas in ([0, 0.5, 0.5, 1], [0, 1, 1.0]):
        cfg = copy.deepcopy(TEST_CONFIG)
        cfg.setdefault("spectra", {})["alphas"] = alphas
        with pytest.raises(LayergeomError, match="alphas"):
            validate(cfg)
    mats = {f"L{i}.{k}": nonnormal(8, seed=10 * i + j) / 3 for i in range(3) for j, k in enumerate(("attn", "mlp"))}
    once = schur_surgery(mats, alphas=[0, 0.5, 1], seed=7, sr_k=4)
    twice = schur_surgery(mats, alphas=[0, 0.5, 0.5, 1, 1.0], seed=7, sr_k=4)
    pd.testing.assert_frame_equal(once, twice)


def test_an_unbounded_condition_number_interval_is_inf_and_written(tmp_path):
    """σ_r at the rank threshold: replicates that move σ_r by about σ_r give cond an upper end of inf (the data do
    not bound σ₁/σ_r), not an overflow; the table writer accepts it, and still refuses inf elsewhere."""
    from layergeom import io

    K = 16
    w = np.full(K, 1 / K)
    reps = np.exp(np.where(np.arange(K) % 2, 400.0, -400.0))  # log-replicates ±400 around log 1
    lo, hi = intervals.metric_interval("cond", 1.0, reps, w, 0.95)
    assert hi == np.inf and lo == 1.0  # clipped to cond's range [1, inf]
    lo_e, hi_e = intervals.jackknife_interval(1.0, np.exp(np.linspace(-1, 1, K)), w, 0.95, "log")
    assert 0 < lo_e < 1 < hi_e < np.inf
    row = {"boundary": "L0.mlp", "layer": 0, "kind": "mlp", "cond": 4e4, "cond_ci_low": lo, "cond_ci_high": hi}
    io.write_tsv(pd.DataFrame([row]), tmp_path / "spectra.tsv", stage="spectra")
    with pytest.raises(Exception, match="erank_ci_high"):
        io.write_tsv(pd.DataFrame([{**row, "erank_ci_high": np.inf}]), tmp_path / "bad.tsv", stage="spectra")
