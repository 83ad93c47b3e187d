"""The cumulative product chains through torch on the job's device (``cumulative.ProductChain``): against an
independent numpy composition written here (numpy products, ``np.linalg.svd``), snapshot round trips, determinism,
and ``cumulative_rows`` end to end. Every test runs on the CPU, and on CUDA where torch sees a GPU."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from schema_defaults import SPECTRA

from layergeom import linalg
from layergeom.spectral import cumulative, intervals

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")),
]
RTOL = 1e-10  # fp64 products; the tangents are float32 in both computations
#: the replicates exp(H + δH_k): δH_k = Re⟨Γ, Ċ_k⟩ comes from float32 tangents, products that numpy's BLAS and
#: torch's sum in other orders (and with other thread counts), and is itself a d²-term sum whose terms partly
#: cancel: it agrees to tens of ε₃₂ of the tangents' scale (max_k |δH_k|), not to RTOL (nor do the interval ends
#: built from them: tens of ε₃₂ of their half-width)
TANGENT_ULPS = 64 * float(np.finfo(np.float32).eps)


def rng(seed=0):
    return np.random.default_rng(seed)


def steps(d=24, n=6, K=5, complex_=False, seed=0, scale=1e-2):
    """n boundaries' (J, Δ): J with spectral radius about 1 (a deep product neither explodes nor vanishes
    at once), Δ (K, d, d) float32 deviations of ≈`scale` of J (complex64 for complex J)."""
    g = rng(seed)
    out = []
    for _ in range(n):
        J = g.standard_normal((d, d)) / np.sqrt(d)
        D = scale * g.standard_normal((K, d, d)) / np.sqrt(d)
        if complex_:
            J = J + 1j * g.standard_normal((d, d)) / np.sqrt(d)
            D = D + 1j * scale * g.standard_normal((K, d, d)) / np.sqrt(d)
        out.append((J, D.astype(np.complex64 if complex_ else np.float32)))
    return out


def reference(mats, variant, floor):
    """The chain written out in numpy: C in float64/complex128, tangents Ċ_n = Δ_n C_{n−1} + M_n Ċ_{n−1} in
    float32/complex64, both divided by ‖C_n‖_F; erank from np.linalg.svd and its first-order replicates
    exp(H + Σ_i ∂H/∂σ_i Re u_iᴴ Ċ_k v_i) over σ_i > floor·σ₁. -> [(erank, log_norm, replicates)] per step."""
    C = T = None
    log_norm, out = 0.0, []
    for J, D in mats:
        M = J + np.eye(len(J)) if variant == "full" else J
        cplx = np.iscomplexobj(M) or np.iscomplexobj(D) or np.iscomplexobj(C)
        M = M.astype(np.complex128 if cplx else np.float64)
        low = np.complex64 if cplx else np.float32
        if C is None:
            C, T = M.copy(), D.astype(low)
        else:
            T = D.astype(low) @ C.astype(low) + M.astype(low) @ T
            C = M @ C
        n = np.sqrt(np.sum(np.abs(C) ** 2))
        C, T = C / n, (T / np.float32(n)).astype(low)
        log_norm += np.log(n)
        U, s, Vh = np.linalg.svd(C)
        p = s / s.sum()
        H = -np.sum(p[p > 0] * np.log(p[p > 0]))
        keep = s > floor * s[0]
        grad = -(np.log(p[keep]) + H) / s.sum()
        dsig = np.real(np.einsum("ai,kab,bi->ki", U.conj()[:, keep], T, Vh.conj().T[:, keep]))  # Re u_iᴴ Ċ_k v_i
        out.append((float(np.exp(H)), float(log_norm), np.exp(H + dsig @ grad)))
    return out


def assert_close(got, want, rtol=RTOL):
    for (e, ln, r), (e0, ln0, r0) in zip(got, want, strict=True):
        assert abs(e - e0) <= rtol * abs(e0), (e, e0)
        assert abs(ln - ln0) <= rtol * max(1.0, abs(ln0)), (ln, ln0)
        dH = np.log(np.asarray(r0)) - np.log(e0)  # the tangents' share of each replicate
        tol = max(rtol, TANGENT_ULPS * float(np.max(np.abs(dH)))) if len(dH) else rtol
        np.testing.assert_allclose(np.log(r), np.log(r0), rtol=0, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("variant", cumulative.VARIANTS)
def test_chain_matches_numpy_composition(device, complex_, variant):
    mats = steps(complex_=complex_, seed=3)
    floor = cumulative.tangent_floor(24)
    chain = cumulative.ProductChain(floor, device=device)
    got = [chain.step(cumulative.step_operator(J, variant), D) for J, D in mats]
    want = reference(mats, variant, floor)
    assert_close(got, want)
    e, ln, r = got[-1]
    assert isinstance(e, float) and isinstance(ln, float) and isinstance(r, np.ndarray) and r.dtype == np.float64
    assert np.abs(r - e).max() > 1e-6 * e  # the replicates do move: the comparison is not of constants
    st = chain.state()
    assert st["C"].dtype == (np.complex128 if complex_ else np.float64) and isinstance(st["C"], np.ndarray)
    assert st["T"].dtype == (np.complex64 if complex_ else np.float32) and st["T"].shape == (5, 24, 24)


@pytest.mark.parametrize("device", DEVICES)
def test_chain_without_tangents_and_mixed_dtypes(device):
    """No Δ: erank only (an empty replicate array); a real chain turning complex halfway (a complex M, as the
    Schur surgery's operators) promotes C to complex128 as numpy does."""
    mats = steps(seed=5)
    cmats = steps(complex_=True, seed=6)
    seq = [mats[0], mats[1], cmats[2], mats[3]]
    floor = cumulative.tangent_floor(24)
    chain = cumulative.ProductChain(floor, device=device)
    got = [chain.step(J) for J, _ in seq]
    want = reference([(J, np.zeros((0, 24, 24), np.float32)) for J, _ in seq], "update", floor)
    for (e, ln, r), (e0, ln0, _) in zip(got, want, strict=True):
        assert r.shape == (0,) and abs(e - e0) <= RTOL * e0 and abs(ln - ln0) <= RTOL * max(1, abs(ln0))
    assert chain.state()["C"].dtype == np.complex128 and chain.state()["T"] is None


@pytest.mark.parametrize("device", DEVICES)
def test_inputs_are_read_not_changed_memmaps_and_tensors_alike(device, tmp_path):
    """M and Δ from read-only memmaps (the Jacobian files) or tensors give the same numbers, and the chain
    never writes into its inputs (the first step's Δ becomes the tangents, then divided in place)."""
    mats = steps(n=3, seed=7)
    floor = cumulative.tangent_floor(24)
    files = []
    for i, (J, D) in enumerate(mats):
        np.save(tmp_path / f"J{i}.npy", J)
        np.save(tmp_path / f"D{i}.npy", D)
        files.append((np.load(tmp_path / f"J{i}.npy", mmap_mode="r"), np.load(tmp_path / f"D{i}.npy", mmap_mode="r")))
    a, b, c = (cumulative.ProductChain(floor, device=device) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns on non-writable numpy arrays it would share
        ra = [a.step(J, D) for J, D in files]
    rb = [b.step(torch.from_numpy(J), torch.from_numpy(D)) for J, D in mats]
    copies = [(J.copy(), D.copy()) for J, D in mats]
    rc = [c.step(J, D) for J, D in mats]
    for (J, D), (J0, D0) in zip(mats, copies, strict=True):
        np.testing.assert_array_equal(J, J0)
        np.testing.assert_array_equal(D, D0)
    for x, y in ((ra, rb), (ra, rc)):
        for (e, ln, r), (e0, ln0, r0) in zip(x, y, strict=True):
            assert e == e0 and ln == ln0 and np.array_equal(r, r0)


@pytest.mark.parametrize("device", DEVICES)
def test_same_input_twice_is_bit_identical(device):
    mats = steps(d=48, n=5, K=4, seed=11)
    runs = []
    for _ in range(2):
        chain = cumulative.ProductChain(cumulative.tangent_floor(48), device=device)
        runs.append(([chain.step(cumulative.step_operator(J, "full"), D) for J, D in mats], chain.state()))
    (a, sa), (b, sb) = runs
    for (e, ln, r), (e0, ln0, r0) in zip(a, b, strict=True):
        assert e == e0 and ln == ln0 and np.array_equal(r, r0)
    assert np.array_equal(sa["C"], sb["C"]) and np.array_equal(sa["T"], sb["T"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_snapshot_round_trip_resumes_identically(device, complex_):
    """state() -> pickle -> from_state (on the CPU, and on the device) continues exactly as the chain itself."""
    mats = steps(n=6, complex_=complex_, seed=13)
    floor = cumulative.tangent_floor(24)
    whole = cumulative.ProductChain(floor, device=device)
    full = [whole.step(J, D) for J, D in mats]
    first = cumulative.ProductChain(floor, device=device)
    for J, D in mats[:3]:
        first.step(J, D)
    state = pickle.loads(pickle.dumps(first.state()))
    assert all(isinstance(state[k], np.ndarray) for k in ("C", "T"))
    for where in dict.fromkeys(["cpu", device]):
        resumed = cumulative.ProductChain.from_state(state, device=where)
        rest = [resumed.step(J, D) for J, D in mats[3:]]
        if where == device:
            for (e, ln, r), (e0, ln0, r0) in zip(rest, full[3:], strict=True):
                assert e == e0 and ln == ln0 and np.array_equal(r, r0)
        else:  # another device: the same numbers up to rounding
            assert_close(rest, full[3:])
    np.testing.assert_array_equal(state["C"], pickle.loads(pickle.dumps(first.state()))["C"])  # not changed


def reference_table(mats, weights, ci_level, variants=cumulative.VARIANTS):
    """cumulative.tsv from the numpy reference: erank, its jackknife interval on the log scale, log ‖C‖."""
    rows = []
    floor = cumulative.tangent_floor(len(mats[0][1][0]))
    for v in variants:
        for depth, ((name, _, _), (e, ln, reps)) in enumerate(
            zip(mats, reference([(J, D) for _, J, D in mats], v, floor), strict=True), start=1
        ):
            lo, hi = intervals.jackknife_interval(e, reps, weights, ci_level, "log")
            rows.append({"variant": v, "depth": depth, "boundary": name, "erank": e, "erank_ci_low": lo,
                         "erank_ci_high": hi, "log_norm": ln})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.parametrize("device", DEVICES)
def test_cumulative_rows_match_the_numpy_reference(device):
    d, G = 20, 6
    g = rng(17)
    counts = g.integers(3, 9, G)
    reps = intervals.replicates(counts)
    mats = []
    for b in range(5):
        groups = (g.standard_normal((d, d)) + 0.3 * g.standard_normal((G, d, d))).astype(np.float32) / np.sqrt(d)
        J = np.tensordot(counts / counts.sum(), groups.astype(np.float64), axes=1)
        mats.append((f"L{b}", J, intervals.deviations(J, groups, counts, reps)))
    table = cumulative.cumulative_rows(iter(mats), weights=reps.weights, ci_level=SPECTRA["ci_level"], device=device)
    want = reference_table(mats, reps.weights, SPECTRA["ci_level"])
    assert list(table.columns) == list(want.columns) and len(table) == 10
    pd.testing.assert_frame_equal(table[["variant", "depth", "boundary"]], want[["variant", "depth", "boundary"]])
    for col in ("erank", "log_norm"):
        np.testing.assert_allclose(table[col], want[col], rtol=RTOL, atol=0, err_msg=col)
    half = (np.log(want["erank_ci_high"]) - np.log(want["erank_ci_low"])) / 2  # the interval's half-width (log)
    for col in ("erank_ci_low", "erank_ci_high"):  # from the float32 tangents: to ε₃₂ of the interval's width
        assert (np.abs(np.log(table[col]) - np.log(want[col])) <= TANGENT_ULPS * half).all(), col
    assert (table["erank_ci_high"] > table["erank_ci_low"]).all()


def test_torch_svdvals_falls_back_to_gesvd(monkeypatch):
    A = np.linalg.qr(rng(19).standard_normal((16, 16)))[0] * np.logspace(0, -12, 16)
    want = np.linalg.svd(A, compute_uv=False)

    def fail(*a, **k):
        raise torch.linalg.LinAlgError("linalg.svd: The algorithm failed to converge")

    monkeypatch.setattr(torch.linalg, "svdvals", fail)
    for x, dtype in ((A, torch.float64), (A.astype(np.complex128), torch.float64), (A, torch.float32)):
        s = linalg.torch_svdvals(torch.from_numpy(x).to(dtype if not np.iscomplexobj(x) else torch.complex128))
        assert s.dtype == dtype
        np.testing.assert_allclose(s.numpy(), want, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-7)
