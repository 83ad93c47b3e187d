"""Benchmark of the Paper A tokenwise stage at SmolLM2-135M sizes (run by hand).

    OMP_WAIT_POLICY=PASSIVE python bench/bench_tokenwise.py [--layers 30] [--windows 64] [--loop-anchors 24]

A random Llama with the SmolLM2-135M shape (d=576, d_ff=1536, 9/3 heads, vocab 49152, tied embeddings;
random weights, built with ``build_random``) provides the activations of `windows` x 128-token windows of
random tokens at a middle block. Then:

1. fits: every class of ``fit_classes`` for 512 anchors (k=64) in one batch, against a straightforward
   per-anchor numpy/scipy loop in R^d (the references of tests/test_tokenwise_fits.py; the mlp has no
   numpy reference, its loop is the library called on one anchor at a time) on `loop-anchors` anchors,
   extrapolated per anchor; the predictions t must agree to 1e-5 (relative);
2. KL: one clean pass per window + one resume per (chunk of windows, layer) for all anchors and six
   variants, against a full-sequence patched forward per (anchor, variant) (``patched_logits_full``),
   timed on a subset and extrapolated per patch; the KLs must agree to 1e-4 (relative);
3. this machine's fp32 / fp64 GEMM rate, for context.

Writes bench/results/tokenwise.json and .md.
"""

from __future__ import annotations

import json
import os

import harness
import numpy as np
import torch
from harness import RESULTS, Clock, machine, parser, write_json, write_text

harness.importable("tests")  # the per-anchor references of tests/test_tokenwise_fits.py
from test_tokenwise_fits import ref_diag, ref_lowrank, ref_orthogonal  # noqa: E402

from layergeom import config as lgconfig  # noqa: E402
from layergeom.adapters import get_adapter  # noqa: E402
from layergeom.models import build_random  # noqa: E402
from layergeom.tokenwise import fits  # noqa: E402
from layergeom.tokenwise.kl import kl_from_logits, patched_kl  # noqa: E402
from layergeom.tokenwise.neighbours import knn, sample_anchors  # noqa: E402

SMOLLM2 = dict(
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
    max_position_embeddings=2048, tie_word_embeddings=True, rms_norm_eps=1e-5, rope_theta=100000.0,
)  # fmt: skip


def gemm_rate(dtype, n=2048, reps=5) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    with Clock() as c:
        for _ in range(reps):
            a @ b
    return 2 * n**3 * reps / c.wall / 1e9


def tokenwise_defaults() -> dict:
    cfg = lgconfig.validate(
        {"models": {"m": {"source": "config", "family": "llama", "hf_config": {}, "checkpoints": {"c": {}}}}}
    )
    return cfg["tokenwise"]


def bench_fits(H0, H1, cfg, n_loop, seed=0) -> dict:
    pool = np.arange(H0.shape[0])
    rows = sample_anchors(pool, cfg["n_anchors"], seed)
    P0, P1 = torch.as_tensor(H0), torch.as_tensor(H1)
    ks = sorted({*cfg["energy_ranks"], cfg["proj_k"], 8})
    with Clock() as c_knn:
        nbr = knn(P0, torch.as_tensor(rows), cfg["k"], leave_one_out=True)
    X, Y, xa = P0[nbr], P1[nbr], P0[torch.as_tensor(rows)]
    seeds = np.arange(len(rows))
    with Clock() as c_glob:
        gmap = fits.fit_global(P0, P1, ridge=cfg["ridge"])
    out = {
        "n_tokens": int(H0.shape[0]),
        "d": int(H0.shape[1]),
        "anchors": len(rows),
        "k": cfg["k"],
        "knn_s": c_knn.wall,
    }
    out["global_fit_s"] = c_glob.wall
    out["classes"] = {}
    refs = {
        "diag": lambda i: ref_diag(X[i].double().numpy(), Y[i].double().numpy(), xa[i].double().numpy())[0],
        "lowrank": lambda i: ref_lowrank(X[i].double().numpy(), Y[i].double().numpy(), xa[i].double().numpy(), cfg["rank"])[0],
        "orthogonal": lambda i: ref_orthogonal(X[i].double().numpy(), Y[i].double().numpy(), xa[i].double().numpy())[0],
        "mlp": lambda i: fits.fit_classes(["mlp"], X[i : i + 1], Y[i : i + 1], xa[i : i + 1], cfg, q=max(ks), seeds=seeds[i : i + 1])[0]["mlp"].t[0].numpy(),
    }  # fmt: skip
    for name in ["identity", "diag", "lowrank", "orthogonal", "mlp", "global"]:
        with Clock() as cb:
            f, _ = fits.fit_classes([name], X, Y, xa, cfg, q=max(ks), seeds=seeds, global_map=gmap)
        rec = {"batched_wall_s": cb.wall, "batched_cpu_s": cb.cpu}
        if name in refs:
            with Clock() as cl:
                ref = np.stack([refs[name](i) for i in range(n_loop)])
            t = f[name].t[:n_loop].numpy()
            rel = np.abs(t - ref).max(1) / np.abs(ref).max(1)
            rec.update(
                loop_anchors=n_loop,
                loop_wall_s_per_anchor=cl.wall / n_loop,
                loop_cpu_s_per_anchor=cl.cpu / n_loop,
                speedup_wall=cl.wall / n_loop * len(rows) / cb.wall,
                speedup_cpu=cl.cpu / n_loop * len(rows) / cb.cpu,
                max_rel_diff_t=float(rel.max()),
                match_1e5=bool(rel.max() < 1e-5),
            )
        out["classes"][name] = rec
        print(name, json.dumps(rec), flush=True)
    with Clock() as call:
        fits.fit_classes(cfg["classes"], X, Y, xa, cfg, q=max(ks), seeds=seeds, global_map=gmap)
    out["all_classes_batched_wall_s"], out["all_classes_batched_cpu_s"] = call.wall, call.cpu
    return out


