"""Rates and peak memory of the spectral table and topology jobs, for their `runtime` and `mem_mb` (run by hand).

The constants of ``layergeom.resources`` (RATES, the d² memory counts) cite this bench. Each job's function runs
in a fresh process on a synthetic checkpoint (``make_checkpoint``: attention-like boundaries of rank d/4 and
MLP-like ones alternating, ``bench_long_jobs.attention_boundary`` and ``boundary``; 16 float32 group means of
1000 windows × 127 tokens) with the schema's default settings, at small widths:

- seconds per boundary of write_spectra, write_cumulative, write_schur (their whole loop over `--boundaries`
  boundaries, the first of which multiplies nothing), fitted as c2·d² + c3·d³ over `--dims` (the d³ LAPACK
  calls and products dominate at papers' widths, the O(d²) and per-call overheads at small d); of
  write_convergence on 18 boundaries with n_edge 1 and 4 (3 and 9 edge boundaries: the plain and the extra
  edge cost per boundary and subset size);
- topology: ``boundary_topology`` on a float32 memmap of `--tokens` rows, fitted as c1·d + c_t·tokens·d²;
  coupling: one ``spearman_permutation`` of 1000 permutations (s ÷ permutations·d, at the largest d);
- peak RSS (``ru_maxrss``) of each job's process minus its RSS after the imports, against
  ``layergeom.resources``' ``spectral_jobs.spectra_bytes`` / ``schur_jobs.schur_chain_bytes`` /
  ``topology_jobs.topology_graph_bytes``, at `--mem-dims`: the
  single jobs, and the fanned-out Schur jobs (a prep per boundary; one chain of each cost class from them).

The rates are then anchored at the papers' width (``anchor_rates``: bench/results/long_jobs.json). ``--stages``
measures some stages again and keeps the result file's other rows (``remeasured`` names them).

Writes bench/results/resources_rates.json. Threads: one BLAS thread per job (THREAD_VARS): a job with more runs
faster than its runtime says.

    OMP_WAIT_POLICY=PASSIVE python bench/resources_rates.py [--dims 256 512 768] [--mem-dims 512 1024]
        [--stages spectra_schur spectra_cumulative ...] [--refit]
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import RESULTS, ROOT, machine, parser, save_boundary, schema_defaults, write_json
from long_jobs_plan import advance_seconds

#: one BLAS thread: reproducible on a shared machine (many threads on few busy cores time the scheduler, not the
#: job) and conservative for a job with more threads
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
STAGES = ("spectra_table", "spectra_cumulative", "spectra_schur", "spectra_convergence")
#: the fanned-out Schur jobs whose memory is measured at --mem-dims (a prep per boundary; a chain of each class)
SCHUR_JOBS = ("spectra_schur_prep", "spectra_schur_chain")
N_GROUPS = 16
#: the d = 4096 measurements the rates are anchored at (``anchor_rates``)
LONG_JOBS = RESULTS / "long_jobs.json"
COUNTS = [63 * 127 if i < 8 else 62 * 127 for i in range(N_GROUPS)]  # 1000 windows in 16 blocks, 127 tokens each


def rss_mb() -> float:
    """Peak RSS of this process so far (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KB


def current_rss_mb() -> float:
    """RSS of this process now (MB; Linux)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6 * 1e6 / 2**20


def make_checkpoint(folder: Path, d: int, n: int) -> list[str]:
    """n boundaries of width d in `folder` (J̄, group means, meta), alternating an attention-like and an MLP-like
    one (``bench_long_jobs.attention_boundary``, ``boundary``): the `update` products are low rank from the second
    attention boundary on, as in a real chain."""
    import numpy as np
    from bench_long_jobs import attention_boundary, boundary

    names = [f"L{i // 2}.{'attn' if i % 2 == 0 else 'mlp'}" for i in range(n)]
    counts = np.asarray(COUNTS, dtype=np.int64)
    for i, name in enumerate(names):
        mean, groups = attention_boundary(d, counts, seed=i)[:2] if i % 2 == 0 else boundary(d, counts, seed=i)
        save_boundary(folder, name, mean, groups, counts)
    return names


def schur_kwargs(s: dict) -> dict:
    """The Schur jobs' settings (as scripts/spectra_schur*.py pass them) from a spectra section."""
    return {"alphas": s["alphas"], "seed": 0, "orders": s["schur_orders"], "order_alphas": s["schur_order_alphas"],
            "dtype": s["dtype"], "rank_tol": s["rank_tol"], "ci_blocks": s["schur_ci_blocks"],
            "ci_controls": s["schur_ci_controls"]}  # fmt: skip


def schur_chain_examples(s: dict) -> dict:
    """{cost class: its first chain's name} of the Schur plan (``resources.schur_jobs.schur_chain_class``)."""
    from layergeom.resources import schur_jobs
    from layergeom.spectral.settings import schur_chain_name, schur_chains

    out = {}
    for ch in schur_chains(s["alphas"], s["schur_orders"], order_alphas=s["schur_order_alphas"]):
        out.setdefault(schur_jobs.schur_chain_class(s, ch), schur_chain_name(ch))
    return out


def child(stage: str, folder: str, n: int, n_edge: int = 4) -> None:
    """One job in this process: prints {"seconds", "rss_base_mb", "rss_peak_mb"}. ``spectra_schur_prep``: a prep
    job per boundary (blocks of one, in turn: one boundary's peak); ``spectra_schur_chain:<chain>``: that chain's
    job through every boundary, from the preps' arrays."""
    import numpy as np  # noqa: F401
    import pandas  # noqa: F401
    import scipy.linalg  # noqa: F401

    from layergeom.spectral.jobs.common import BoundaryFiles
    from layergeom.spectral.jobs.convergence import write_convergence
    from layergeom.spectral.jobs.cumulative import write_cumulative
    from layergeom.spectral.jobs.schur import write_schur, write_schur_chain, write_schur_prep
    from layergeom.spectral.jobs.table import write_spectra

    base = current_rss_mb()  # after the imports (their transient peak may exceed it: small jobs read low)
    f = Path(folder)
    s = schema_defaults("spectra")
    if stage.startswith("spectra"):
        names = json.loads((f / "names.json").read_text())[:n]

        def files(bs):
            return BoundaryFiles(bs, [f / f"{b}.npy" for b in bs], [f / f"{b}.groups.npy" for b in bs],
                                 [f / f"{b}.json" for b in bs])  # fmt: skip

        out = f / f"{stage}.tsv"
        prep = [f / "prep" / f"{k}.npz" for k in range(len(names))]
        t = time.perf_counter()
        if stage == "spectra_table":
            write_spectra(files(names), out, f / "eig.tsv", sr_k=s["sr_k"], dtype=s["dtype"],
                          rank_tol=s["rank_tol"], ci_level=s["ci_level"], ci_method=s["ci_method"],
                          ci_blocks=s["ci_blocks"])  # fmt: skip
        elif stage == "spectra_cumulative":
            write_cumulative(files(names), out, ci_level=s["ci_level"], ci_blocks=s["ci_blocks"])
        elif stage == "spectra_schur":
            kw = schur_kwargs(s)
            write_schur(files(names), out, dtype=kw.pop("dtype"), rank_tol=kw.pop("rank_tol"),
                        ci_level=s["ci_level"], ci_blocks=kw.pop("ci_blocks"),
                        ci_controls=kw.pop("ci_controls"), sr_k=s["sr_k"],
                        boundary_metrics=s["schur_boundary_metrics"], **kw)  # fmt: skip
        elif stage == "spectra_schur_prep":
            (f / "prep").mkdir(exist_ok=True)
            for k, name in enumerate(names):
                write_schur_prep(files([name]), prep[k].with_suffix(".pkl"), prep[k], first=k,
                                 sr_k=s["sr_k"], boundary_metrics=s["schur_boundary_metrics"],
                                 **schur_kwargs(s))  # fmt: skip
        elif stage.startswith("spectra_schur_chain:"):
            chain = stage.split(":", 1)[1]
            write_schur_chain(files(names), prep, [[b] for b in names], f / f"{chain}.pkl", chain=chain,
                              ci_level=s["ci_level"], **schur_kwargs(s))  # fmt: skip
        else:
            write_convergence(files(names), out, sizes=s["convergence_sizes"], n_edge=n_edge, sr_k=s["sr_k"],
                              dtype=s["dtype"], rank_tol=s["rank_tol"], ci_level=s["ci_level"])  # fmt: skip
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
                         capture_output=True, text=True, env=env)  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"{stage} at {folder} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
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
    ``convergence_final`` (the final boundary's erank SVDs per size, as c3), ``cumulative_variants`` (each
    variant's share of the cumulative table's d³ term: its job's step less the deviations, over the two
    variants' together) and ``schur_steps`` (seconds per d³ at the bench's K tangents and width d: a Schur prep
    per boundary; a run chain's step per class ``{real|tangents|plain}_{update|full}``; an order's parts,
    ``order_basis`` (J₀^π) and per α ``order_update``, ``order_full``; ``advance_<base>``, a step's products
    alone, what a chain segment's job runs through the depths before its own, ``advance_order`` at one α).
    """
    res, d = long["results"], int(long["d"])
    key = str(d)
    out = dict(rates)
    out["spectra_table"] = _reach(rates["spectra_table"], d, res["spectra_table"][key]["boundary_s"])
    cum = res["spectra_cumulative"][key]
    out["spectra_cumulative"] = _reach(rates["spectra_cumulative"], d, cum["boundary_s"])
    own = {v: cum["variant_s"][v] - cum["deviations_s"][v] for v in cum["variant_s"]}  # the products and SVDs
    out["cumulative_variants"] = {v: _ceil3(s / sum(own.values())) for v, s in sorted(own.items())}
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
    order = sch["order_s"]  # J₀^π, and per α each variant's product and singular values
    steps = {cls: s for cls, s in sch["step_s"].items() if cls != "order"} | {"prep": sch["prep_s"]}
    steps |= {"order_basis": order["basis"], "order_update": order["update"], "order_full": order["full"]}
    adv = sch["advance_s"]  # a chain segment's prefix: a step's products without their singular values
    steps |= {f"advance_{base}": s for base, s in adv.items() if base != "order"}
    steps["advance_order"] = advance_seconds(sch, "order")  # at one α: at least J₀^π
    out["schur_steps"] = {"K": int(sch["K"]), "d": d} | {k: _ceil3(v / d**3) for k, v in sorted(steps.items())}
    return out


def main():
    ap = parser()
    ap.add_argument("--dims", type=int, nargs="+", default=[256, 512, 768])
    ap.add_argument("--mem-dims", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--boundaries", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--stages", nargs="+", default=[*STAGES, *SCHUR_JOBS, "topology_graph", "coupling"],
                    help="measure these only; the result file's other timings and memory rows are kept")  # fmt: skip
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
    path = RESULTS / "resources_rates.json"
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
        write_json(path, out, indent=1)
        return print(json.dumps(out["rates"], indent=1))
    from bench_topology import synthetic_states

    spectra = schema_defaults("spectra")
    stages = set(a.stages)
    unknown = stages - {*STAGES, *SCHUR_JOBS, "topology_graph", "coupling"}
    if unknown:
        raise SystemExit(f"--stages: no stage {sorted(unknown)}")
    out = {"machine": machine("cpus", "platform", "numpy", load_start="load_average"),
           "settings": {"n_groups": N_GROUPS, "group_counts": COUNTS, "boundaries": a.boundaries,
                        "tokens": a.tokens, "spectra": "schema defaults", "blas_threads": 1,
                        "checkpoint": "attention (rank d/4) and MLP boundaries alternating"},
           "timings": {}, "memory": {}}  # fmt: skip
    if path.exists() and stages != set(ap.get_default("stages")):  # a part: the other stages' rows are kept
        old = json.loads(path.read_text())
        out["timings"] = {k: v for k, v in old["timings"].items() if k not in stages}
        out["memory"] = {k: v for k, v in old["memory"].items() if k.split(":")[0] not in stages}
        out["remeasured"] = {"stages": sorted(stages), "earlier": old.get("remeasured"),
                             "earlier_machine": old["machine"]}  # fmt: skip
    conv_n = 18
    chains = schur_chain_examples(spectra)
    for d in sorted(set(a.dims) | set(a.mem_dims)):
        timed, mem = d in a.dims, d in a.mem_dims
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            names = make_checkpoint(folder, d, conv_n if timed else a.boundaries)
            (folder / "names.json").write_text(json.dumps(names))
            synthetic_states(folder / "states.npy", a.tokens, d)
            runs = [(s, a.boundaries, 4) for s in STAGES[:3]]
            runs += [("spectra_convergence", conv_n, 1), ("spectra_convergence", conv_n, 4)] if timed else []
            runs += [("topology_graph", 1, 4)] + ([("coupling", d, 4)] if timed else [])
            if mem:  # the fanned-out Schur jobs' memory: the preps, then each class's chain from them
                runs += [("spectra_schur_prep", a.boundaries, 4)]
                runs += [(f"spectra_schur_chain:{name}", a.boundaries, 4) for name in chains.values()]
            for stage, n, n_edge in runs:
                job = stage.split(":")[0]
                if job not in stages or (not timed and stage == "spectra_cumulative"):
                    continue
                r = run_child(stage, folder, n, n_edge) | {"d": d, "boundaries": n, "n_edge": n_edge}
                if stage == "topology_graph":
                    r["tokens"] = a.tokens
                print(stage, json.dumps(r), flush=True)
                if timed and job not in SCHUR_JOBS:
                    out["timings"].setdefault(stage, []).append(r)
                if mem and stage != "coupling" and not (stage == "spectra_convergence" and n_edge == 1):
                    pred, req = predicted_memory(stage, d, n, spectra, a.tokens)
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
    write_json(path, out, indent=1)
    print(json.dumps(out["rates"], indent=1))
    print(json.dumps(out["memory"], indent=1))


def predicted_memory(stage: str, d: int, n: int, spectra: dict, tokens: int) -> tuple[float, int]:
    """(predicted MB above the interpreter, requested mem_mb) of a job (``layergeom.resources``)."""
    from layergeom.resources import schur_jobs, spectral_jobs, topology_jobs
    from layergeom.spectral.settings import schur_chain_name, schur_chains

    if stage.startswith("spectra_schur_chain:"):
        plan = {schur_chain_name(c): c for c in schur_chains(spectra["alphas"], spectra["schur_orders"],
                                                             order_alphas=spectra["schur_order_alphas"])}  # fmt: skip
        chain = plan[stage.split(":", 1)[1]]
        return schur_jobs.schur_chain_bytes(d, N_GROUPS, spectra, chain) / 1e6, schur_jobs.schur_chain_mem_mb(
            d, N_GROUPS, spectra, chain
        )
    if stage.startswith("spectra"):
        return spectral_jobs.spectra_bytes(stage, d, N_GROUPS, spectra, n) / 1e6, spectral_jobs.spectra_mem_mb(
            stage, d, N_GROUPS, spectra, n
        )
    return topology_jobs.topology_graph_bytes(d, tokens) / 1e6, topology_jobs.topology_graph_mem_mb(d, tokens)


if __name__ == "__main__":
    main()
