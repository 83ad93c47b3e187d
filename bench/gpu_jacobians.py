"""GPU check of the exact Jacobian path at Llama-3-8B width (d=4096), one random-init layer, in under 5 minutes.

    python bench/gpu_jacobians.py                       # CUDA, d=4096, d_ff=14336, 32 heads / 8 KV heads
    python bench/gpu_jacobians.py --device cpu --d 256  # CPU smoke test of the same script (seconds)

For the attention and MLP sublayers of one random-init Llama-family layer it times the workflow's batched
Jacobians (``layergeom.spectral.jacobians.mean_jacobian``: vmapped jacrev through ``adapter.update``, fp32 compute,
float64 mean) over ``--n-samples`` states at several chunk sizes, checks one sample against
``torch.autograd.functional.jacobian`` (the naive per-sample path, also timed), counts the FLOPs actually
executed (torch.utils.flop_counter) and compares the achieved rate with the device's fp32 GEMM rate measured
in the same run (TF32 off, as in the workflow). Writes ``$OUT/gpu_jacobians.json`` (or --out) and prints
a table; every stage checks a wall-clock budget and skips what would not fit.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from harness import RESULTS, best, parser, seconds, write_json
from torch.utils.flop_counter import FlopCounterMode

from layergeom.adapters import get_adapter
from layergeom.models import build_random
from layergeom.spectral import jacobians as jac

START = time.perf_counter()


def elapsed() -> float:
    return time.perf_counter() - START


def sync(device):
    """The device's synchronisation (None on the CPU), for the timers."""
    return torch.cuda.synchronize if str(device).startswith("cuda") else None


def gemm_rate(m, k, n, device, repeats=5) -> float:
    A, B = torch.randn(m, k, device=device), torch.randn(k, n, device=device)
    return 2 * m * k * n / best(lambda: A @ B, repeats, warmup=True, sync=sync(device))[1]


def main(argv=None):
    ap = parser(__doc__, raw=True, out=os.environ.get("OUT", RESULTS))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--d", type=int, default=4096, help="model width (d_ff = 3.5 d, head_dim 128 or d/8)")
    ap.add_argument("--n-samples", type=int, default=64)
    ap.add_argument("--chunks", default="4,8,16", help="chunk sizes to try (samples per vmapped batch)")
    ap.add_argument("--budget-s", type=float, default=270.0, help="stop starting new stages after this")
    ap.add_argument("--naive", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args(argv)

    device = args.device
    torch.backends.cuda.matmul.allow_tf32 = False  # exact fp32, as the workflow computes
    torch.backends.cudnn.allow_tf32 = False
    d = args.d
    head_dim = 128 if d % 128 == 0 and d >= 1024 else max(d // 8, 8)
    heads = d // head_dim
    kv = max(heads // 4, 1)
    d_ff = int(3.5 * d)
    hf = dict(
        vocab_size=256,
        hidden_size=d,
        intermediate_size=d_ff,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        max_position_embeddings=256,
    )
    model = build_random("llama", hf, seed=0).to(device)
    adapter = get_adapter(model)
    x = torch.randn(args.n_samples, d, device=device)  # (N, d)
    peak = max(gemm_rate(8 * d, d, d_ff, device), gemm_rate(8 * d, d_ff, d, device))
    res = {
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "shapes": {"d": d, "d_ff": d_ff, "heads": heads, "kv_heads": kv, "head_dim": head_dim},
        "n_samples": args.n_samples,
        "gemm_fp32_tflops": peak / 1e12,
        "boundaries": {},
    }
    print(f"[{elapsed():.0f}s] {res['device']}: fp32 GEMM {peak / 1e12:.2f} TFLOP/s, d={d}, d_ff={d_ff}", flush=True)
    for b in ("L0.attn", "L0.mlp"):
        out = {"chunks": {}}
        for c in [int(s) for s in args.chunks.split(",")]:
            if elapsed() > args.budget_s:
                out["chunks"][c] = "skipped (budget)"
                continue
            with FlopCounterMode(display=False) as fc:
                J = jac.isolated_jacobians(adapter, b, x[:c], mode="rev")
            flops = fc.get_total_flops() / c
            try:
                t = seconds(
                    lambda c=c, b=b: jac.mean_jacobian(
                        adapter, b, x, chunk_size=c, mode="rev", spectral_norm=False, dtype=torch.float32
                    ),
                    sync=sync(device),
                )
            except torch.OutOfMemoryError:
                out["chunks"][c] = "out of memory"
                torch.cuda.empty_cache()
                continue
            per = t / len(x)
            mem = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else float("nan")
            out["chunks"][c] = {
                "ms_per_sample": 1e3 * per,
                "s_per_boundary_N256": 256 * per,
                "gflop_per_sample": flops / 1e9,
                "tflops": flops / per / 1e12,
                "fraction_of_gemm": flops / per / peak,
                "max_mem_gib": mem,
            }
            print(f"[{elapsed():.0f}s] {b} chunk {c}: {json.dumps(out['chunks'][c])}", flush=True)
        if args.naive and elapsed() < args.budget_s:
            xs = x[:1]
            t = seconds(jac.naive_jacobians, adapter, b, xs, sync=sync(device))
            ref = jac.naive_jacobians(adapter, b, xs)
            J = jac.isolated_jacobians(adapter, b, xs, mode="rev")
            out["naive_s_per_sample"] = t
            out["max_rel_diff_vs_naive"] = float((J - ref).abs().max() / ref.abs().max())
            best = min((v["ms_per_sample"] for v in out["chunks"].values() if isinstance(v, dict)), default=None)
            out["speedup_vs_naive"] = 1e3 * t / best if best else None
            print(f"[{elapsed():.0f}s] {b} naive {t:.2f} s/sample, diff {out['max_rel_diff_vs_naive']:.1e}", flush=True)
        res["boundaries"][b] = out
    res["wall_s"] = elapsed()
    path = write_json(Path(args.out) / "gpu_jacobians.json", res)
    print(json.dumps(res, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
