"""Benchmark: the structured mean Jacobian J̄ (contract the samples first) against per-sample autodiff.

Run by hand from the repository root (it takes several minutes; the naive reference dominates):

    nice python bench/bench_mean_jacobian.py                      # everything, 2 threads
    python bench/bench_mean_jacobian.py --n-naive 32 --skip-8b    # a quick look

Three measurements, all with random weights (no download):

1. SmolLM2-135M shapes (d=576, d_ff=1536, 9 query / 3 KV heads, head_dim 64), one Llama-family layer, N=256
   samples: J̄ of the attention and the MLP sublayer (RMSNorm included) by ``spectral/structured.py``
   against ``--n-naive`` per-sample ``torch.autograd.functional.jacobian`` calls (the naive reference, d
   backward passes per sample), in float32 (the workflow's dtype) and, for the agreement alone, float64;
   the speed-up compares the structured J̄ with n_naive naive calls scaled to N (the naive cost is the same
   for every sample).
2. Llama-3.1-8B MLP shapes (d=4096, d_ff=14336, SwiGLU, RMSNorm), float32: J̄ over 1000 samples, one group;
   the structured per-sample Jacobians of two samples are checked against torch.func autodiff of the same
   function, and the time of one extra sample group (one more pair of d×d_ff×d products) is measured.
3. Time against N (256 … 16384) at SmolLM2 width, one group: the fitted t = a + b·N separates the fixed
   d²·d_ff products (a) from the per-sample O(d·d_ff) work (b), compared with the d²·d_ff of one per-sample
   Jacobian.

Writes bench/results/mean_jacobian.json and bench/results/mean_jacobian.md, with the load average at the
start and end (other processes on the machine inflate the times).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spinning OpenMP threads slow small ops 10-100×

import numpy as np  # noqa: E402
import torch  # noqa: E402
from harness import RESULTS, best, machine_info, parser, seconds, timed, write_json, write_text  # noqa: E402
from shapes import SMOLLM2  # noqa: E402
from torch import nn  # noqa: E402

from layergeom.adapters import get_adapter  # noqa: E402
from layergeom.adapters import parts as P  # noqa: E402
from layergeom.models import build_random  # noqa: E402
from layergeom.spectral import jacobians as jac  # noqa: E402
from layergeom.spectral import structured as st  # noqa: E402


def gemm_rate(m: int, k: int, n: int, repeats: int = 5) -> float:
    A, B = torch.randn(m, k), torch.randn(k, n)
    return 2 * m * k * n / best(lambda: A @ B, repeats, warmup=True)[1]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| / max |b|."""
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def structured_mean(sub, x, n_groups=1):
    groups = torch.arange(len(x)) * n_groups // len(x)
    return st.structured_sums(sub, x, groups, n_groups).sum(0) / len(x)


def smollm2(args, out):
    res = {}
    model = build_random("llama", {**SMOLLM2, "num_hidden_layers": 1}, seed=0)
    ad32, ad64 = get_adapter(model), get_adapter(copy.deepcopy(model).double())
    x = 2.0 * torch.randn(args.n, ad32.d_model, generator=torch.Generator().manual_seed(1))
    for b in ("L0.attn", "L0.mlp"):
        sub32, sub64 = ad32.structure(b), ad64.structure(b)
        structured_mean(sub32, x[:16])  # warm-up
        _, t_struct = best(lambda sub=sub32: structured_mean(sub, x), args.repeats)
        _, t_struct16 = best(lambda sub=sub32: structured_mean(sub, x, 16), args.repeats)
        xs = x[: args.n_naive]
        J, t_naive = timed(jac.naive_jacobians, ad32, b, xs)
        naive, ours = J.double().mean(0), structured_mean(sub32, xs)
        exact = structured_mean(sub64, xs.double())  # the same weights and samples in float64
        x64 = xs[: args.n_naive64].double()
        naive64 = jac.naive_jacobians(ad64, b, x64).mean(0)
        row = {
            "n_naive": len(xs),
            "max_rel_diff_vs_naive": rel(ours, naive),
            "structured_fp32_vs_fp64": rel(ours, exact),
            "naive_fp32_vs_fp64": rel(naive, exact),
            "n_naive_fp64": len(x64),
            "max_rel_diff_vs_naive_fp64": rel(structured_mean(sub64, x64), naive64),
            "s_structured_N": t_struct,
            "s_structured_N_16_groups": t_struct16,
            "s_naive_per_sample": t_naive / len(xs),
            "s_naive_N": t_naive / len(xs) * args.n,
        }
        row["speedup"] = row["s_naive_N"] / t_struct
        row["speedup_16_groups"] = row["s_naive_N"] / t_struct16
        res[b] = row
        print(b, json.dumps(row), flush=True)
    out["smollm2"] = res


