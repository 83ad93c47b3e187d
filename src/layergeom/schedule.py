"""Checkpoint schedules of the ``train`` source, importable without torch or numpy (the DAG is built from them)."""

from __future__ import annotations

import math

from .runtime import LayergeomError


def geomspace(start: float, stop: float, num: int) -> list[float]:
    """``num`` points from ``start`` to ``stop`` evenly spaced in log10, ends exact (numpy.geomspace's recipe)."""
    if num == 1:
        return [float(start)]
    lo, hi = math.log10(start), math.log10(stop)
    step = (hi - lo) / (num - 1)
    out = [10.0 ** (i * step + lo) for i in range(num)]
    out[0], out[-1] = float(start), float(stop)
    return out


def log_spaced_steps(total: int, n: int) -> list[int]:
    """Step 0 plus n-1 roughly log-spaced steps ending at `total` (distinct integers)."""
    if n < 2 or total < 1:
        raise LayergeomError("train: need at least 2 checkpoints and 1 step")
    steps = {0, total}
    for x in geomspace(1, total, n - 1):
        steps.add(int(round(x)))
    steps = sorted(steps)
    while len(steps) > n:  # drop the most crowded interior step
        gaps = [math.log((steps[i + 1] + 1) / (steps[i - 1] + 1)) for i in range(1, len(steps) - 1)]
        steps.pop(1 + min(range(len(gaps)), key=gaps.__getitem__))
    return steps
