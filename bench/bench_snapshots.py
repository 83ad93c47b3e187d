"""Size and cost of the resumable table jobs' snapshots (layergeom.resume), per d² and at papers width.

Runs each spectra table job (spectra, cumulative, Schur, convergence) with its defaults on synthetic Jacobian
files of width d (4 boundaries, 16 sample groups), saving a snapshot after every step, and records the largest
snapshot of each job and the time its saves took. The state of these jobs is a fixed number of d×d arrays, so
bytes / d² is constant in d (checked by running two widths); the table extrapolates it to d = 4096
(Llama-3.1-8B, OLMo-3-7B).

    python bench/bench_snapshots.py            # -> bench/results/snapshots.{json,md}
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from harness import RESULTS, default_seed, machine_info, save_boundary, schema_defaults, timed, write_json, write_text

from layergeom.resume import snapshots
from layergeom.spectral.jobs.common import BoundaryFiles
from layergeom.spectral.jobs.convergence import write_convergence
from layergeom.spectral.jobs.cumulative import write_cumulative
from layergeom.spectral.jobs.schur import write_schur
from layergeom.spectral.jobs.table import write_spectra

WIDTHS = (128, 256)
PAPERS_D = 4096
PAPERS_BOUNDARIES = 64  # Llama-3.1-8B, OLMo-3-7B: 32 blocks x (attn, mlp)
N_BOUNDARIES = 4
G = 16


def papers_gb(r: dict) -> float:
    """The snapshot at papers width: the d×d states scale with d²; the spectra rows with d and the boundaries."""
    if r["job"] == "spectra":
        return r["max_bytes"] / (r["d"] * N_BOUNDARIES) * PAPERS_D * PAPERS_BOUNDARIES / 1e9
    return r["bytes_per_d2"] * PAPERS_D**2 / 1e9


def boundary_files(folder: Path, d: int, seed: int = 0) -> BoundaryFiles:
    """4 boundaries of random d×d mean Jacobians with G group means each (float32, like the Jacobian job's)."""
    g = np.random.default_rng(seed)
    names = [f"L{i}.{k}" for i in range(N_BOUNDARIES // 2) for k in ("attn", "mlp")]
    counts = np.full(G, 8)
    for n in names:
        M = g.standard_normal((d, d)) / np.sqrt(d)
        groups = (M[None] + 0.05 * g.standard_normal((G, d, d))).astype(np.float32)
        save_boundary(folder, n, np.tensordot(counts / counts.sum(), groups.astype(np.float64), axes=1), groups, counts)
    return BoundaryFiles(names, *([folder / f"{n}.{e}" for n in names] for e in ("npy", "groups.npy", "json")))


def measure(d: int) -> dict:
    stats: dict[str, dict] = {}
    real = snapshots.Snapshots.save

    def save(self, done, state, force=False):
        saved, t = timed(real, self, done, state, force)
        s = stats.setdefault(self.name, {"bytes": 0, "save_s": 0.0, "saves": 0})
        s["bytes"] = max(s["bytes"], self.path.stat().st_size)
        s["save_s"] += float(t)
        s["saves"] += saved
        return saved

    snapshots.Snapshots.save = save
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            files = boundary_files(tmp, d)
            c = schema_defaults("spectra") | {"seed": default_seed()}
            kw = {k: c[k] for k in ("dtype", "rank_tol", "ci_level")}
            write_spectra(files, tmp / "spectra.tsv", tmp / "eig.tsv", sr_k=c["sr_k"], ci_method=c["ci_method"],
                                   ci_blocks=c["ci_blocks"], snapshot_s=0, **kw)  # fmt: skip
            write_cumulative(files, tmp / "cumulative.tsv", ci_level=c["ci_level"], ci_blocks=c["ci_blocks"],
                                      snapshot_s=0)  # fmt: skip
            write_schur(files, tmp / "schur.tsv", tmp / "cumulative.tsv", alphas=c["alphas"], seed=c["seed"],
                                 sr_k=c["sr_k"], boundary_metrics=c["schur_boundary_metrics"], orders=c["schur_orders"],
                                 order_alphas=c["schur_order_alphas"],
                                 ci_blocks=c["schur_ci_blocks"], ci_controls=c["schur_ci_controls"], snapshot_s=0,
                                 **kw)  # fmt: skip
            write_convergence(files, tmp / "convergence.tsv", sizes=c["convergence_sizes"],
                                       n_edge=c["convergence_boundaries"], sr_k=c["sr_k"], snapshot_s=0, **kw)  # fmt: skip
    finally:
        snapshots.Snapshots.save = real
    return stats


def main() -> None:
    rows = []
    for d in WIDTHS:
        for job, s in measure(d).items():
            rows.append({"d": d, "job": job, "max_bytes": s["bytes"], "bytes_per_d2": s["bytes"] / d**2,
                         "saves": s["saves"], "save_s_per_snapshot": s["save_s"] / max(s["saves"], 1)})  # fmt: skip
    out = RESULTS
    meta = machine_info(threads=1)
    lines = [
        "# Snapshots of the resumable table jobs (bench/bench_snapshots.py)",
        "",
        f"Machine: {meta['platform']} ({meta['processor']}), numpy {np.__version__}, 1 thread. Defaults of config/schema/spectra.schema.yaml (16 sample groups; "
        "Schur: 5 α, both controls, 4 jackknife blocks; convergence: 4 subset sizes), 4 boundaries; a snapshot "
        f"after every step. The state is a fixed set of d×d arrays: bytes / d² at d = {WIDTHS[0]} and {WIDTHS[1]} "
        f"agree (the rows add a little at small d), and d = {PAPERS_D} is bytes / d² × {PAPERS_D}².",
        "",
        "| job | d | largest snapshot (MB) | bytes / d² | s per save | at d = 4096 (GB) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        r["papers_gb"] = papers_gb(r)
        lines.append(f"| {r['job']} | {r['d']} | {r['max_bytes'] / 1e6:.2f} | {r['bytes_per_d2']:.1f} | "
                     f"{r['save_s_per_snapshot']:.3f} | {r['papers_gb']:.3g} |")  # fmt: skip
    lines += ["", "spectra keeps the rows and eigenvalues done: d numbers per boundary, not d²; its last column is "
              f"bytes / (d × boundaries) × {PAPERS_D} × {PAPERS_BOUNDARIES} boundaries."]  # fmt: skip
    write_json(out / "snapshots.json", {"meta": meta, "rows": rows})
    write_text(out / "snapshots.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
