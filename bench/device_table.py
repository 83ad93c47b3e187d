"""Time one boundary of the spectra table (``decompose`` + K linearised jackknife replicates) on a torch device,
and the numpy implementation it replaced (layergeom at --baseline, default the commit before the torch port)
on the CPU; prints one JSON line.

    PYTHONPATH=src python bench/device_table.py --device cpu --d 1024 [--K 16] [--baseline 9a0fed5|none]

The matrix is a generic random J̄ (d×d float64) with float32 deviations of 1% of its entries' scale: every
metric takes its general path (no rank cap, no exact Henrici). The baseline is read with ``git show`` from this
checkout's history; --baseline none times the torch path alone. Reported: wall seconds and this process's CPU
seconds (on a shared machine the CPU seconds of a run with one thread, OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=1, are
the fair comparison).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from harness import ROOT, parser, timed

BASELINE = "9a0fed5"  # the last commit whose spectra.py/linear.py computed in numpy


def run(spectra, linear, J, deltas, tol, **kw):
    """Wall and CPU seconds of decompose and of the replicates of one boundary with these modules."""
    sync = kw.pop("sync", None)
    dec, t_dec = timed(lambda: spectra.decompose(J, **kw), sync=sync)
    _, t_rep = timed(
        lambda: linear.metric_replicates(J, deltas, tol=tol, sr_k=64, method="linear", dec=dec, **kw), sync=sync
    )
    total = t_dec + t_rep
    return {"decompose": round(t_dec, 3), "replicates": round(t_rep, 3), "total": round(total, 3),
            "cpu_decompose": round(t_dec.cpu, 3), "cpu_replicates": round(t_rep.cpu, 3), "cpu_total": round(total.cpu, 3)}  # fmt: skip


def baseline_modules(rev: str, tmp: Path):
    """A copy of src/ as of `rev` under `tmp` (its layergeom.spectral.spectra and .linear are the baseline)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
    return tmp / "src"


BASELINE_RUN = """
import sys, json
import numpy as np
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[5])
from layergeom.spectral import spectra, linear  # the baseline's, before device_table puts src/ first
from device_table import run
assert spectra.__file__.startswith(sys.argv[1]), spectra.__file__
d, K, seed = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(seed)
J = rng.standard_normal((d, d)) / np.sqrt(d)
deltas = (0.01 * rng.standard_normal((K, d, d)) / np.sqrt(d)).astype(np.float32)
print(json.dumps(run(spectra, linear, J, deltas, spectra.rank_tolerance(d, "float32", None))))
"""


def main():
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--K", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--baseline", default=BASELINE, help="git revision of the numpy implementation, or none")
    args = ap.parse_args()

    import torch

    spectra = importlib.import_module("layergeom.spectral.spectra")
    linear = importlib.import_module("layergeom.spectral.linear")
    rng = np.random.default_rng(args.seed)
    d = args.d
    J = rng.standard_normal((d, d)) / np.sqrt(d)
    deltas = (0.01 * rng.standard_normal((args.K, d, d)) / np.sqrt(d)).astype(np.float32)
    tol = spectra.rank_tolerance(d, "float32", None)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else None
    out = {"stage": "spectra_table", "device": args.device, "d": d, "K": args.K,
           "torch_threads": torch.get_num_threads()}  # fmt: skip
    out["torch_s"] = run(spectra, linear, J, deltas, tol, device=args.device, sync=sync)
    if args.baseline != "none":
        with tempfile.TemporaryDirectory() as tmp:
            src = baseline_modules(args.baseline, Path(tmp))
            res = subprocess.run(
                [sys.executable, "-c", BASELINE_RUN, str(src), str(d), str(args.K), str(args.seed), str(ROOT / "bench")],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            out["numpy_s"] = json.loads(res.stdout.strip().splitlines()[-1])
            out["baseline"] = args.baseline
        out["speedup"] = round(out["numpy_s"]["total"] / out["torch_s"]["total"], 3)
        out["cpu_speedup"] = round(out["numpy_s"]["cpu_total"] / out["torch_s"]["cpu_total"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