def bench_kl(adapter, windows, n_fast_windows, n_slow, seed=0) -> dict:
    """Cached-prefix KL vs one full patched forward per (anchor, variant)."""
    T = windows.shape[1]
    L = adapter.n_layers
    g = np.random.default_rng(seed)
    per_window = 8
    wins = np.repeat(np.arange(n_fast_windows), per_window)
    pos = np.concatenate([np.sort(g.choice(np.arange(1, T), per_window, replace=False)) for _ in range(n_fast_windows)])
    # six variants per anchor: the clean next state plus noise of growing size (like the six classes)
    with torch.no_grad():
        caps = [
            adapter.clean_run(torch.as_tensor(windows[w])[None], torch.as_tensor(pos[wins == w]))
            for w in range(n_fast_windows)
        ]
    patches = {}
    for l in range(L):
        clean = np.concatenate(
            [caps[w].states[l + 1][torch.as_tensor(pos[wins == w])].numpy() for w in range(n_fast_windows)]
        )
        scale = np.linalg.norm(clean, axis=1, keepdims=True) / np.sqrt(clean.shape[1])
        patches[l] = np.stack(
            [clean + s * scale * g.standard_normal(clean.shape) for s in (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)]
        ).astype(np.float32)
    del caps
    with Clock() as cf:
        fast = patched_kl(adapter, windows, wins, pos, patches, max_rows=256)
    n_patches = len(wins) * 6 * L
    # slow reference on a subset of (anchor, layer, variant)
    pick = [(int(g.integers(len(wins))), int(g.integers(L)), int(g.integers(6))) for _ in range(n_slow)]
    rel = []
    with Clock() as cs:
        for i, l, v in pick:
            ids = torch.as_tensor(windows[wins[i]])[None]
            with torch.no_grad():
                clean = adapter.model(input_ids=ids, use_cache=False).logits[0, pos[i]].float()
                logits = adapter.patched_logits_full(ids, l + 1, int(pos[i]), torch.as_tensor(patches[l][v, i]))
            kl = float(kl_from_logits(clean[None], logits[None])[0])
            rel.append(abs(kl - fast[l][v, i]) / abs(kl))
    return {
        "layers": L,
        "window_tokens": T,
        "fast_windows": n_fast_windows,
        "anchors_per_window": per_window,
        "variants": 6,
        "fast_patches": n_patches,
        "fast_wall_s": cf.wall,
        "fast_cpu_s": cf.cpu,
        "fast_wall_s_per_patch": cf.wall / n_patches,
        "fast_wall_s_per_window": cf.wall / n_fast_windows,
        "slow_patches": n_slow,
        "slow_wall_s_per_patch": cs.wall / n_slow,
        "slow_cpu_s_per_patch": cs.cpu / n_slow,
        "speedup_wall": (cs.wall / n_slow) / (cf.wall / n_patches),
        "speedup_cpu": (cs.cpu / n_slow) / (cf.cpu / n_patches),
        "max_rel_diff_kl": float(max(rel)),
        "match_1e4": bool(max(rel) < 1e-4),
    }


