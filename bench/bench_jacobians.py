"""Benchmark: batched exact sublayer Jacobians (torch.func) against the naive per-sample reference.

Run by hand from the repository root:

    python bench/bench_jacobians.py                 # SmolLM2-135M shapes, 2 threads
    python bench/bench_jacobians.py --threads 4 --n-samples 64

Model: a random-init Llama-family layer with SmolLM2-135M's shapes (d=576, d_ff=1536, 9 heads, 3 KV heads),
so no weights are needed. For each sublayer (attention, MLP) it measures

- the naive reference: ``torch.autograd.functional.jacobian`` per sample (d backward passes each), on a few
  samples, and our vmapped ``jacrev``/``jacfwd`` on the same samples (values must agree to 1e-5 relative);
- the per-sample time of our path on ``--n-samples`` samples (the chunk size of the workflow's default),
  and the time per boundary it implies for N = 64 (the default run's windows) and N = 256 (the default N);
- the FLOPs actually executed (torch.utils.flop_counter, i.e. every matmul of the vmapped autodiff) and the
  achieved rate as a fraction of this machine's fp32 GEMM rate measured in the same run on GEMMs of the
  shapes the MLP Jacobian uses.

Writes bench/results/jacobians.json and bench/results/jacobians.md.
"""

from __future__ import annotations

import json

import torch
from harness import RESULTS, best, machine_info, parser, timed, write_json, write_text
from shapes import SMOLLM2
from torch.utils.flop_counter import FlopCounterMode

from layergeom.adapters import get_adapter
from layergeom.models import build_random
from layergeom.spectral import jacobians as jac


def gemm_rate(m: int, k: int, n: int, repeats: int = 10) -> float:
    """fp32 GEMM rate (FLOP/s) of (m,k)@(k,n) on this machine, best of `repeats` after a warm-up."""
    A, B = torch.randn(m, k), torch.randn(k, n)
    return 2 * m * k * n / best(lambda: A @ B, repeats, warmup=True)[1]


def flops_per_call(fn) -> int:
    with FlopCounterMode(display=False) as fc:
        fn()
    return int(fc.get_total_flops())


def main(argv=None):
    ap = parser(__doc__, raw=True, out=RESULTS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-samples", type=int, default=32, help="samples timed on our batched path")
    ap.add_argument("--n-naive", type=int, default=3, help="samples timed on the naive per-sample path")
    ap.add_argument("--chunk-size", type=int, default=16)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    adapter = get_adapter(build_random("llama", {**SMOLLM2, "num_hidden_layers": args.layers}, seed=0))
    d = adapter.d_model
    x = torch.randn(args.n_samples, d) * 2.0  # (N, d) states; RMSNorm makes the scale irrelevant
    d_ff = SMOLLM2["intermediate_size"]
    c = args.chunk_size
    # the MLP Jacobian's GEMMs: (c·d, d) @ (d, d_ff) and (c·d, d_ff) @ (d_ff, d), for the rate reference
    peak_shapes = [(c * d, d, d_ff), (c * d, d_ff, d)]
    peak = max(gemm_rate(*s) for s in peak_shapes)  # measured again at the end; the larger rate is kept
    result = {
        "machine": machine_info(args.threads),
        "shapes": {"d": d, "d_ff": d_ff, "heads": 9, "kv_heads": 3, "chunk_size": c},
        "gemm_fp32_gflops": peak / 1e9,
        "boundaries": {},
    }
    for b in ("L0.attn", "L0.mlp"):
        xs = x[: args.n_naive]
        ref, t = timed(jac.naive_jacobians, adapter, b, xs)
        naive_per_sample = t / len(xs)
        rows = {}
        for mode in ("rev", "fwd"):
            ours = jac.isolated_jacobians(adapter, b, xs, mode=mode)
            err = float((ours - ref).abs().max() / ref.abs().max())

            def run(mode=mode, b=b):
                for s in range(0, len(x), c):
                    jac.isolated_jacobians(adapter, b, x[s : s + c], mode=mode)

            t = best(run, args.repeats, warmup=True)[1]
            per_sample = t / len(x)
            flops = flops_per_call(lambda mode=mode, b=b: jac.isolated_jacobians(adapter, b, x[:c], mode=mode)) / c
            rows[mode] = {
                "ms_per_sample": 1e3 * per_sample,
                "speedup_vs_naive": naive_per_sample / per_sample,
                "max_rel_diff_vs_naive": err,
                "gflop_per_sample": flops / 1e9,
                "gflops_achieved": flops / per_sample / 1e9,
                "fraction_of_gemm_rate": flops / per_sample / peak,
                "s_per_boundary_N64": 64 * per_sample,
                "s_per_boundary_N256": 256 * per_sample,
            }
        result["boundaries"][b] = {"naive_ms_per_sample": 1e3 * naive_per_sample, "modes": rows}
        print(b, json.dumps(result["boundaries"][b], indent=1), flush=True)

    peak_end = max(gemm_rate(*s) for s in peak_shapes)
    if peak_end > peak:  # the machine was busier at the start: rescale the fractions to the larger rate
        for r in result["boundaries"].values():
            for m in r["modes"].values():
                m["fraction_of_gemm_rate"] *= peak / peak_end
        peak = peak_end
    result["gemm_fp32_gflops"] = peak / 1e9
    out = args.out
    write_json(out / "jacobians.json", result)
    lines = [
        "# Jacobian benchmark (SmolLM2-135M shapes, random init)",
        "",
        f"Machine: {result['machine']['processor']}, {args.threads} threads, torch {torch.__version__}; "
        f"fp32 GEMM rate measured in the same run: {peak / 1e9:.1f} GFLOP/s.",
        "",
        "| boundary | mode | ms/sample | naive ms/sample | speed-up | max rel. diff | GFLOP/sample | GFLOP/s | "
        "% of GEMM | s/boundary N=64 | s/boundary N=256 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b, r in result["boundaries"].items():
        for mode, m in r["modes"].items():
            lines.append(
                f"| {b} | {mode} | {m['ms_per_sample']:.1f} | {r['naive_ms_per_sample']:.0f} | "
                f"{m['speedup_vs_naive']:.0f}× | {m['max_rel_diff_vs_naive']:.1e} | {m['gflop_per_sample']:.2f} | "
                f"{m['gflops_achieved']:.1f} | {100 * m['fraction_of_gemm_rate']:.0f} % | "
                f"{m['s_per_boundary_N64']:.1f} | {m['s_per_boundary_N256']:.1f} |"
            )
    write_text(out / "jacobians.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
