"""Benchmark of the Paper B topology stage on synthetic activations (run by hand).

    python bench/bench_topology.py [--dims 576 4096] [--tokens 8192]

For each d: a float32 activation memmap of `tokens` rows from a signed factor model (communities of units
driven by shared latents with random signs), then the whole per-boundary graph job (streamed correlations
by chunked float64 matrix products, top-k, signed Leiden CPM, participation) and the per-boundary share of
the coupling job (amplification variants, three permutation tests). The Henrici departure by eigvals is timed
too, to show what the coupling job saves by reading it from spectra.tsv instead of recomputing it.
Writes bench/results/topology.json and .md.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
from harness import RESULTS, machine, parser, seconds, timed, write_json, write_text

from layergeom import config as lgconfig
from layergeom.topology.communities import participation, signed_leiden
from layergeom.topology.coupling import (
    AMPLIFICATIONS,
    amplification,
    permutation_count,
    spearman_permutation,
)
from layergeom.topology.graphs import streamed_correlation, topk_graph

#: boundaries of an 8B checkpoint (Llama-3.1-8B, OLMo-3-7B: 32 blocks x attn, mlp): the default permutation count
PAPERS_BOUNDARIES = 64


def n_permutations(cfg: dict) -> int:
    """The permutations per test the coupling job runs by default at papers scale (topology.n_permutations)."""
    return permutation_count(PAPERS_BOUNDARIES, cfg["fdr_q"], cfg["n_permutations"])


def synthetic_states(path: Path, n: int, d: int, seed: int = 0, chunk: int = 2048) -> np.ndarray:
    """(n, d) float32 memmap: unit j = s_j · z_{g(j)} + 0.3 · z_{h(j)} + noise, d/16 latent groups."""
    rng = np.random.default_rng(seed)
    n_groups = max(2, d // 16)
    g, h = rng.integers(0, n_groups, d), rng.integers(0, n_groups, d)
    s = rng.choice([-1.0, 1.0], d)
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        z = rng.normal(size=(m, n_groups))
        mm[start : start + m] = s * z[:, g] + 0.3 * z[:, h] + rng.normal(size=(m, d))
    mm.flush()
    return np.load(path, mmap_mode="r")


def bench(d: int, tokens: int, cfg: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        states = synthetic_states(Path(tmp) / "s.npy", tokens, d)
        mask = np.arange(tokens) % 128 != 0  # drop the BOS row of every 128-token window
        t = {}
        corr, t["correlation_s"] = timed(streamed_correlation, states, mask, cfg["chunk_tokens"])
    graph, t["topk_s"] = timed(topk_graph, corr, cfg["top_k"])
    del corr
    comm, t["leiden_s"] = timed(signed_leiden, graph, cfg["resolution"], cfg["negative_resolution"],
                                cfg["leiden"]["n_iterations"], 0)  # fmt: skip
    p, t["participation_s"] = timed(participation, graph, comm.membership)
    t["graph_job_s"] = sum(t.values())
    rng = np.random.default_rng(1)
    J = rng.normal(size=(d, d)) / np.sqrt(d)  # a stand-in J̄_b

    def coupling():
        for vi, v in enumerate(AMPLIFICATIONS):
            spearman_permutation(p, amplification(J, v), n_permutations(cfg), np.random.default_rng([0, vi]))

    t["coupling_permutations_s"] = seconds(coupling)  # the coupling job's work per boundary (its
    # Henrici departures come from the spectra table, computed there from the eigendecomposition)
    info = {"d": d, "tokens": tokens, "edges_pos": int(graph.positive.sum()), "edges_neg": int(graph.negative.sum()),
            "communities": comm.n_communities}  # fmt: skip
    return info | {k: round(v, 3) for k, v in t.items()}


def main():
    ap = parser()
    ap.add_argument("--dims", type=int, nargs="+", default=[576, 4096])
    ap.add_argument("--tokens", type=int, default=8192)
    args = ap.parse_args()
    cfg = lgconfig.validate({"models": {"m": {"source": "config", "family": "llama", "hf_config": {},
                                              "checkpoints": {"init": None}}}})["topology"]  # fmt: skip

    def graph_libraries():  # their import time, which each graph job pays
        import igraph  # noqa: F401
        import leidenalg  # noqa: F401

    imports = seconds(graph_libraries)
    rows = [bench(d, args.tokens, cfg) | {"load_avg_1min_after": round(os.getloadavg()[0], 2)} for d in args.dims]
    mach = machine("platform", "processor", "cpus", "python", "numpy")
    out = {"machine": mach, "config": cfg, "graph_library_imports_s": round(imports, 3), "results": rows}
    write_json(RESULTS / "topology.json", out)
    cols = ["d", "tokens", "edges_pos", "edges_neg", "communities", "correlation_s", "topk_s", "leiden_s",
            "participation_s", "graph_job_s", "coupling_permutations_s", "load_avg_1min_after"]  # fmt: skip
    md = [f"# Topology stage benchmark\n\nMachine: {mach['cpus']} CPUs, {mach['platform']}, numpy "
          f"{mach['numpy']}. Defaults: top_k={cfg['top_k']}, γ={cfg['resolution']}, "
          f"n_permutations={n_permutations(cfg)} (the default for {PAPERS_BOUNDARIES} boundaries at q={cfg['fdr_q']}, "
          f"every permutation run: no early stop), chunk_tokens={cfg['chunk_tokens']}. The machine is shared: "
          "a 1-min load average above the CPU count means the times are inflated by contention.\n",
          "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]  # fmt: skip
    md += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    write_text(RESULTS / "topology.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
