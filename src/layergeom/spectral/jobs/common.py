"""What the Paper B table jobs share (``layergeom.spectral.jobs``): a checkpoint's per-boundary Jacobian files
(:class:`BoundaryFiles`), the jackknife replicates of its sample groups, a table job's snapshots, the work folder
its part jobs share and the one grouping of the samples their parts must have.

The tables read the boundaries one at a time in depth order (J̄_b, its group means memory-mapped), so a
checkpoint never holds more than one boundary's (G, d, d) group means and the products' K tangents.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from ...resume.snapshots import Snapshots
from ...resume.work_folder import remove_unowned, work_dir
from ...runtime import LayergeomError
from .. import intervals

log = logging.getLogger("layergeom")


class BoundaryFiles(Mapping):
    """One checkpoint's per-boundary Jacobian files, read lazily in depth order.

    ``[name]`` is J̄_b (float64); ``groups(name)`` the group means (G, d, d) float32, memory-mapped;
    ``meta(name)`` the {boundary}.json record (n_samples, group_counts, ...).
    """

    def __init__(self, names: list[str], npy: list, groups: list | None = None, meta: list | None = None):
        self.names = list(names)
        self._npy = dict(zip(self.names, npy))
        self._groups = dict(zip(self.names, groups)) if groups else {}
        self._meta = dict(zip(self.names, meta)) if meta else {}

    def __getitem__(self, name: str) -> np.ndarray:
        return np.load(self._npy[name]).astype(np.float64, copy=False)

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def paths(self) -> list:
        """Every file read, in depth order (the inputs of a job's resume key)."""
        out = []
        for name in self.names:
            out += [p[name] for p in (self._npy, self._groups, self._meta) if name in p]
        return out

    def meta(self, name: str) -> dict:
        if name not in self._meta:
            raise LayergeomError(f"{name}: no {name}.json next to {self._npy[name]}; rerun the Jacobian job")
        return json.loads(Path(self._meta[name]).read_text())

    def groups(self, name: str) -> np.ndarray:
        if name not in self._groups:
            raise LayergeomError(f"{name}: no {name}.groups.npy next to {self._npy[name]}; rerun the Jacobian job")
        return np.load(self._groups[name], mmap_mode="r")

    def counts(self) -> np.ndarray:
        """The group sizes n_g, checked to be the same at every boundary (one grouping per checkpoint)."""
        first = None
        for name in self.names:
            c = np.asarray(self.meta(name)["group_counts"], dtype=np.int64)
            if first is None:
                first = c
            elif not np.array_equal(c, first):
                raise LayergeomError(
                    f"{name}: group_counts {c.tolist()} differ from {self.names[0]}'s {first.tolist()}; the "
                    "intervals need one grouping of the samples per checkpoint: rerun the Jacobian job"
                )
        return first

    def deviations(self, name: str, J: np.ndarray, counts: np.ndarray, reps, subset=None) -> np.ndarray:
        """Δ_k (K, d, d) of the replicates `reps` at this boundary (over the groups in `subset`, default all)."""
        g = self.groups(name)
        if g.shape[0] != len(self.meta(name)["group_counts"]):
            raise LayergeomError(f"{name}: {g.shape[0]} group means but {len(counts)} group counts in its .json")
        if subset is not None:
            g = g[subset]
        return intervals.deviations(J, g, counts, reps)


def _replicates(counts: np.ndarray, blocks: int | None, what: str):
    """The jackknife replicates, or None (intervals nan, with a warning) when there is only one sample group."""
    if len(counts) < 2:
        log.warning("%s: one sample group (%d samples): no jackknife, the intervals are nan; use more windows "
                    "or spectra.n_groups >= 2", what, int(np.sum(counts)))  # fmt: skip
        return None
    return intervals.replicates(counts, blocks)


def snapshots_for(files: BoundaryFiles, out, what: str, settings: dict, every_s: float | None) -> Snapshots:
    """The snapshots of a table job (``layergeom.resume``), keyed by its Jacobian files and settings
    (``resume.NO_SNAPSHOTS`` when ``every_s`` is None)."""
    return Snapshots.for_job(out, what, files.paths(), settings, every_s)


def _remove_unowned_work(out_part, siblings: Iterable | None, name) -> None:
    """Before a part job works: remove from its work folder what a killed job of other settings left there (a
    block, variant or subset the current settings do not have). `siblings`: the outputs of every part job of the
    current settings sharing the folder (None: nothing is removed); `name`: output -> its work's name."""
    if siblings is not None:
        remove_unowned(work_dir(out_part), {name(p) for p in siblings})


def _same_counts(parts) -> None:
    """The parts of one checkpoint's table share one grouping of the samples."""
    first = parts[0] if parts else None
    for part in parts[1:]:
        if part.data["counts"] != first.data["counts"]:
            raise LayergeomError(
                f"{part.path}: group_counts {part.data['counts']} differ from {first.path}'s {first.data['counts']}; "
                "the intervals need one grouping of the samples per checkpoint: rerun the Jacobian job"
            )
