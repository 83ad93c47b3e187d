"""Rates and peak memory of the spectral table and topology jobs, for their `runtime` and `mem_mb` (run by hand).

The constants of ``layergeom.resources`` (RATES, the d² memory counts) cite this bench. Each job's function runs
in a fresh process on a synthetic checkpoint (``bench_long_jobs.boundary``: J̄ = Gaussian bulk + rank-32 part,
16 float32 group means of 1000 windows × 127 tokens) with the schema's default settings, at two small widths:

- seconds per boundary of write_spectra, write_cumulative, write_schur (their whole loop over `--boundaries`
  boundaries, the first of which multiplies nothing), fitted as c2·d² + c3·d³ over `--dims` (the d³ LAPACK
  calls and products dominate at papers' widths, the O(d²) and per-call overheads at small d); of
  write_convergence on 18 boundaries with n_edge 1 and 4 (3 and 9 edge boundaries: the plain and the extra
  edge cost per boundary and subset size);
- topology: ``boundary_topology`` on a float32 memmap of `--tokens` rows, fitted as c1·d + c_t·tokens·d²;
  coupling: one ``spearman_permutation`` of 1000 permutations (s ÷ permutations·d, at the largest d);
- peak RSS (``ru_maxrss``) of each job's process minus its RSS after the imports, against
  ``layergeom.resources.spectra_bytes`` / ``topology_graph_bytes``, at `--mem-dims`.

Writes bench/results/resources_rates.json. Threads: one BLAS thread per job (THREAD_VARS): a job with more runs faster than its runtime says.

    OMP_WAIT_POLICY=PASSIVE python bench/resources_rates.py [--dims 256 512 768] [--mem-dims 512 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

#: one BLAS thread: reproducible on a shared machine (many threads on few busy cores time the scheduler, not the
#: job) and conservative for a job with more threads
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
STAGES = ("spectra_table", "spectra_cumulative", "spectra_schur", "spectra_convergence")
N_GROUPS = 16
#: the d = 4096 measurements the rates are anchored at (``anchor_rates``)
LONG_JOBS = ROOT / "bench" / "results" / "long_jobs.json"
COUNTS = [63 * 127 if i < 8 else 62 * 127 for i in range(N_GROUPS)]  # 1000 windows in 16 blocks, 127 tokens each


def rss_mb() -> float:
    """Peak RSS of this process so far (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KB


def current_rss_mb() -> float:
    """RSS of this process now (MB; Linux)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6 * 1e6 / 2**20


def make_checkpoint(folder: Path, d: int, n: int) -> list[str]:
    import numpy as np
    from bench_long_jobs import boundary

    names = [f"L{i}.mlp" for i in range(n)]
    counts = np.asarray(COUNTS, dtype=np.int64)
    for i, name in enumerate(names):
        mean, groups = boundary(d, counts, seed=i)
        np.save(folder / f"{name}.npy", mean)
        np.save(folder / f"{name}.groups.npy", groups)
        (folder / f"{name}.json").write_text(json.dumps({"n_samples": int(counts.sum()), "group_counts": COUNTS}))
    return names


def child(stage: str, folder: str, n: int, n_edge: int = 4) -> None:
    """One job in this process: prints {"seconds", "rss_base_mb", "rss_peak_mb"}."""
    import numpy as np  # noqa: F401
    import pandas  # noqa: F401
    import scipy.linalg  # noqa: F401

    from layergeom.spectral import pipeline

    base = current_rss_mb()  # after the imports (their transient peak may exceed it: small jobs read low)
    f = Path(folder)
    if stage.startswith("spectra"):
        names = [f"L{i}.mlp" for i in range(n)]
        files = pipeline.BoundaryFiles(names, [f / f"{b}.npy" for b in names], [f / f"{b}.groups.npy" for b in names],
                                       [f / f"{b}.json" for b in names])  # fmt: skip
        out = f / f"{stage}.tsv"
        t = time.perf_counter()
        if stage == "spectra_table":
            pipeline.write_spectra(files, out, f / "eig.tsv")
        elif stage == "spectra_cumulative":
            pipeline.write_cumulative(files, out)
        elif stage == "spectra_schur":
            pipeline.write_schur(files, out, seed=0)
        else:
            pipeline.write_convergence(files, out, n_edge=n_edge)
    elif stage == "topology_graph":
        from layergeom.topology.communities import boundary_topology

        states = np.load(f / "states.npy", mmap_mode="r")
        mask = np.arange(len(states)) % 128 != 0
        cfg = {"top_k": 20, "chunk_tokens": 4096, "resolution": 0.05, "negative_resolution": 0.0,
               "resolution_sweep": [], "boundary_percentile": 80.0,
               "leiden": {"seed": None, "n_iterations": -1}}  # fmt: skip
        t = time.perf_counter()
        boundary_topology(states, mask, cfg, 0)
    else:  # coupling: one permutation test of 1000 permutations of n units
        from layergeom.topology.coupling import spearman_permutation

        rng = np.random.default_rng(0)
        x, y = rng.standard_normal(n), rng.standard_normal(n)
        t = time.perf_counter()
        spearman_permutation(x, y, 1000, np.random.default_rng(1))
    print(json.dumps({"seconds": time.perf_counter() - t, "rss_base_mb": base, "rss_peak_mb": rss_mb()}))


def run_child(stage: str, folder: Path, n: int, n_edge: int = 4) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **{k: "1" for k in THREAD_VARS}}
    out = subprocess.run([sys.executable, __file__, "--child", stage, str(folder), str(n), str(n_edge)],
                         capture_output=True, text=True, env=env, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def fit_d2_d3(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Non-negative least squares of seconds = c2·d² + c3·d³ over (d, seconds) points (relative errors)."""
    import numpy as np
    from scipy.optimize import nnls

    d = np.array([p[0] for p in points], dtype=np.float64)
    t = np.array([p[1] for p in points], dtype=np.float64)
    A = np.stack([d**2, d**3], axis=1) / t[:, None]
    c, _ = nnls(A, np.ones_like(t))
    return float(f"{c[0]:.3g}"), float(f"{c[1]:.3g}")


def fit_topology(runs: list[dict]) -> tuple[float, float]:
    """Non-negative least squares of a graph's seconds = c1·d + c_t·tokens·d² (the signed Leiden passes over the
    ~d·top_k edges, the streamed correlation), relative errors."""
    import numpy as np
    from scipy.optimize import nnls

    d = np.array([r["d"] for r in runs], dtype=np.float64)
    n = np.array([r["tokens"] for r in runs], dtype=np.float64)
    t = np.array([r["seconds"] for r in runs], dtype=np.float64)
    c, _ = nnls(np.stack([d, n * d**2], axis=1) / t[:, None], np.ones_like(t))
    return float(f"{c[0]:.3g}"), float(f"{c[1]:.3g}")


def fit_rates(T: dict, dims: list[int], conv_n: int = 18) -> dict:
    """RATES of layergeom.resources from the timings: (c2, c3) per stage, (c1, c_t) of the graph
    (``fit_topology``), the permutation test's seconds per permutation·unit at the largest d."""
    rates = {}
    for stage in STAGES[:3]:
        rates[stage] = fit_d2_d3([(r["d"], r["seconds"] / r["boundaries"]) for r in T[stage]])
    # convergence, per subset size (4 of 16 groups): 18 boundaries with 3 edge ones (n_edge 1), then 9 (n_edge 4)
    plain, edge = [], []
    for d in dims:
        t1, t4 = (next(r["seconds"] for r in T["spectra_convergence"] if r["d"] == d and r["n_edge"] == e)
                  for e in (1, 4))  # fmt: skip
        e = max(t4 - t1, 0.0) / (6 * 4)
        plain.append((d, max(t1 / 4 - 3 * e, 0.0) / conv_n))
        edge.append((d, e))
    rates["convergence_plain"], rates["convergence_edge"] = fit_d2_d3(plain), fit_d2_d3(edge)
    rates["topology_graph"] = fit_topology(T["topology_graph"])
    perm = max(T["coupling"], key=lambda r: r["d"])
    rates["coupling_perm_d"] = float(f"{perm['seconds'] / (1000 * perm['d']):.3g}")
    return rates


def _3g(x: float) -> float:
    return float(f"{x:.3g}")


def _ceil3(x: float) -> float:
    """The smallest number of 3 significant digits ≥ x > 0."""
    import math

    step = 10.0 ** (math.floor(math.log10(x)) - 2)
    return float(f"{math.ceil(x / step - 1e-9) * step:.3g}")


def _reach(c: tuple[float, float], d: int, seconds: float) -> tuple[float, float]:
    """(c2, c3) with c3 raised (rounded up) so that c2·d² + c3·d³ ≥ `seconds` at d; unchanged where it is already."""
    c2, c3 = c
    if c2 * d**2 + c3 * d**3 >= seconds:
        return c2, c3
    return c2, _ceil3((seconds - c2 * d**2) / d**3)


def _envelope(points: dict) -> tuple[float, float]:
    """(b, a) of the least-squares slope b of seconds against S and the intercept a that puts every point on or
    below a + b·S (an upper envelope of the per-subset-size seconds)."""
    S = sorted(int(k) for k in points)
    t = [points[str(s)] for s in S]
    ms, mt = sum(S) / len(S), sum(t) / len(t)
    b = max(0.0, sum((s - ms) * (v - mt) for s, v in zip(S, t)) / sum((s - ms) ** 2 for s in S))
    return b, max(v - b * s for s, v in zip(S, t))


def anchor_rates(rates: dict, long: dict) -> dict:
    """The rates, anchored at the papers' width: bench/bench_long_jobs.py's d = 4096 measurements
    (bench/results/long_jobs.json, one boundary of each job on this machine's two cores). The small-d fit
    alone falls short there for some stages (the d³ LAPACK calls and products dominate at d = 4096, the
    per-call overheads at d ≤ 768), and a job that asks for less than it takes is killed at its time limit:
    each (c2, c3) gets the d³ term that reaches the d = 4096 time.

    Adds what the fanned-out jobs need: ``convergence_groups`` (a subset size's seconds grow with its S groups:
    (offset_plain, offset_edge, mean_size): a size's share is (S + offset)/(mean_size + offset) of the rate, the
    rate being the mean over the bench's sizes; from an upper envelope of the d = 4096 seconds per size),
    ``convergence_final`` (the final boundary's erank SVDs per size, as c3) and ``schur_steps`` (seconds per d³
    of a Schur prep per boundary and of one chain step per cost class, at the bench's K tangents and width d; an
    order's step per α < 1; ``advance_<class>``: a step's products alone, what a chain segment's job runs through
    the depths before its own, where measured: ``--jobs schur_advance`` of bench_long_jobs.py).
    """
    res, d = long["results"], int(long["d"])
    key = str(d)
    out = dict(rates)
    out["spectra_table"] = _reach(rates["spectra_table"], d, res["spectra_table"][key]["boundary_s"])
    out["spectra_cumulative"] = _reach(rates["spectra_cumulative"], d, res["spectra_cumulative"][key]["boundary_s"])
    sch = res["spectra_schur_chains"][key]
    out["spectra_schur"] = _reach(rates["spectra_schur"], d, sch["boundary_s"])
    topo = res["topology_graph"][key]
    c1, ct = rates["topology_graph"]
    if c1 * d + ct * topo["tokens"] * d**2 < topo["boundary_s"]:  # the streamed correlation: the tokens·d² term
        out["topology_graph"] = (c1, _ceil3((topo["boundary_s"] - c1 * d) / (topo["tokens"] * d**2)))
    conv = res["spectra_convergence"][key]
    plain = conv["plain_s"]
    extra = {s: conv["edge_s"][s] - plain[s] for s in plain}
    mean_size = sum(conv["sizes"]) / len(conv["sizes"])
    (bp, ap), (be, ae) = _envelope(plain), _envelope(extra)
    out["convergence_plain"] = _reach(rates["convergence_plain"], d, ap + bp * mean_size)
    out["convergence_edge"] = _reach(rates["convergence_edge"], d, ae + be * mean_size)
    off = [_3g(a / b) if b > 0 else 1e6 for a, b in ((ap, bp), (ae, be))]
    out["convergence_groups"] = (off[0], off[1], _3g(mean_size))
    out["convergence_final"] = _reach((0.0, 0.0), d, conv["final_extra_s"])
    n_order = sum(1 for a in long["config"]["alphas"] if float(a) < 1)
    steps = dict(sch["step_s"], order=sch["step_s"]["order"] / n_order, prep=sch["prep_s"])
    if "advance_s" in sch:  # a chain segment's prefix: the products of a step without its SVD, per class
        adv = dict(sch["advance_s"], order=sch["advance_s"]["order"] / n_order)
        steps |= {f"advance_{k}": v for k, v in adv.items()}
    out["schur_steps"] = {"K": int(sch["K"]), "d": d} | {k: _ceil3(v / d**3) for k, v in sorted(steps.items())}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", type=int, nargs="+", default=[256, 512, 768])
    ap.add_argument("--mem-dims", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--boundaries", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--child", nargs=4)
    ap.add_argument("--refit", action="store_true", help="recompute the rates from the result file's timings")
    ap.add_argument(
        "--topology-tokens",
        type=int,
        nargs="*",
        default=[],
        help="with --refit: also time the graph job at these token counts (at d = 512, 1024) first",
    )
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], a.child[1], int(a.child[2]), int(a.child[3]))
    path = ROOT / "bench" / "results" / "resources_rates.json"
    if a.refit:
        out = json.loads(path.read_text())
        for r in out["timings"]["topology_graph"]:
            r.setdefault("tokens", out["settings"]["tokens"])
        from bench_topology import synthetic_states

        for d in (512, 1024) if a.topology_tokens else ():
            for n in a.topology_tokens:
                with tempfile.TemporaryDirectory() as tmp:
                    synthetic_states(Path(tmp) / "states.npy", n, d)
                    r = run_child("topology_graph", Path(tmp), 1) | {"d": d, "boundaries": 1, "tokens": n}
                print("topology_graph", json.dumps(r), flush=True)
                out["timings"]["topology_graph"].append(r)
        out["rates"] = fit_rates(out["timings"], sorted({r["d"] for r in out["timings"]["spectra_table"]}))
        out["rates"] = anchor_rates(out["rates"], json.loads(LONG_JOBS.read_text()))
        path.write_text(json.dumps(out, indent=1) + "\n")
        return print(json.dumps(out["rates"], indent=1))
    import numpy as np
    from bench_topology import synthetic_states

    from layergeom import config as lgconfig
    from layergeom import resources as R

    spectra = {k: v["default"] for k, v in lgconfig.load_schema("spectra")["properties"].items() if "default" in v}
    out = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "numpy": np.__version__,
                       "load_start": os.getloadavg()},
           "settings": {"n_groups": N_GROUPS, "group_counts": COUNTS, "boundaries": a.boundaries,
                        "tokens": a.tokens, "spectra": "schema defaults", "blas_threads": 1},
           "timings": {}, "memory": {}}  # fmt: skip
    conv_n = 18
    for d in sorted(set(a.dims) | set(a.mem_dims)):
        timed, mem = d in a.dims, d in a.mem_dims
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            make_checkpoint(folder, d, conv_n if timed else a.boundaries)
            synthetic_states(folder / "states.npy", a.tokens, d)
            runs = [(s, a.boundaries, 4) for s in STAGES[:3]]
            runs += [("spectra_convergence", conv_n, 1), ("spectra_convergence", conv_n, 4)] if timed else []
            runs += [("topology_graph", 1, 4)] + ([("coupling", d, 4)] if timed else [])
            for stage, n, n_edge in runs:
                if not timed and stage == "spectra_cumulative":
                    continue
                r = run_child(stage, folder, n, n_edge) | {"d": d, "boundaries": n, "n_edge": n_edge}
                if stage == "topology_graph":
                    r["tokens"] = a.tokens
                print(stage, json.dumps(r), flush=True)
                if timed:
                    out["timings"].setdefault(stage, []).append(r)
                if mem and stage != "coupling" and not (stage == "spectra_convergence" and n_edge == 1):
                    if stage.startswith("spectra"):
                        pred = R.spectra_bytes(stage, d, N_GROUPS, spectra, n) / 1e6
                        req = R.spectra_mem_mb(stage, d, N_GROUPS, spectra, n)
                    else:
                        pred = R.topology_graph_bytes(d, a.tokens) / 1e6
                        req = R.topology_graph_mem_mb(d, a.tokens)
                    meas = r["rss_peak_mb"] - r["rss_base_mb"]
                    out["memory"].setdefault(stage, []).append(
                        {
                            "d": d,
                            "boundaries": n,
                            "predicted_mb": round(pred, 1),
                            "measured_mb": round(meas, 1),
                            "rss_base_mb": round(r["rss_base_mb"], 1),
                            "ratio": round(meas / pred, 3),
                            "requested_mb": req,
                        }  # fmt: skip
                    )
    out["rates"] = anchor_rates(fit_rates(out["timings"], a.dims, conv_n), json.loads(LONG_JOBS.read_text()))
    out["machine"]["load_end"] = os.getloadavg()
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["rates"], indent=1))
    print(json.dumps(out["memory"], indent=1))


if __name__ == "__main__":
    main()