def llama8b(args, out):
    d, m = 4096, 14336
    g = torch.Generator().manual_seed(2)

    def lin(o, i):
        return P.Linear(torch.randn(o, i, generator=g) / i**0.5)

    norm = P.Norm("rms", 1e-5, 1 + 0.1 * torch.randn(d, generator=g))
    sub = P.Sublayer((P.Branch(P.MLP(up=lin(m, d), down=lin(d, m), act=nn.SiLU(), gate=lin(m, d)), pre=norm),))
    x = torch.randn(args.n8b, d, generator=g)
    mean, t = timed(structured_mean, sub, x)
    # one more group: the same per-sample work, one more pair of d×d_ff×d products
    t2 = seconds(structured_mean, sub, x, 2)

    mlp = sub.branches[0].core

    def f(v):  # the same sublayer written out as plain tensor code, for torch.func autodiff
        n = norm.weight * v / torch.sqrt(v.pow(2).mean() + norm.eps)
        return mlp.down.weight @ (torch.nn.functional.silu(mlp.gate.weight @ n) * (mlp.up.weight @ n))

    xs = x[:2]
    J, t_ad = timed(lambda: torch.stack([torch.func.jacrev(f)(v) for v in xs]))
    per = st.structured_sums(sub, xs, torch.arange(2), 2)
    out["llama8b_mlp"] = {
        "d": d,
        "d_ff": m,
        "n_samples": args.n8b,
        "s_mean_1_group": t,
        "s_per_extra_group": t2 - t,
        "s_autodiff_per_sample": t_ad / 2,
        "max_rel_diff_vs_autodiff_2_samples": rel(per, J),
        "mean_fro_norm": float(mean.norm()),
    }
    print(json.dumps(out["llama8b_mlp"]), flush=True)


def scaling(args, out):
    adapter = get_adapter(build_random("llama", {**SMOLLM2, "num_hidden_layers": 1}, seed=0))
    d, m = SMOLLM2["hidden_size"], SMOLLM2["intermediate_size"]
    rows = {}
    for b in ("L0.attn", "L0.mlp"):
        sub = adapter.structure(b)
        ts = []
        for n in args.ns:
            x = 2.0 * torch.randn(n, d, generator=torch.Generator().manual_seed(n))
            ts.append(best(lambda sub=sub, x=x: structured_mean(sub, x), args.repeats)[1])
        slope, intercept = np.polyfit(args.ns, ts, 1)
        rows[b] = {"N": args.ns, "s": ts, "fit_s_fixed": float(intercept), "fit_s_per_sample": float(slope)}
        print(b, json.dumps(rows[b]), flush=True)
    out["scaling"] = {"d": d, "d_ff": m, "boundaries": rows}


