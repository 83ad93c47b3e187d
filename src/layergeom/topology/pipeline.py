"""Paper B topology stage, one function per workflow rule: the only module of ``topology`` that touches files.

- :func:`write_graphs` (rule ``topology_graph_<model>``): every boundary's correlation graph, signed-Leiden
  communities and participation from the activation store -> ``graphs/{boundary}.tsv``, ``.edges.tsv``,
  ``.sweep.tsv``;
- :func:`write_coupling` (``topology_coupling``): ``coupling.tsv``, ``coupling_by_operator.tsv`` and the
  resolution sweep of one checkpoint.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..io import read_tsv, write_tsv
from ..resume.items import item_done, mark_done
from ..resume.keys import job_key, machine_id
from ..resume.work_folder import WorkLock, remove_work, work_dir
from ..runtime import LayergeomError, progress
from ..store import ActivationStore
from .coupling import coupling_table, operator_summary, sweep_table

if TYPE_CHECKING:
    from .communities import BoundaryTopology

log = logging.getLogger("layergeom")


class LazyArrays(Mapping):
    """Boundary -> .npy file, loaded on access (one d×d Jacobian in memory at a time, not all of a model's)."""

    def __init__(self, paths: dict[str, str]):
        self.paths = dict(paths)

    def __getitem__(self, key: str) -> np.ndarray:
        return np.load(self.paths[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)


def store_topology(store, boundary: str, cfg: dict, seed: int, device: str = "cpu") -> BoundaryTopology:
    """``boundary_topology`` of one boundary of an activation store (or its directory), over its non-BOS tokens."""
    from .communities import boundary_topology  # here: the coupling job imports this module and runs no torch

    store = store if isinstance(store, ActivationStore) else ActivationStore(store)
    if boundary not in store.boundaries:
        raise LayergeomError(f"boundary {boundary} is not in the activation store {store.path} ({store.boundaries})")
    return boundary_topology(store.states(boundary), store.nonbos, cfg, seed, device=device)


def write_topology(topo: BoundaryTopology, nodes_path, edges_path, sweep_path) -> None:
    write_tsv(topo.nodes, nodes_path)
    write_tsv(topo.edges, edges_path)
    write_tsv(topo.sweep, sweep_path)


def write_graphs(
    store_dir,
    boundaries: list[str],
    cfg: dict,
    seed: int,
    nodes,
    edges,
    sweeps,
    *,
    device: str = "cpu",
    block: int | None = None,
) -> None:
    """Rule entry point: every boundary's graph and communities of one checkpoint, one file set each.

    ``device``: the torch device of the correlations. ``block``: None for the checkpoint's one graph job; k
    for the job of block k of a fanned-out checkpoint (``spectra.boundaries_per_job``), which writes the same
    files for its boundaries alone, beside the other blocks' jobs.

    Resumable after a kill (``layergeom.resume``): each boundary's three files go into ``.partial/`` next to
    them as it finishes, then a marker with the key of its states, the settings, the seed and the machine
    (device, BLAS and torch threads) and each file's size and sha256; a restarted job skips the boundaries
    whose marker and files match. One instance of a job at a time works in the folder (its lock, ``graphs``
    or ``graphs_{block}``). When all are done the files move into place; the one job then clears the work
    folder, a block's job only its own files (the folder goes with the last).
    """
    import torch

    if not len(boundaries) == len(nodes) == len(edges) == len(sweeps):
        raise LayergeomError("one nodes, edges and sweep path per boundary")
    store = ActivationStore(store_dir)  # opened once for all boundaries
    jobs = list(zip(boundaries, nodes, edges, sweeps))
    missing = [b for b in boundaries if b not in store.boundaries]
    if missing:
        raise LayergeomError(f"boundary {missing[0]} is not in the activation store {store.path} ({store.boundaries})")
    what = "graphs" if block is None else f"graphs_{int(block)}"
    locks = {w: WorkLock.hold(w, what) for w in dict.fromkeys(work_dir(n) for n in nodes)}
    machine = machine_id(device, torch.get_num_threads())
    reused = 0
    for b, *paths in progress(jobs, desc=what, unit="boundary"):
        work = work_dir(paths[0])
        key = job_key("topology_graph", [store.path / f for f in ("store.json", "index.npy", f"{b}.npy")],
                      {"boundary": b, "topology": cfg, "seed": seed, "machine": machine})  # fmt: skip
        marker = work / f"{b}.done.json"
        names = [Path(p).name for p in paths]
        if item_done(marker, key, names):
            reused += 1
            continue
        marker.unlink(missing_ok=True)  # files of another key may be half rewritten below
        write_topology(store_topology(store, b, cfg, seed, device), *(work / n for n in names))
        mark_done(marker, key, names)
    if reused:
        log.info("%s: resumed, %d boundaries reused, %d computed", what, reused, len(jobs) - reused)
    for b, *paths in jobs:  # all finished: move into place
        work = work_dir(paths[0])
        for p in paths:
            os.replace(work / Path(p).name, p)
        (work / f"{b}.done.json").unlink()
    for work, lock in locks.items():
        # the one graph job of a checkpoint works alone in its folder; a block's job beside the other blocks'
        remove_work(work, names=None if block is None else [], lock=lock)


def coupling_tables(boundaries, graph_paths, sweep_paths, jacobian_paths, spectra_path, cfg: dict, seed: int):
    """coupling.tsv, its operator-type summary and the resolution sweep of one model checkpoint, from files.

    The Henrici departures come from the spectra stage's table (column ``henrici``), computed there once.
    """
    spectra = read_tsv(spectra_path).set_index("boundary")["henrici"]
    missing = sorted(set(boundaries) - set(spectra.index))
    if missing:
        raise LayergeomError(f"{spectra_path} has no henrici for {missing}")
    graphs = {b: read_tsv(p) for b, p in zip(boundaries, graph_paths)}
    jacobians = LazyArrays(dict(zip(boundaries, map(str, jacobian_paths))))
    table = coupling_table(graphs, jacobians, cfg, seed, henrici_values=spectra.to_dict())
    sweeps = {b: read_tsv(p) for b, p in zip(boundaries, sweep_paths)}
    return table, operator_summary(table), sweep_table(sweeps, jacobians, cfg, seed)


def write_coupling(
    boundaries,
    graph_paths,
    sweep_paths,
    jacobian_paths,
    spectra_path,
    cfg: dict,
    seed: int,
    *,
    table,
    by_operator,
    sweep,
) -> None:
    """The ``topology_coupling`` job: :func:`coupling_tables` written to ``table``, ``by_operator`` and ``sweep``."""
    tables = coupling_tables(boundaries, graph_paths, sweep_paths, jacobian_paths, spectra_path, cfg, seed)
    for frame, path in zip(tables, (table, by_operator, sweep)):
        write_tsv(frame, path)
