"""Paper B topology stage, one function per workflow rule: the only module of ``topology`` that touches files.

- :func:`run_topologies` (rule ``topology_graph_<model>``): every boundary's correlation graph, signed-Leiden
  communities and participation from the activation store -> ``graphs/{boundary}.tsv``, ``.edges.tsv``,
  ``.sweep.tsv``;
- :func:`checkpoint_coupling` (``topology_coupling``): ``coupling.tsv``, ``coupling_by_operator.tsv`` and the
  resolution sweep of one checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from ..io import read_tsv, write_tsv
from ..runtime import LayergeomError, progress
from ..store import ActivationStore
from .communities import BoundaryTopology, boundary_topology
from .coupling import coupling_table, operator_summary, sweep_table


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


def store_topology(store, boundary: str, cfg: dict, seed: int) -> BoundaryTopology:
    """``boundary_topology`` of one boundary of an activation store (or its directory), over its non-BOS tokens."""
    store = store if isinstance(store, ActivationStore) else ActivationStore(store)
    if boundary not in store.boundaries:
        raise LayergeomError(f"boundary {boundary} is not in the activation store {store.path} ({store.boundaries})")
    return boundary_topology(store.states(boundary), store.nonbos, cfg, seed)


def write_topology(topo: BoundaryTopology, nodes_path, edges_path, sweep_path) -> None:
    write_tsv(topo.nodes, nodes_path)
    write_tsv(topo.edges, edges_path)
    write_tsv(topo.sweep, sweep_path)


def run_topologies(store_dir, boundaries: list[str], cfg: dict, seed: int, nodes, edges, sweeps) -> None:
    """Rule entry point: every boundary's graph and communities of one checkpoint, one file set each."""
    if not len(boundaries) == len(nodes) == len(edges) == len(sweeps):
        raise LayergeomError("one nodes, edges and sweep path per boundary")
    store = ActivationStore(store_dir)  # opened once for all boundaries
    for b, n, e, s in progress(list(zip(boundaries, nodes, edges, sweeps)), desc="graphs", unit="boundary"):
        write_topology(store_topology(store, b, cfg, seed), n, e, s)


def checkpoint_coupling(boundaries, graph_paths, sweep_paths, jacobian_paths, spectra_path, cfg: dict, seed: int):
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