def main():
    ap = parser()
    ap.add_argument("--layers", type=int, default=30, help="blocks of the SmolLM2-shaped random model")
    ap.add_argument("--windows", type=int, default=64)
    ap.add_argument("--loop-anchors", type=int, default=24)
    ap.add_argument("--kl-windows", type=int, default=2)
    ap.add_argument("--slow-patches", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    res = {
        "machine": {
            **machine(cpu="processor", cores="cpus", torch_threads="torch_threads", torch="torch"),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
            "load_average_at_start": os.getloadavg(),
            "gemm_fp32_gflops": gemm_rate(torch.float32),
            "gemm_fp64_gflops": gemm_rate(torch.float64),
        },
        "model": {
            "family": "llama",
            "shape": "SmolLM2-135M",
            "random_weights_seed": 0,
            "n_layers": args.layers,
            **SMOLLM2,
        },
    }
    print(json.dumps(res["machine"]), flush=True)
    model = build_random("llama", {**SMOLLM2, "num_hidden_layers": args.layers}, seed=0)
    adapter = get_adapter(model)
    windows = np.random.default_rng(0).integers(0, SMOLLM2["vocab_size"], (args.windows, 128))
    mid = args.layers // 2
    with Clock() as ca, torch.no_grad():
        H0, H1 = [], []
        for s in range(0, args.windows, 8):
            cap = adapter.capture(torch.as_tensor(windows[s : s + 8]))
            H0.append(cap[f"L{mid}.attn"][:, 1:].reshape(-1, 576))
            H1.append(cap[f"L{mid + 1}.attn" if mid + 1 < args.layers else "final"][:, 1:].reshape(-1, 576))
        H0, H1 = torch.cat(H0).numpy(), torch.cat(H1).numpy()
    res["activations_s"] = ca.wall
    cfg = tokenwise_defaults()
    res["fits"] = bench_fits(H0, H1, cfg, args.loop_anchors)
    res["kl"] = bench_kl(adapter, windows, args.kl_windows, args.slow_patches)
    print(json.dumps(res["kl"]), flush=True)
    kl = res["kl"]
    # extrapolation to the papers' settings: 512 anchors, six classes, all layers, per checkpoint
    per_patch = kl["fast_wall_s"] / kl["fast_patches"]
    res["extrapolated_default_run"] = {
        "kl_s_per_checkpoint": per_patch * 512 * 6 * args.layers,
        "kl_s_per_layer": per_patch * 512 * 6,
        "fits_s_per_layer": res["fits"]["all_classes_batched_wall_s"]
        + res["fits"]["knn_s"]
        + res["fits"]["global_fit_s"],
    }
    res["machine"]["load_average_at_end"] = os.getloadavg()
    write_json(RESULTS / "tokenwise.json", res)
    write_text(RESULTS / "tokenwise.md", markdown(res))
    print(markdown(res))


def markdown(res) -> str:
    m, f, k, e = res["machine"], res["fits"], res["kl"], res["extrapolated_default_run"]
    lines = [
        "# Paper A tokenwise stage: measured",
        "",
        f"Machine: {m['cores']} cores ({m['cpu']}), torch {m['torch']} with {m['torch_threads']} threads, "
        f"OMP_WAIT_POLICY={m['omp_wait_policy']}; load average {m['load_average_at_start'][0]:.1f} at start "
        f"(shared with other jobs). GEMM 2048^2: fp32 {m['gemm_fp32_gflops']:.0f} GFLOP/s, fp64 {m['gemm_fp64_gflops']:.0f} GFLOP/s.",
        f"Model: random Llama with the SmolLM2-135M shape, {res['model']['n_layers']} layers.",
        "",
        f"## Fits ({f['anchors']} anchors, k={f['k']}, d={f['d']}, {f['n_tokens']} tokens)",
        "",
        "| class | batched wall s | batched CPU s | loop s/anchor | speed-up wall | speed-up CPU | max rel diff of t |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in f["classes"].items():
        if "speedup_wall" in r:
            lines.append(
                f"| {name} | {r['batched_wall_s']:.2f} | {r['batched_cpu_s']:.2f} | {r['loop_wall_s_per_anchor']:.3f} | "
                f"{r['speedup_wall']:.0f}x | {r['speedup_cpu']:.0f}x | {r['max_rel_diff_t']:.1e} |"
            )
        else:
            lines.append(f"| {name} | {r['batched_wall_s']:.2f} | {r['batched_cpu_s']:.2f} | - | - | - | - |")
    lines += [
        "",
        f"All six classes in one call: {f['all_classes_batched_wall_s']:.1f} s wall ({f['all_classes_batched_cpu_s']:.1f} s CPU); "
        f"kNN {f['knn_s']:.2f} s; global map {f['global_fit_s']:.2f} s.",
        "",
        f"## Functional KL ({k['layers']} layers, {k['window_tokens']}-token windows)",
        "",
        f"Cached prefix: {k['fast_patches']} patches in {k['fast_wall_s']:.1f} s ({1e3 * k['fast_wall_s_per_patch']:.2f} ms/patch); "
        f"full re-run: {k['slow_wall_s_per_patch']:.2f} s/patch. Speed-up {k['speedup_wall']:.0f}x wall "
        f"({k['speedup_cpu']:.0f}x CPU); max relative KL difference {k['max_rel_diff_kl']:.1e}.",
        "",
        "## The papers' settings, extrapolated (64 windows x 128 tokens, 512 anchors, 6 classes)",
        "",
        f"KL {e['kl_s_per_layer']:.1f} s per layer ({e['kl_s_per_checkpoint'] / 60:.1f} min per checkpoint); "
        f"fits {e['fits_s_per_layer']:.1f} s per layer (plus ~4 s job start-up).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