def write(out, path: Path):
    write_json(path / "mean_jacobian.json", out)
    m = out["machine"]
    la0, la1 = m["load_average_at_start"], m["load_average_at_end"]
    lines = [
        "# Mean-Jacobian benchmark: structured J̄ against per-sample autodiff (random weights)",
        "",
        f"Machine: {m['processor']}, {m['threads']} threads, torch {m['torch']}; fp32 GEMM rate "
        f"{m['gemm_fp32_gflops']:.0f} GFLOP/s at the start; load average (1 min) {la0[0]:.1f} at the start, "
        f"{la1[0]:.1f} at the end (above the thread count, other processes inflate the times).",
        "",
    ]
    if "smollm2" in out:
        lines += [
            f"## SmolLM2-135M shapes, N = {out['N']} samples",
            "",
            "Naive reference: one `torch.autograd.functional.jacobian` per sample (timed on `n_naive` samples, "
            "scaled to N). Agreement: max |ΔJ̄| / max |J̄| over the naive samples; float32 unless marked.",
            "",
            "| sublayer | structured J̄ (s) | with 16 groups (s) | naive, N calls (s) | speed-up | "
            "speed-up, 16 groups | vs naive, fp32 | structured fp32 vs fp64 | naive fp32 vs fp64 | vs naive, fp64 |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for b, r in out["smollm2"].items():
            lines.append(
                f"| {b} | {r['s_structured_N']:.3f} | {r['s_structured_N_16_groups']:.3f} | "
                f"{r['s_naive_N']:.0f} ({r['n_naive']} timed) | {r['speedup']:.0f}× | {r['speedup_16_groups']:.0f}× | "
                f"{r['max_rel_diff_vs_naive']:.1e} | {r['structured_fp32_vs_fp64']:.1e} | "
                f"{r['naive_fp32_vs_fp64']:.1e} | {r['max_rel_diff_vs_naive_fp64']:.1e} ({r['n_naive_fp64']} samples) |"
            )
        lines += [
            "",
            "fp64 columns: the same weights and samples in float64 (structured), the best available truth; the "
            "float64 naive reference still normalises in float32 inside transformers' RMSNorm, hence ~1e-7.",
        ]
        lines.append("")
    if "llama8b_mlp" in out:
        r = out["llama8b_mlp"]
        lines += [
            f"## Llama-3.1-8B MLP shapes (d = {r['d']}, d_ff = {r['d_ff']}, SwiGLU + RMSNorm, float32)",
            "",
            f"- J̄ over {r['n_samples']} samples, one group: **{r['s_mean_1_group']:.1f} s**; "
            f"each further sample group adds {r['s_per_extra_group']:.1f} s.",
            f"- One per-sample Jacobian by torch.func autodiff: {r['s_autodiff_per_sample']:.1f} s "
            f"({r['n_samples']} of them: ~{r['s_autodiff_per_sample'] * r['n_samples'] / 60:.0f} min); "
            f"structured per-sample Jacobians of 2 samples agree with it to "
            f"{r['max_rel_diff_vs_autodiff_2_samples']:.1e} (max |Δ| / max |J|).",
            "",
        ]
    if "scaling" in out:
        s = out["scaling"]
        lines += [
            f"## Time against N (SmolLM2 width d = {s['d']}, d_ff = {s['d_ff']}, one group)",
            "",
            "| sublayer | " + " | ".join(f"N = {n}" for n in s["boundaries"]["L0.mlp"]["N"]) + " | fixed (fit) | "
            "per sample (fit) |",
            "|---|" + "---|" * (len(s["boundaries"]["L0.mlp"]["N"]) + 2),
        ]
        for b, r in s["boundaries"].items():
            lines.append(
                f"| {b} | "
                + " | ".join(f"{t:.3f} s" for t in r["s"])
                + f" | {r['fit_s_fixed']:.3f} s | {1e6 * r['fit_s_per_sample']:.0f} µs |"
            )
        lines += [
            "",
            "The per-sample cost is the O(d·d_ff) work of one token (its forward and the norms' low-rank "
            "terms pushed through the MLP); a per-sample Jacobian costs d²·d_ff, about d times more.",
            "",
        ]
    write_text(path / "mean_jacobian.md", "\n".join(lines))
    print("\n".join(lines))


def main(argv=None):
    ap = parser(__doc__, raw=True, out=RESULTS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=256, help="samples of the SmolLM2-shaped J̄")
    ap.add_argument("--n-naive", type=int, default=256, help="naive per-sample calls timed (scaled to --n)")
    ap.add_argument("--n-naive64", type=int, default=16, help="naive float64 calls for the float64 agreement")
    ap.add_argument("--n8b", type=int, default=1000)
    ap.add_argument("--ns", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-8b", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = {
        "machine": {
            **machine_info(args.threads),
            "load_average_at_start": os.getloadavg(),
            "gemm_fp32_gflops": gemm_rate(576 * 16, 576, 1536) / 1e9,
        },
        "N": args.n,
    }
    smollm2(args, out)
    scaling(args, out)
    if not args.skip_8b:
        llama8b(args, out)
    out["machine"]["load_average_at_end"] = os.getloadavg()
    write(out, args.out)


if __name__ == "__main__":
    main()
