"""One boundary's activation correlation (the graph job's dominant cost) on a device, against numpy (by hand).

    python bench/device_topology.py [--device cpu|cuda] [--d 1024] [--tokens 16384] [--chunk 4096]

A float32 activation memmap of `tokens` rows and `d` columns (bench_topology's signed factor model), then
``streamed_correlation`` (torch, float64 accumulation on `--device`) and the same streamed float64 Chan update
in numpy (the implementation before torch, written here), each timed once after a warm-up on a small slice;
prints one JSON line: the seconds of both, the speed-up and the largest |r| difference between them.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
from pathlib import Path

import numpy as np
from bench_topology import synthetic_states
from harness import parser, timed

from layergeom.topology.graphs import streamed_correlation


def numpy_correlation(states, chunk: int) -> np.ndarray:
    """The streamed float64 correlation in numpy (Chan et al.'s merge of chunk means and centred products)."""
    n, d = states.shape
    count, mean, m2 = 0, np.zeros(d), np.zeros((d, d))
    for start in range(0, n, chunk):
        x = np.asarray(states[start : start + chunk], dtype=np.float64)
        nb = x.shape[0]
        mb = x.mean(axis=0)
        xc = x - mb
        delta = mb - mean
        tot = count + nb
        m2 += xc.T @ xc + np.outer(delta, delta) * (count * nb / tot)
        mean += delta * (nb / tot)
        count = tot
    sd = np.sqrt(np.diag(m2))
    corr = m2 / np.outer(sd, sd)
    np.fill_diagonal(corr, 1.0)
    return corr


def main() -> None:
    ap = parser(__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--chunk", type=int, default=4096)
    ap.add_argument("--skip-numpy", action="store_true", help="time the torch path alone")
    args = ap.parse_args()
    import torch

    sync = torch.cuda.synchronize if args.device.startswith("cuda") else None
    with tempfile.TemporaryDirectory() as tmp:
        states = synthetic_states(Path(tmp) / "s.npy", args.tokens, args.d)
        streamed_correlation(states[: min(256, args.tokens)], None, args.chunk, device=args.device)  # warm-up
        got, t_torch = timed(streamed_correlation, states, None, args.chunk, device=args.device, sync=sync)
        out = {"bench": "device_topology", "device": args.device, "d": args.d, "tokens": args.tokens,
               "chunk": args.chunk, "torch_s": round(t_torch, 3), "torch_threads": torch.get_num_threads(),
               "host": platform.node(), "cpus": len(os.sched_getaffinity(0))}  # fmt: skip
        if args.device.startswith("cuda"):
            out["gpu"] = torch.cuda.get_device_name()
        if not args.skip_numpy:
            want, t_np = timed(numpy_correlation, states, args.chunk)
            out |= {"numpy_s": round(t_np, 3), "speedup": round(t_np / t_torch, 2),
                    "max_abs_diff": float(np.abs(got - want).max())}  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main()
