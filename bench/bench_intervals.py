"""What the confidence intervals add to the spectra stage: one checkpoint of a SmolLM2-sized model (synthetic).

d = 576, 30 layers (60 boundaries: attention of rank 192 = n_kv·d_head like SmolLM2's, full-rank MLPs),
G = 16 sample groups; the default settings (sr_k 64, α ∈ {0, 0.5, 1}, both cumulative variants, Schur
intervals over 4 blocks for the own N). Times each table with and without its intervals, single-threaded
(the default run gives every job one thread), and writes bench/results/intervals.md.

    OMP_NUM_THREADS=1 python bench/bench_intervals.py [--d 576] [--layers 30] [--groups 16]
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
from harness import RESULTS, default_seed, parser, processor, save_boundary, schema_defaults, seconds, write_text

from layergeom.io import read_tsv
from layergeom.spectral import intervals
from layergeom.spectral.cumulative import cumulative_rows
from layergeom.spectral.jobs.common import BoundaryFiles
from layergeom.spectral.jobs.convergence import write_convergence
from layergeom.spectral.jobs.cumulative import write_cumulative
from layergeom.spectral.jobs.schur import write_schur
from layergeom.spectral.jobs.table import write_spectra
from layergeom.spectral.schur import schur_surgery
from layergeom.spectral.spectra import rank_tolerance, spectra_row


def synthetic(folder: Path, d: int, layers: int, G: int, rank: int, seed: int = 0) -> BoundaryFiles:
    """Per boundary: group means = J̄ + group noise (2 % of J̄), rank-`rank` attention, full-rank MLP."""
    rng = np.random.default_rng(seed)
    names = []
    counts = np.full(G, 254)  # 32 windows x 127 tokens in 16 groups
    for layer in range(layers):
        for kind in ("attn", "mlp"):
            name = f"L{layer}.{kind}"
            if kind == "attn":
                A, B = rng.standard_normal((d, rank)), rng.standard_normal((rank, d))
                J = A @ B / np.sqrt(d * rank)
                groups = J[None] + 0.02 * np.einsum("dr,grk->gdk", A, rng.standard_normal((G, rank, d))) / np.sqrt(
                    d * rank
                )
            else:
                J = rng.standard_normal((d, d)) / np.sqrt(d) + 0.3 * np.eye(d)
                groups = J[None] + 0.02 * rng.standard_normal((G, d, d)) / np.sqrt(d)
            groups = groups.astype(np.float32)
            mean = np.tensordot(counts / counts.sum(), groups.astype(np.float64), axes=1)
            save_boundary(folder, name, mean, groups, counts)
            names.append(name)
    return BoundaryFiles(names, *([folder / f"{n}.{e}" for n in names] for e in ("npy", "groups.npy", "json")))


def main():
    ap = parser(out=RESULTS / "intervals.md")
    ap.add_argument("--d", type=int, default=576)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--rank", type=int, default=192)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = synthetic(tmp, args.d, args.layers, args.groups, args.rank)
        cfg = schema_defaults("spectra") | {"seed": default_seed()}
        tol = rank_tolerance(args.d, cfg["dtype"], cfg["rank_tol"])
        spectra_kw = {k: cfg[k] for k in ("sr_k", "dtype", "rank_tol", "ci_level", "ci_method", "ci_blocks")}
        schur_kw = {"seed": cfg["seed"], "sr_k": cfg["sr_k"], "boundary_metrics": cfg["schur_boundary_metrics"],
                    "orders": cfg["schur_orders"], "order_alphas": cfg["schur_order_alphas"],
                    "ci_level": cfg["ci_level"]}  # fmt: skip
        conv_kw = {k: cfg[k] for k in ("sr_k", "dtype", "rank_tol", "ci_level")}
        conv_kw |= {"sizes": cfg["convergence_sizes"], "n_edge": cfg["convergence_boundaries"]}
        counts = files.counts()
        reps = intervals.replicates(counts)
        alphas = [0, 0.5, 1]
        res = {}
        res["spectra, no intervals"] = seconds(
            lambda: [spectra_row(n, files[n], 1, sr_k=cfg["sr_k"], tol=tol) for n in files.names]
        )
        res["spectra, with intervals"] = seconds(lambda: write_spectra(files, tmp / "s.tsv", **spectra_kw))
        res["cumulative, no intervals"] = seconds(
            lambda: cumulative_rows(((n, files[n], None) for n in files.names), ci_level=cfg["ci_level"])
        )
        res["cumulative, with intervals"] = seconds(
            lambda: write_cumulative(files, tmp / "c.tsv", ci_level=cfg["ci_level"], ci_blocks=cfg["ci_blocks"])
        )
        cum = read_tsv(tmp / "c.tsv", exact=True)  # the α = 1 rows (J̄ itself)
        res["schur (both variants), no intervals"] = seconds(
            lambda: schur_surgery(files, alphas=alphas, tol=tol, ci_controls=["none"], cumulative=cum, **schur_kw)
        )
        res["schur (both variants), intervals own N (4 blocks)"] = seconds(
            lambda: write_schur(
                files,
                tmp / "u.tsv",
                tmp / "c.tsv",
                alphas=alphas,
                dtype=cfg["dtype"],
                rank_tol=cfg["rank_tol"],
                ci_blocks=4,
                ci_controls=["none"],
                **schur_kw,
            )  # fmt: skip
        )
        res["convergence (4 sizes)"] = seconds(lambda: write_convergence(files, tmp / "v.tsv", **conv_kw))
        del reps
    lines = [
        "# Confidence intervals: cost on one checkpoint (bench/bench_intervals.py)",
        "",
        f"Synthetic SmolLM2-sized checkpoint: d={args.d}, {2 * args.layers} boundaries (attention rank "
        f"{args.rank}), G={args.groups} groups; α ∈ {{0, 0.5, 1}}. {processor()}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, load average at the end "
        f"{os.getloadavg()[0]:.1f} (shared machine: times scale with it).",
        "",
        "| table | seconds |",
        "|---|---:|",
        *[f"| {k} | {v:.1f} |" for k, v in res.items()],
        "",
        f"Added by the intervals: spectra {res['spectra, with intervals'] - res['spectra, no intervals']:.0f} s, "
        f"cumulative {res['cumulative, with intervals'] - res['cumulative, no intervals']:.0f} s, Schur "
        f"{res['schur (both variants), intervals own N (4 blocks)'] - res['schur (both variants), no intervals']:.0f}"
        f" s, convergence {res['convergence (4 sizes)']:.0f} s (a new table).",
    ]
    write_text(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
