"""The linearised jackknife replicates of spectra.tsv (layergeom.spectral.linear) against the formulas as they
were before the restructuring (tests/linear_reference.py: the whole complex r'×r' product per replicate)."""

from __future__ import annotations

import linear_reference as reference
import numpy as np
import pytest

from layergeom.spectral import linear
from layergeom.spectral.spectra import decompose, rank_tolerance

RTOL = 1e-10


def with_eigenvalues(rng, blocks: list, d: int) -> np.ndarray:
    """A real d×d matrix X B X⁻¹ whose block-diagonal B holds `blocks` (reals, or (a, b) for a ± ib), the
    rest random complex pairs and reals in the unit disc; X well conditioned."""
    B = np.zeros((d, d))
    i = 0
    for b in blocks:
        if isinstance(b, tuple):
            B[i : i + 2, i : i + 2] = [[b[0], b[1]], [-b[1], b[0]]]
            i += 2
        else:
            B[i, i] = b
            i += 1
    while i < d:
        if i + 1 < d and rng.random() < 0.6:
            a, c = rng.uniform(-0.9, 0.9), rng.uniform(0.05, 0.6)
            B[i : i + 2, i : i + 2] = [[a, c], [-c, a]]
            i += 2
        else:
            B[i, i] = rng.uniform(-1.2, 1.2)
            i += 1
    X = np.eye(d) + 0.3 * rng.standard_normal((d, d)) / np.sqrt(d)
    return X @ B @ np.linalg.inv(X)


def deviations(rng, J: np.ndarray, K: int, scale: float) -> np.ndarray:
    return (scale * np.linalg.norm(J) / J.shape[0] * rng.standard_normal((K, *J.shape))).astype(np.float32)


def cases():
    rng = np.random.default_rng(20)
    d = 40
    # generic: a random matrix (mostly complex pairs)
    J = rng.standard_normal((d, d)) / np.sqrt(d) + 0.3 * np.eye(d)
    yield "generic", J, deviations(rng, J, 8, 0.02)
    # near-degenerate: two real pairs 1e-3 apart (they collide into complex pairs in some replicates) and a
    # complex pair 1e-3 off the axis (it lands on the axis in some), deviations ≈ 1e-2 of the couplings
    J = with_eigenvalues(rng, [0.5, 0.501, -0.3, -0.3008, (0.7, 1e-3)], d)
    yield "near-degenerate", J, deviations(rng, J, 12, 0.2)
    # rank-deficient (attention-like: rank 12 of 40)
    J = rng.standard_normal((d, 12)) @ rng.standard_normal((12, d)) / np.sqrt(12 * d)
    yield "rank-deficient", J, deviations(rng, J, 8, 0.02)
    # near-normal: symmetric plus a small skew part (Henrici < HENRICI_EXACT_BELOW: exact eigenvalues)
    A, S = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    J = (A + A.T) / (2 * np.sqrt(d)) + 0.02 * (S - S.T) / np.sqrt(d)
    yield "near-normal", J, deviations(rng, J, 8, 0.02)


CASES = list(cases())


@pytest.mark.parametrize("name,J,deltas", CASES, ids=[c[0] for c in CASES])
def test_replicates_match_reference(name, J, deltas):
    d = J.shape[0]
    tol = rank_tolerance(d, "float32", None)
    dec = decompose(J)
    new = linear.metric_replicates(J, deltas, tol=tol, sr_k=8, method="linear", dec=dec)
    old = reference.metric_replicates(J, deltas, tol=tol, sr_k=8, dec=dec)
    assert new.keys() == old.keys()
    for m in old:
        a, b = old[m], new[m]
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=m)
        ok = ~np.isnan(a)
        rel = np.abs(a[ok] - b[ok]) / np.maximum(np.abs(a[ok]), np.finfo(float).tiny)
        assert np.all(np.where(a[ok] == b[ok], 0.0, rel) <= RTOL), (name, m, rel.max())


def test_cases_reach_the_special_paths():
    """The cases exercise what the restructuring touched: collisions of real pairs (the 2×2 entries computed
    one by one), a pair landing on the axis, the exact Henrici path, and SR's rank cap."""
    by = {name: (J, deltas) for name, J, deltas in CASES}
    J, deltas = by["near-degenerate"]
    lin = linear.LinearSpectra(J, decompose(J), rank_tolerance(J.shape[0], "float32", None), 8)
    eg = lin.eigen
    collisions = 0
    onto_axis = 0
    for D in deltas:
        DXc = eg.tangent(D)
        new = eg.lam[eg.upper] + np.einsum("ji,ji->i", eg.yc, DXc) / eg.ydotx
        collisions += len(list(eg.real_pair_collisions(DXc, new)))
        lam1 = eg.perturbed(DXc)
        onto_axis += int(np.sum(lam1.imag == 0) > np.sum(eg.lam[eg.nz].imag == 0))
    assert collisions > 0 and collisions < 2 * len(deltas)  # some replicates collide, not all
    assert onto_axis > 0
    J, _ = by["near-normal"]
    near = linear.LinearSpectra(J, decompose(J), rank_tolerance(J.shape[0], "float32", None), 8)
    assert near.henrici < linear.HENRICI_EXACT_BELOW
    assert lin.henrici >= linear.HENRICI_EXACT_BELOW
    J, _ = by["rank-deficient"]
    dec = decompose(J)
    assert linear.LinearSpectra(J, dec, rank_tolerance(J.shape[0], "float32", None), 64).singular.rank == 12


def test_one_entry_equals_the_full_product():
    """coupling(p, q) is the (p, q) entry of the whole projected deviation (Yᴴ Δ X) / yᴴx that the reference
    formed, and the diagonal is its diagonal."""
    _, J, deltas = CASES[1]
    lin = linear.LinearSpectra(J, decompose(J), rank_tolerance(J.shape[0], "float32", None), 8)
    eg = lin.eigen
    DXc = eg.tangent(deltas[0])
    A = (eg.yc.T @ DXc) / eg.ydotx[:, None]
    rng = np.random.default_rng(1)
    for p, q in rng.integers(0, A.shape[0], size=(20, 2)):
        assert abs(eg.coupling(DXc, p, q) - A[p, q]) <= 1e-12 * np.abs(A).max()
    np.testing.assert_allclose(np.einsum("ji,ji->i", eg.yc, DXc) / eg.ydotx, np.diagonal(A), rtol=1e-12, atol=0)
