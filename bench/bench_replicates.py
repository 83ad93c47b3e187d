"""One boundary's linearised jackknife replicates for spectra.tsv: before/after the restructuring, and the
near-normal path (Henrici departure < linear.HENRICI_EXACT_BELOW: an exact eigvals per replicate).

"before" is tests/linear_reference.py (the replicates as they were: ΔV, Δ[Re x | Im x] and the whole complex
r'×r' product Yᴴ(ΔX)); "after" is layergeom.spectral.linear (ΔV, Δ[Re x | Im x], only the diagonal and the
2×2 entries of Yᴴ(ΔX)). Both from the same decomposition, not timed. Synthetic J̄ (d × d): "generic" a random
matrix + 0.3·I (mostly complex pairs, Henrici ≈ 0.7), "near-normal" a symmetric matrix plus a small skew part
(Henrici ≈ 0.05); deviations Δ_k of 2 %/√K of J̄'s entries. Also times the near-normal path's exact
eigenvalues: numpy's eigvals (today) against scipy's with no input checks and no copy.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=src python bench/bench_replicates.py [--d 1024 2048] [--K 4]

writes bench/results/replicates.json and replicates.md (``--render`` rewrites the .md from the .json).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import harness
import numpy as np
import scipy.linalg
from harness import RESULTS, parser, processor, timed, write_json, write_text

harness.importable("tests")  # tests/linear_reference.py: the replicates before
import linear_reference as before  # noqa: E402

from layergeom.spectral import linear as after  # noqa: E402
from layergeom.spectral.spectra import decompose, rank_tolerance  # noqa: E402


def synthetic(d: int, kind: str, K: int, rng) -> tuple[np.ndarray, np.ndarray]:
    if kind == "generic":
        J = rng.standard_normal((d, d)) / np.sqrt(d) + 0.3 * np.eye(d)
    else:
        A = rng.standard_normal((d, d)) / np.sqrt(2 * d)
        B = rng.standard_normal((d, d)) / np.sqrt(2 * d)
        J = (A + A.T) / 2 + 0.3 * np.eye(d) + 0.035 * (B - B.T) / 2
    deltas = (0.02 / np.sqrt(K) * rng.standard_normal((K, d, d)) / np.sqrt(d)).astype(np.float32)
    return J, deltas


def interleaved(old, new, deltas) -> tuple[float, float, list, list]:
    """Median seconds per replicate of each, timed alternately replicate by replicate (the load of the shared
    machine changes within a case), and the replicates."""
    t_old, t_new, r_old, r_new = [], [], [], []
    for D in deltas:
        for lin, t, r in ((old, t_old, r_old), (new, t_new, r_new)):
            rep, s = timed(lin.replicate, D)
            r.append(rep)
            t.append(float(s))
    return float(np.median(t_old)), float(np.median(t_new)), r_old, r_new


def render(res: dict, out: Path) -> None:
    lines = [
        "# spectra.tsv: one boundary's linearised replicates, before/after (bench/bench_replicates.py)",
        "",
        f"{res['machine']}, BLAS threads {res['threads']}, {res['K_timed']} replicates timed per case (a table has "
        "K = n_groups = 16), before and after alternately; median seconds per replicate; the 1-minute load average after each case (2 shared cores: "
        "times scale with it). before: ΔV, Δ[Re x | Im x] and the whole complex r'×r' Yᴴ(ΔX); after: the same two "
        "float32 products, only the diagonal and 2×2 entries of Yᴴ(ΔX). r' = upper modes (one per pair).",
        "",
        "| d | J̄ | Henrici | r' | before s | after s | before/after | max rel diff | exact eigvals s | load |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in res["cases"]:
        eig = f"{c['eigvals_numpy_s']:.2f} (scipy {c['eigvals_scipy_s']:.2f})" if "eigvals_numpy_s" in c else ""
        lines.append(f"| {c['d']} | {c['kind']} | {c['henrici']:.3f} | {c['r_upper']} | {c['before_s']:.3f} | "
                     f"{c['after_s']:.3f} | {c['ratio']:.2f} | {c['max_rel_diff']:.1e} | {eig} | "
                     f"{c['loadavg']:.1f} |")  # fmt: skip
    lines += ["", "near-normal (Henrici < 0.1): each replicate also computes the exact eigenvalues of J̄ + Δ_k "
              "(numpy's eigvals; scipy's with no checks and no copy for comparison)."]  # fmt: skip
    write_text(out, "\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    ap = parser(out=RESULTS / "replicates.json")
    ap.add_argument("--d", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--K", type=int, default=4, help="replicates timed per case (a table has K = n_groups)")
    ap.add_argument("--render", action="store_true", help="only rewrite the .md from the .json")
    args = ap.parse_args()
    out = args.out
    if args.render:
        return render(json.loads(out.read_text()), out.with_suffix(".md"))
    rng = np.random.default_rng(0)
    res = {"machine": processor(),
           "threads": os.environ.get("OPENBLAS_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "unset")),
           "K_timed": args.K, "cases": []}  # fmt: skip
    for d in args.d:
        for kind in ("generic", "near-normal"):
            J, deltas = synthetic(d, kind, args.K, rng)
            tol = rank_tolerance(d, "float32", None)
            dec = decompose(J)
            old, new = before.LinearSpectra(J, dec, tol, 64), after.LinearSpectra(J, dec, tol, 64)
            t_old, t_new, r_old, r_new = interleaved(old, new, deltas)
            worst = max(abs(a[m] - b[m]) / max(abs(a[m]), 1e-300) for a, b in zip(r_old, r_new) for m in a)
            case = {"d": d, "kind": kind, "henrici": new.henrici, "r_upper": int(new.eigen.upper.sum()),
                    "before_s": t_old, "after_s": t_new, "ratio": t_old / t_new, "max_rel_diff": worst}  # fmt: skip
            if kind == "near-normal":
                J1 = J + deltas[0].astype(np.float64)
                e_np, case["eigvals_numpy_s"] = timed(np.linalg.eigvals, J1)
                e_sp, case["eigvals_scipy_s"] = timed(
                    lambda: scipy.linalg.eigvals(J1.copy(), overwrite_a=True, check_finite=False)  # noqa: B023
                )
                s_np, s_sp = float(np.sum(np.abs(e_np) ** 2)), float(np.sum(np.abs(e_sp) ** 2))
                case["sum_abs2_rel_diff"] = abs(s_np - s_sp) / s_np
            case["loadavg"] = os.getloadavg()[0]
            res["cases"].append(case)
            print(json.dumps(case), flush=True)
    write_json(out, res, indent=1)
    render(res, out.with_suffix(".md"))


if __name__ == "__main__":
    main()
