"""Mode counts of spectra.tsv against exact counts: the complex-mode rule, the non-zero mask, SR_k at low rank.

The exact counts come from constructions whose eigenvalues are known (block-diagonal forms in a random
orthogonal basis, the r×r compression of a rank-r product) and from LAPACK in float64 on the very matrix
counted (its real eigenvalues come out with Im = 0 exactly); the float32 cases round the same matrix to
float32, the precision the rule assumes a Jacobian carries.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.stats
from schema_defaults import jacobian_kw, spectral_metrics, tol

from layergeom.linalg import svdvals
from layergeom.spectral import linear, spectra

EPS32 = float(np.finfo(np.float32).eps)


def rng(seed=0):
    return np.random.default_rng(seed)


def to_float32(J: np.ndarray) -> np.ndarray:
    """J rounded to float32 and back: the rounding a float32 Jacobian carries."""
    return J.astype(np.float32).astype(np.float64)


def n_complex(m: dict) -> int:
    """Number of complex non-zero modes from a spectra row (frac_complex · n_modes)."""
    return int(round(m["frac_complex"] * m["n_modes"]))


# ---- the complex-mode rule on exact constructions ----------------------------------------------------
def near_axis_matrix(d=64, seed=0):
    """Q T Qᵀ with T block diagonal: known pairs just above rounding, near-double reals that rounding splits.

    Blocks (σ₁ = ‖T‖₂, ε = ε_fp32, c = MODE_C):
    - 6 normal rotation blocks [[a, b], [−b, a]], b = 3·c·ε·σ₁ (κ = 1): complex, |Im λ| = 3× the threshold;
    - 6 non-normal blocks [[a, 1], [−δ, a]], δ = 3·c·ε·σ₁/2: complex, |Im λ| = √δ, κ = (1 + δ)/(2√δ), so
      |Im λ| / (κ ε σ₁) = 2δ/((1+δ) ε σ₁) ≈ 3c: a weak coupling, three times what rounding can supply;
    - 6 non-normal blocks [[a, 1], [+δ', a]], δ' = ε·σ₁/1000: two real eigenvalues a ± √δ', which float32
      rounding (couplings up to ≈ εσ₁) turns into a pair with |Im λ| ≈ √ε when it makes δ' negative;
    - the rest distinct real eigenvalues.
    Returns J and the exact number of complex eigenvalues (24).
    """
    T = np.zeros((d, d))
    centres = np.linspace(-0.8, 0.8, 18)
    for i, a in enumerate(centres):
        T[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[a, 1.0 if i >= 6 else 0.0], [0.0, a]]
    T[36:, 36:] = np.diag(np.linspace(-0.9, 0.9, d - 36) + 0.013)  # distinct, away from the block centres
    s1 = np.linalg.norm(T, 2)  # the couplings below change σ₁ by < 1e-6
    c = spectra.MODE_C
    for i in range(18):
        j = 2 * i
        if i < 6:
            T[j, j + 1], T[j + 1, j] = 3 * c * EPS32 * s1, -3 * c * EPS32 * s1
        else:
            T[j + 1, j] = -3 * c * EPS32 * s1 / 2 if i < 12 else EPS32 * s1 / 1000
    Q = scipy.stats.ortho_group.rvs(d, random_state=seed)
    return Q @ T @ Q.T, 24


def test_pairs_just_above_rounding_are_complex_and_rounding_splits_are_not():
    d = 64
    J, n_true = near_axis_matrix(d)
    lam = np.linalg.eigvals(J)
    assert np.sum(lam.imag != 0) == n_true  # LAPACK in float64: the exact count (Im = 0 for the real ones)
    for M in (J, to_float32(J)):
        m = spectral_metrics(M, tol=tol(d))
        assert m["n_modes"] == m["numerical_rank"] == d
        assert n_complex(m) == n_true
    # rounding does split near-double reals: LAPACK alone (Im ≠ 0) over-counts the float32 matrix ...
    m32 = spectral_metrics(to_float32(J))
    assert m32["frac_complex_max"] * d > n_true
    # ... and the former rule |Im λ| > κ·(d·ε)·σ₁ misses the weak pairs: rounding does not reach d·ε
    dec = spectra.decompose(to_float32(J))
    old = np.abs(dec.eigvals.imag) > np.maximum(dec.eig_condition, 1) * d * EPS32 * dec.s[0]
    assert old.sum() < n_true


def test_ginibre_real_eigenvalues_match_lapack_and_edelman_kostlan_shub():
    # the number of real eigenvalues of a real Ginibre matrix: E ≈ √(2d/π) + 1/2 (Edelman, Kostlan & Shub
    # 1994), variance ≈ (2 − √2)·√(2d/π) (Forrester & Nagao 2007). Its real eigenvalues are simple and far
    # apart, its complex ones mostly far from the axis: the rule must count LAPACK's real ones exactly.
    for d, full in ((576, True), (1536, False)):
        G = rng(d).standard_normal((d, d))
        expected, sd = np.sqrt(2 * d / np.pi) + 0.5, np.sqrt((2 - np.sqrt(2)) * np.sqrt(2 * d / np.pi))
        counts = []
        for M in (G, to_float32(G)) if full else (to_float32(G),):
            exact = int(np.sum(np.linalg.eigvals(M).imag == 0)) if full else None
            if full:  # the spectra.tsv route
                m = spectral_metrics(M)
                n_real = m["n_modes"] - n_complex(m)
            else:  # d = 1536: the same rule without the singular vectors (their SVD doubles the cost)
                lam, vl, vr = scipy.linalg.eig(M, left=True, right=True)
                exact = int(np.sum(lam.imag == 0))
                dec = spectra.Decomposition(lam, None, svdvals(M), None, vl, vr)
                nz, cplx, r = spectra.mode_flags(dec, tol(d))
                assert r == nz.sum() == d
                n_real = int(nz.sum() - cplx.sum())
            assert n_real == exact, (d, n_real, exact)
            assert abs(n_real - expected) < 4 * sd, (d, n_real, expected)
            counts.append(n_real)
        assert len(set(counts)) == 1  # float32 and float64 agree


# ---- GQA attention: rank n_kv·d_head, weakly to strongly non-normal ----------------------------------
def gqa_factors(d=576, n_kv=3, d_head=64, n_heads=9, shrink=0.0, seed=0):
    """A = W_O R (d × r), B = W_V diag(γ) (r × d), r = n_kv·d_head, built like SmolLM2's single-token
    attention (9 query heads sharing 3 KV heads of 64: R repeats each value head); J = A B.

    ``shrink`` removes that fraction of B's component along range(A): BA = (1 − shrink)·B₀A, so the r
    non-zero eigenvalues (those of BA) shrink while σ(J) does not — J grows non-normal (Henrici → 1).
    """
    g = rng(seed)
    WV = g.standard_normal((n_kv * d_head, d)) / np.sqrt(d)
    WO = g.standard_normal((d, n_heads * d_head)) / np.sqrt(n_heads * d_head)
    R = np.kron(np.eye(n_kv), np.ones((n_heads // n_kv, 1)))  # (n_heads, n_kv): head h reads KV head h // 3
    A = WO @ np.kron(R, np.eye(d_head))  # (d, r)
    B = WV * (1 + 0.3 * g.standard_normal(d))  # (r, d)
    Qa, _ = np.linalg.qr(A)
    return A, B - shrink * (B @ Qa) @ Qa.T


@pytest.mark.parametrize("shrink", [0.0, 0.9])
def test_gqa_modes_are_the_rank_and_the_complex_count_is_exact(shrink):
    A, B = gqa_factors(shrink=shrink)
    d, r = A.shape
    mu = np.linalg.eigvals(B @ A)  # the r non-zero eigenvalues of J = AB, exactly (r × r, float64)
    n_true = int(np.sum(mu.imag != 0))
    assert 0 < n_true < r
    rows = {}
    for dtype, M in (("float64", A @ B), ("float32", (A.astype(np.float32) @ B.astype(np.float32)).astype(float))):
        m = spectral_metrics(M, tol=tol(d, dtype))
        assert m["numerical_rank"] == m["n_modes"] == r, dtype
        assert n_complex(m) == n_true, (dtype, n_complex(m), n_true)
        rows[dtype] = m
    if shrink:
        assert rows["float32"]["henrici"] >= 0.99


def test_strongly_non_normal_gqa_keeps_rank_many_modes_and_counts_only_resolved_pairs():
    # Henrici ≈ 1 − 1e-5: the non-zero eigenvalues (|λ| ~ 1e-3 σ₁) carry κ up to 1e5, so float32 rounding
    # (κ·ε·σ₁ up to ~4e-2 σ₁) can move them by more than their imaginary parts. The mask still holds exactly
    # r modes (the former max|λ|-relative mask: 388 in float32), the count the pairs resolved beyond
    # rounding: every one of them a genuine pair of BA, never more than LAPACK's pairs (frac_complex_max).
    A, B = gqa_factors(shrink=0.99)
    d, r = A.shape
    mu = np.linalg.eigvals(B @ A)
    M = (A.astype(np.float32) @ B.astype(np.float32)).astype(float)
    dec = spectra.decompose(M)
    m = spectral_metrics(M, dec=dec)
    assert m["henrici"] > 0.9999
    assert m["numerical_rank"] == m["n_modes"] == r
    assert spectra.nonzero_modes(dec.eigvals, m["rank_tol"]).sum() > r  # relative to max|λ|: noise counts
    nz, cplx, _ = spectra.mode_flags(dec, m["rank_tol"])
    assert 0 < cplx.sum() <= np.sum(mu.imag != 0) <= m["frac_complex_max"] * r + 1e-9
    for lam in dec.eigvals[cplx]:  # each counted pair is one of BA's complex pairs
        nearest = mu[np.argmin(np.abs(mu - lam))]
        assert nearest.imag != 0 and np.sign(nearest.imag) == np.sign(lam.imag)


def test_rounding_of_the_jacobians_stays_within_the_rule_bound(tiny_jacobians):
    # the rule assumes the rounding E of a Jacobian carried at precision ε has ‖E‖₂ ≤ (c/2)·ε·σ₁ (c = MODE_C:
    # a rounding-split pair needs a coupling of c/2·εσ₁ to count): float32 against float64 of the same model
    hf, jacs = tiny_jacobians
    for name, J64 in jacs["float64"].items():
        J32 = jacs["float32"][name]
        E = np.linalg.norm(J32 - J64, 2)
        assert E <= spectra.MODE_C / 2 * EPS32 * np.linalg.norm(J64, 2), name


def test_float32_and_float64_jacobians_give_the_same_mode_counts(tiny_jacobians):
    hf, jacs = tiny_jacobians
    d = hf["hidden_size"]
    for name in jacs["float32"]:
        m32, m64 = (spectral_metrics(jacs[t][name], tol=tol(d, t)) for t in jacs)
        for key in ("numerical_rank", "n_modes", "frac_complex", "sr_k"):
            assert m32[key] == m64[key], (name, key)


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-gemma3"])
def tiny_jacobians(request):
    """J̄ of every boundary of a tiny GQA model at 40 random states, computed in float32 and in float64."""
    import torch
    from conftest import TEST_CONFIG, tiny_model

    from layergeom.adapters import get_adapter
    from layergeom.spectral.jacobians import mean_jacobian

    m = TEST_CONFIG["models"][request.param]
    out = {}
    for name, dt in (("float32", torch.float32), ("float64", torch.float64)):
        ad = get_adapter(tiny_model(m["family"], seed=3).to(dt))
        x = torch.randn(40, ad.d_model, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        out[name] = {
            b.name: np.asarray(mean_jacobian(ad, b, x, **jacobian_kw(dtype=dt))[0], np.float64) for b in ad.boundaries
        }
    return m["hf_config"], out


# ---- self-realignment at low rank -----------------------------------------------------------------------
def test_self_realignment_is_capped_at_the_numerical_rank_and_nan_at_rank_zero():
    g = rng(3)
    d, r, k = 40, 6, 16
    Ua, _ = np.linalg.qr(g.standard_normal((d, r)))
    Vb, _ = np.linalg.qr(g.standard_normal((d, r)))
    S = np.diag(np.linspace(3, 1, r))
    J = Ua @ S @ Vb.T + EPS32 * g.standard_normal((d, d))  # rank r up to float32 rounding
    m = spectral_metrics(J, sr_k=k)
    assert m["numerical_rank"] == m["sr_k"] == r and m["sr_baseline"] == r / d
    # SR_r of the exact factors: ‖Uaᵀ Vb‖_F² / r (the top-r singular subspaces are range(Ua), range(Vb))
    assert m["self_realign"] == pytest.approx(np.sum((Ua.T @ Vb) ** 2) / r, abs=1e-6)
    # the replicates measure the same SR_r, linearised and exact (deviations that turn the range, rank r)
    D = np.stack([1e-3 * g.standard_normal((d, r)) @ S @ Vb.T for _ in range(4)])
    tau = tol(d)
    lin = linear.metric_replicates(J, D, tol=tau, sr_k=k, method="linear")
    ex = linear.metric_replicates(J, D, tol=tau, sr_k=k, method="exact")
    change = np.abs(ex["self_realign"] - m["self_realign"]).max()
    assert 0 < change and np.abs(lin["self_realign"] - ex["self_realign"]).max() <= 0.1 * change
    z = spectral_metrics(np.zeros((d, d)), sr_k=k)
    assert z["numerical_rank"] == z["n_modes"] == z["sr_k"] == 0
    assert np.isnan(z["self_realign"]) and np.isnan(z["frac_complex"])


# ---- one definition: the table, its replicates and the eigenvalue figure -------------------------------
def collision_matrix(d=12, seed=0):
    """Real eigenvalues 0.3 ± 2e-3 (close: noise can push them into a pair) and a pair 0.7 ± 2e-3i (near
    the axis: noise can push it onto the axis), in a non-normal random basis; the rest well separated."""
    g = rng(seed)
    T = np.diag(np.r_[0.3 - 2e-3, 0.3 + 2e-3, 0.0, 0.0, np.linspace(-0.9, -0.1, d - 6), 0.5, 0.95])
    T[2:4, 2:4] = [[0.7, 2e-3], [-2e-3, 0.7]]
    N = np.triu(g.standard_normal((d, d)), 1) * 0.1  # non-normal part, outside the two 2×2 blocks
    N[0, 1] = N[2, 3] = 0.0
    T += N
    X = np.eye(d) + 0.2 * g.standard_normal((d, d))
    return X @ T @ np.linalg.inv(X)


def test_linear_replicates_count_modes_as_the_exact_replicates_do_across_the_real_axis():
    d = 12
    J = collision_matrix(d)
    g = rng(11)
    tau = tol(d)
    base = spectral_metrics(J, tol=tau)
    D = 1e-3 * g.standard_normal((40, d, d))
    lin = linear.metric_replicates(J, D, tol=tau, sr_k=4, method="linear")
    ex = linear.metric_replicates(J, D, tol=tau, sr_k=4, method="exact")
    # the noise moves modes across the axis in both directions (else this test checks nothing) ...
    assert np.any(ex["frac_complex"] > base["frac_complex"]) and np.any(ex["frac_complex"] < base["frac_complex"])
    # ... and the linearised count follows the exact one (second-order slips at the boundary: a few of 40)
    assert np.sum(lin["frac_complex"] != ex["frac_complex"]) <= 3, (lin["frac_complex"], ex["frac_complex"])


def test_eigenvalue_frame_flags_are_the_table_counts():
    A, B = gqa_factors(d=96, n_kv=2, d_head=8, n_heads=4, shrink=0.9, seed=2)
    J = (A.astype(np.float32) @ B.astype(np.float32)).astype(float)
    dec = spectra.decompose(J)
    tau = tol(96)
    m = spectral_metrics(J, tol=tau, dec=dec)
    ev = spectra.eigenvalue_frame("L0.attn", dec, tau)
    assert ev["nonzero"].sum() == m["n_modes"] == 16
    assert ev["complex"].sum() == n_complex(m) and not (ev["complex"] & ~ev["nonzero"]).any()
