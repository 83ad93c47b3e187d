"""One boundary step of the cumulative chains (both variants, K tangents) at width d: the torch chain
(``cumulative.ProductChain`` on --device) against the numpy way it replaced (numpy products, float32 tangents,
``linalg.svd``; written out here as the code before issue 20 had it). Prints one JSON line: the seconds of each
(the best over --repeat boundaries after one that only copies; the two ways alternate boundary by boundary),
and how far their numbers are apart.

    PYTHONPATH=src python bench/device_chains.py --device cpu --d 1024 [--K 16] [--threads 2] [--repeat 1]

On the CPU both use --threads threads (torch: MKL; numpy: its OpenBLAS, set before numpy loads).
"""

from __future__ import annotations

import json
import os

from harness import Clock, parser

ARGS = parser(__doc__.splitlines()[0])
ARGS.add_argument("--device", default="cpu")
ARGS.add_argument("--d", type=int, default=1024)
ARGS.add_argument("--K", type=int, default=16, help="replicates (tangents) per chain")
ARGS.add_argument("--threads", type=int, default=2)
ARGS.add_argument("--repeat", type=int, default=1, help="timed boundaries (the best is reported)")

if __name__ == "__main__":
    _threads = str(ARGS.parse_args().threads)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = _threads

import numpy as np  # noqa: E402
import torch  # noqa: E402

from layergeom.linalg import svd, svdvals  # noqa: E402
from layergeom.spectral.cumulative import VARIANTS, ProductChain, step_operator, tangent_floor  # noqa: E402
from layergeom.spectral.spectra import effective_rank, entropy_gradient  # noqa: E402


class NumpyChain:
    """The product chain as numpy computed it before issue 20 (float64 C, float32 tangents, renormalised)."""

    def __init__(self, floor):
        self.floor, self.C, self.T, self.log_norm = floor, None, None, 0.0

    def step(self, M, D):
        M = np.asarray(M, dtype=np.float64)
        if self.C is None:
            self.C, self.T = M.copy(), np.array(D, dtype=np.float32)
        else:
            self.T = np.matmul(np.asarray(D, np.float32), self.C.astype(np.float32)) + np.matmul(
                M.astype(np.float32), self.T
            )
            self.C = M @ self.C
        nrm = float(np.linalg.norm(self.C))
        self.C /= nrm
        self.T /= nrm
        self.log_norm += float(np.log(nrm))
        if not len(self.T):
            return effective_rank(svdvals(self.C)), self.log_norm, np.empty(0)
        U, s, Vh = svd(self.C)
        H, grad = entropy_gradient(s, self.floor)
        keep = grad != 0
        Gam = (U[:, keep] * grad[keep]) @ Vh[keep]
        dH = np.real(np.einsum("ij,kij->k", Gam.conj(), self.T))
        return float(np.exp(H)), self.log_norm, np.exp(H + dH)


def boundaries(d, K, n, seed=0):
    g = np.random.default_rng(seed)
    for _ in range(n):
        J = g.standard_normal((d, d)) / np.sqrt(d)
        yield J, (1e-2 * g.standard_normal((K, d, d)) / np.sqrt(d)).astype(np.float32)


def run(makers: dict, steps, device):
    """Both ways boundary by boundary, alternating (a machine's load hits both alike): name -> (best seconds
    over the timed boundaries, their results)."""
    chains = {name: {v: make() for v in VARIANTS} for name, make in makers.items()}
    times = {name: [] for name in makers}
    out = {name: [] for name in makers}
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    for i, (J, D) in enumerate(steps):
        for name, ch in chains.items():
            with Clock(sync) as c:
                res = [ch[v].step(step_operator(J, v), D) for v in VARIANTS]
            if i:  # the first boundary only copies J̄ into C
                times[name].append(c.wall)
                out[name].append(res)
    return {name: (min(times[name]), out[name]) for name in makers}


def main():
    args = ARGS.parse_args()
    torch.set_num_threads(args.threads)
    d, K, n = args.d, args.K, 1 + args.repeat
    floor = tangent_floor(d)
    res = run({"torch": lambda: ProductChain(floor, device=args.device), "numpy": lambda: NumpyChain(floor)},
              boundaries(d, K, n), args.device)  # fmt: skip
    (t_torch, a), (t_np, b) = res["torch"], res["numpy"]
    erank = max(abs(x[0] - y[0]) / y[0] for ra, rb in zip(a, b) for x, y in zip(ra, rb))
    reps = max(float(np.max(np.abs(x[2] - y[2]) / y[2])) for ra, rb in zip(a, b) for x, y in zip(ra, rb))
    print(json.dumps({"stage": "cumulative_step", "device": args.device, "d": d, "K": K, "threads": args.threads,
                      "torch_s": round(t_torch, 3), "numpy_s": round(t_np, 3), "speedup": round(t_np / t_torch, 2),
                      "max_rel_diff_erank": erank, "max_rel_diff_replicates": reps}))  # fmt: skip


if __name__ == "__main__":
    main()
