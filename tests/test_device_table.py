"""The spectra table's torch path (``spectra.decompose``, ``spectral_metrics``, ``linear.metric_replicates`` on a
torch device) against an independent numpy/scipy computation written here: numpy's SVD, scipy's LAPACK geev with
left and right eigenvectors, and the metrics' and first-order replicates' formulas (docs/methods.md §2.3, §2.7),
on random and near-normal matrices, at <= 1e-10 relative in float64; on "cpu" and, where there is one, "cuda".

The replicates' float32 products (Δ·V, Δ·[Re x, Im x], as the library rounds them) are formed here with torch's
matmul on the same device: a float32 sum's rounding depends on the BLAS kernel (OpenBLAS and MKL differ by
~1e-7 relative on some shapes), so a numpy float32 product would test the kernels, not the formulas.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

from layergeom.spectral import linear, spectra
from layergeom.spectral.spectra import MODE_C, decompose, rank_tolerance, spectral_metrics

RTOL = 1e-10
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")),
]
D = 48


def random_matrix(rng) -> np.ndarray:
    """A generic real matrix: complex pairs and reals, some modes outside the unit circle."""
    return 1.1 * rng.standard_normal((D, D)) / np.sqrt(D)


def near_normal_matrix(rng) -> np.ndarray:
    """A symmetric matrix plus a small skew part: Henrici departure below linear.HENRICI_EXACT_BELOW."""
    A = rng.standard_normal((D, D)) / np.sqrt(D)
    S = rng.standard_normal((D, D)) / np.sqrt(D)
    return (A + A.T) / 2 + 0.01 * (S - S.T) / 2


CASES = {"random": random_matrix, "near-normal": near_normal_matrix}


def rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.complex128), np.asarray(b, dtype=np.complex128)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), np.finfo(np.float64).tiny)))


def reference_decomposition(J: np.ndarray, tol: float) -> dict:
    """numpy's SVD and scipy's geev (left and right vectors), the mode flags and κ, all in numpy."""
    U, s, Vh = np.linalg.svd(J)
    lam, vl, vr = scipy.linalg.eig(J, left=True, right=True)
    d = len(s)
    r = int(np.sum(s > tol * s[0]))
    nz = np.zeros(d, bool)
    nz[np.argsort(-np.abs(lam), kind="stable")[:r]] = True
    kappa = np.linalg.norm(vl, axis=0) * np.linalg.norm(vr, axis=0) / np.abs(np.sum(vl.conj() * vr, axis=0))
    eps = tol / d
    cplx = (np.abs(lam.imag) > MODE_C * np.maximum(kappa, 1) * eps * s[0]) & nz
    return {"U": U, "s": s, "V": Vh.T, "lam": lam, "vl": vl, "vr": vr, "r": r, "nz": nz, "kappa": kappa,
            "eps": eps, "cplx": cplx}  # fmt: skip


def reference_metrics(J: np.ndarray, ref: dict, sr_k: int) -> dict:
    s, lam, r, nz = ref["s"], ref["lam"], ref["r"], ref["nz"]
    k = min(sr_k, r)
    fro = np.sqrt(np.sum(J**2))
    p = s / s.sum()
    e = s**2
    return {
        "numerical_rank": r,
        "n_modes": int(nz.sum()),
        "cond": s[0] / s[r - 1],
        "self_realign": np.sum((ref["U"][:, :k].T @ ref["V"][:, :k]) ** 2) / k,
        "henrici": np.sqrt(max(0.0, fro**2 - np.sum(np.abs(lam) ** 2))) / fro,
        "asymmetry": np.sqrt(np.sum((J - J.T) ** 2)) / (2 * fro),
        "erank": np.exp(-np.sum(p * np.log(p))),
        "part_ratio": e.sum() ** 2 / np.sum(e**2),
        "frac_expansive": np.sum((np.abs(lam) > 1) & nz) / nz.sum(),
        "frac_complex": ref["cplx"].sum() / nz.sum(),
    }


def mm32(a: np.ndarray, b: np.ndarray, device: str) -> np.ndarray:
    """A float32 product as the library rounds it (torch's matmul on `device`), returned in float64."""
    ta = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(device)
    tb = torch.from_numpy(np.ascontiguousarray(b, dtype=np.float32)).to(device)
    return (ta @ tb).double().cpu().numpy()


def reference_replicate(J: np.ndarray, ref: dict, delta: np.ndarray, tol: float, sr_k: int, device: str) -> dict:
    """Every metric of J + Δ to first order (docs/methods.md §2.7), from the reference decomposition."""
    s, U, V, lam, nz = ref["s"], ref["U"], ref["V"], ref["lam"], ref["nz"]
    r, d = ref["r"], len(s)
    k = min(sr_k, r)
    # singular values: δσ_i = u_iᵀ Δ v_i (U rounded to float32, ΔV a float32 product)
    Ur = U.astype(np.float32).astype(np.float64)
    DV = mm32(delta, V, device)
    ds = np.sum(Ur * DV, axis=0)
    S = s.sum()
    p = s / S
    H = -np.sum(p * np.log(p))
    keep = s > tol * s[0]
    dH = np.where(keep, -(np.log(p) + H) / S, 0.0)
    e, de = s**2, 2 * s * ds
    se, se2 = e.sum(), np.sum(e**2)
    # SR_k: the first-order turns of the top-k subspaces (c^U, c^V) against (UᵀV_k)(UᵀV_k)ᵀ and (VᵀU_k)(VᵀU_k)ᵀ
    A_lo, A_up = Ur[:, k:].T @ DV[:, :k], Ur[:, :k].T @ DV[:, k:]
    si, sj = s[:k, None], s[None, k:]
    gap = si**2 - sj**2
    cu, cv = (si * A_lo.T + sj * A_up) / gap, (si * A_up + sj * A_lo.T) / gap
    assert max(np.abs(cu).max(), np.abs(cv).max()) < 0.1  # the first-order branch
    M, Mp = U.T @ V[:, :k], V.T @ U[:, :k]
    sr0 = np.sum((U[:, :k].T @ V[:, :k]) ** 2) / k
    sr = sr0 + 2.0 / k * np.sum(cu * (M[:k] @ M[k:].T) + cv * (Mp[:k] @ Mp[k:].T))
    # eigenvalues: δλ_i = y_iᴴ Δ x_i / y_iᴴ x_i over one mode of each conjugate pair, a pair split onto the
    # axis when |y_iᴴ Δ x̄_i / y_iᴴ x_i| > |Im λ_i + δ|
    upper = nz & (lam.imag >= 0)
    x, y = ref["vr"][:, upper], ref["vl"][:, upper]
    n_up = int(upper.sum())
    DX = mm32(delta, np.concatenate([x.real, x.imag], axis=1), device)
    DXc = DX[:, :n_up] + 1j * DX[:, n_up:]
    ydx = np.sum(y.conj() * x, axis=0)
    new = lam[upper] + np.sum(y.conj() * DXc, axis=0) / ydx
    full = np.zeros(d, np.complex128)
    full[upper] = new
    for i in np.flatnonzero(nz & (lam.imag < 0)):
        full[i] = np.conj(full[i - 1])
    for q, i in enumerate(np.flatnonzero(upper)):
        if lam[i].imag > 0:
            a = np.conj(np.sum(y[:, q] * DXc[:, q])) / ydx[q]
            if abs(a) ** 2 > new[q].imag ** 2:
                root = np.sqrt(abs(a) ** 2 - new[q].imag ** 2)
                full[i], full[i + 1] = new[q].real + root, new[q].real - root
    lam1 = full[nz]
    J1 = J + delta.astype(np.float64)
    fro2 = np.sum(J1**2)
    fro2_0 = np.sum(J**2)
    if np.sqrt(max(0.0, fro2_0 - np.sum(np.abs(lam) ** 2)) / fro2_0) < linear.HENRICI_EXACT_BELOW:
        henrici = np.sqrt(max(0.0, fro2 - np.sum(np.abs(np.linalg.eigvals(J1)) ** 2))) / np.sqrt(fro2)
    else:
        henrici = np.sqrt(max(0.0, fro2 - np.sum(np.abs(lam1) ** 2) - np.sum(np.abs(lam[~nz]) ** 2)) / fro2)
    cplx = np.abs(lam1.imag) > MODE_C * np.maximum(ref["kappa"][nz], 1) * ref["eps"] * s[0]
    return {
        "cond": np.exp(np.log(s[0] / s[r - 1]) + ds[0] / s[0] - ds[r - 1] / s[r - 1]),
        "erank": np.exp(H + dH @ ds),
        "part_ratio": se**2 / se2 + np.sum((2 * se / se2 - 2 * se**2 * e / se2**2) * de),
        "self_realign": sr,
        "frac_expansive": np.sum(np.abs(lam1) > 1) / nz.sum(),
        "frac_complex": np.sum(cplx) / nz.sum(),
        "henrici": henrici,
        "asymmetry": np.sqrt(np.sum((J1 - J1.T) ** 2)) / (2 * np.sqrt(fro2)),
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
def test_decomposition_matches_numpy_and_scipy(case, device):
    """Eigenvalues in LAPACK's order, singular values, κ and the eigenvectors' residuals as numpy/scipy's."""
    J = CASES[case](np.random.default_rng(7))
    tol = rank_tolerance(D, "float32", None)
    ref = reference_decomposition(J, tol)
    dec = decompose(J, device=device)
    assert rel(dec.eigvals, ref["lam"]) <= RTOL  # index by index: the same order
    assert rel(dec.s, ref["s"]) <= RTOL
    assert rel(dec.eig_condition, ref["kappa"]) <= RTOL
    # the vectors: unit columns, J x = λ x and yᴴ J = λ yᴴ to rounding, |xᴴ x_ref| = 1 (the same up to sign)
    for X in (dec.vr, dec.vl):
        np.testing.assert_allclose(np.linalg.norm(X, axis=0), 1.0, rtol=RTOL)
    bound = spectra.LEFT_RESIDUAL * D * np.finfo(float).eps * ref["s"][0]  # the library's own acceptance
    assert np.abs(J @ dec.vr - dec.vr * dec.eigvals).max() <= bound
    assert np.abs(dec.vl.conj().T @ J - dec.eigvals[:, None] * dec.vl.conj().T).max() <= bound
    np.testing.assert_allclose(np.abs(np.sum(dec.vr.conj() * ref["vr"], axis=0)), 1.0, rtol=1e-9)
    np.testing.assert_allclose(np.abs(np.sum(dec.vl.conj() * ref["vl"], axis=0)), 1.0, rtol=1e-9)
    # a real eigenvalue's vectors are real, a pair's conjugate (the replicates' mode logic relies on it)
    real = dec.eigvals.imag == 0
    assert np.all(dec.vr[:, real].imag == 0) and np.all(dec.vl[:, real].imag == 0)
    low = np.flatnonzero(dec.eigvals.imag < 0)
    assert np.array_equal(dec.vl[:, low], dec.vl[:, low - 1].conj())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
def test_metrics_match_an_independent_computation(case, device):
    J = CASES[case](np.random.default_rng(8))
    tol = rank_tolerance(D, "float32", None)
    ref = reference_decomposition(J, tol)
    got = spectral_metrics(J, sr_k=8, tol=tol, device=device)
    want = reference_metrics(J, ref, 8)
    for m, v in want.items():
        assert rel(got[m], v) <= RTOL, (m, got[m], v)
    for m in ("numerical_rank", "n_modes"):
        assert got[m] == want[m]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
def test_linear_replicates_match_an_independent_computation(case, device):
    rng = np.random.default_rng(9)
    J = CASES[case](rng)
    tol = rank_tolerance(D, "float32", None)
    deltas = (1e-3 * rng.standard_normal((6, D, D)) / np.sqrt(D)).astype(np.float32)
    ref = reference_decomposition(J, tol)
    got = linear.metric_replicates(J, deltas, tol=tol, sr_k=8, method="linear", device=device)
    want = [reference_replicate(J, ref, delta, tol, 8, device) for delta in deltas]
    for m in want[0]:
        assert rel(got[m], np.array([w[m] for w in want])) <= RTOL, m


@pytest.mark.parametrize("device", DEVICES)
def test_exact_replicates_are_the_metrics_of_each_matrix(device):
    rng = np.random.default_rng(10)
    J = random_matrix(rng)
    tol = rank_tolerance(D, "float32", None)
    deltas = (1e-3 * rng.standard_normal((3, D, D)) / np.sqrt(D)).astype(np.float32)
    got = linear.metric_replicates(J, deltas, tol=tol, sr_k=8, method="exact", device=device)
    for i, delta in enumerate(deltas):
        J1 = J + delta.astype(np.float64)
        want = reference_metrics(J1, reference_decomposition(J1, tol), 8)
        for m in ("cond", "self_realign", "henrici", "asymmetry", "erank", "part_ratio", "frac_complex"):
            assert rel(got[m][i], want[m]) <= RTOL, m


def test_same_input_twice_is_bit_identical_on_the_cpu():
    rng = np.random.default_rng(11)
    J = random_matrix(rng)
    tol = rank_tolerance(D, "float32", None)
    deltas = (1e-3 * rng.standard_normal((4, D, D)) / np.sqrt(D)).astype(np.float32)
    a, b = decompose(J), decompose(J)
    for f in ("eigvals", "U", "s", "Vh", "vl", "vr"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    ra = linear.metric_replicates(J, deltas, tol=tol, sr_k=8, method="linear", dec=a)
    rb = linear.metric_replicates(J, deltas, tol=tol, sr_k=8, method="linear", dec=b)
    for m in ra:
        assert np.array_equal(ra[m], rb[m], equal_nan=True), m


def test_left_eigenvectors_fall_back_to_lapack_where_the_inverse_is_inaccurate(monkeypatch):
    """A strongly non-normal J (cond(X) ~ 1e16): the rows of X⁻¹ are not its left eigenvectors, and decompose
    returns LAPACK geev's; a generic J keeps the torch path (scipy's geev is not called)."""
    rng = np.random.default_rng(12)
    d = 128
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    T = np.triu(3 * rng.standard_normal((d, d)), 1) + np.diag(rng.standard_normal(d))
    J = Q @ T @ Q.T
    dec = decompose(J)
    lam, vl, _ = scipy.linalg.eig(J, left=True, right=True)
    assert np.array_equal(dec.vl, vl) and np.array_equal(dec.eigvals, lam)
    # the inverse's rows would have been far off: their residual is the guard's reason
    _, X = np.linalg.eig(J)
    Yh = np.linalg.inv(X)
    Yh /= np.linalg.norm(Yh, axis=1, keepdims=True)
    residual = np.linalg.norm(Yh @ J - lam[:, None] * Yh, axis=1).max() / np.linalg.norm(J, 2)
    assert residual > spectra.LEFT_RESIDUAL * d * np.finfo(float).eps

    def refuse(*args, **kwargs):
        raise AssertionError("scipy's geev called for a generic matrix")

    monkeypatch.setattr(spectra.scipy.linalg, "eig", refuse)
    decompose(random_matrix(rng))
