"""Signed Leiden communities and boundary nodes of a correlation graph (Paper B §3.2-3.3).

Communities maximise the signed Constant Potts Model with leidenalg: one ``CPMVertexPartition`` per layer
(positive and negative edges, weights |r|), optimised jointly with layer weights ``[1, -1]``:

    Q = Σ_c [ e⁺_c − γ⁺ n_c(n_c−1)/2 ] − [ e⁻_c − γ⁻ n_c(n_c−1)/2 ].

With γ⁻ = γ⁺ the two penalties cancel exactly and the resolution has no effect at all (Q = Σ_c e⁺_c − e⁻_c),
so the negative layer's resolution is its own config key (default 0, Traag & Bruggeman's signed CPM
with the size penalty on the positive layer only).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import sparse

from .graphs import SignedGraph, correlation_graph

log = logging.getLogger("layergeom")


@dataclass
class Communities:
    membership: np.ndarray  # (d,) int, communities numbered by decreasing size
    quality: float  # the signed CPM quality Q at the optimum found
    resolution: float

    @property
    def n_communities(self) -> int:
        return int(self.membership.max()) + 1


def signed_leiden(
    graph: SignedGraph,
    resolution: float,
    negative_resolution: float,
    n_iterations: int,
    seed: int,
) -> Communities:
    """Signed Leiden CPM: CPM partitions of the positive and negative layers optimised jointly, weights [1, -1]."""
    import leidenalg as la

    pos, neg = graph.layer(+1), graph.layer(-1)
    part_pos = la.CPMVertexPartition(pos, weights="weight", resolution_parameter=float(resolution))
    part_neg = la.CPMVertexPartition(neg, weights="weight", resolution_parameter=float(negative_resolution))
    optimiser = la.Optimiser()
    optimiser.set_rng_seed(int(seed))
    optimiser.optimise_partition_multiplex([part_pos, part_neg], layer_weights=[1, -1], n_iterations=n_iterations)
    quality = part_pos.quality() - part_neg.quality()
    return Communities(np.asarray(part_pos.membership, dtype=np.int64), float(quality), float(resolution))


def participation(graph: SignedGraph, membership: np.ndarray) -> np.ndarray:
    """Participation coefficient on the positive layer, P_i = 1 − Σ_c (w_ic / w_i)²; NaN where w_i = 0."""
    d = graph.n_nodes
    pos = graph.positive
    i, j, w = graph.src[pos], graph.dst[pos], np.abs(graph.r[pos])
    W = sparse.coo_matrix((np.r_[w, w], (np.r_[i, j], np.r_[j, i])), shape=(d, d)).tocsr()  # (d, d) symmetric
    n_comm = int(membership.max()) + 1
    M = sparse.csr_matrix((np.ones(d), (np.arange(d), membership)), shape=(d, n_comm))  # (d, C) one-hot
    w_ic = W @ M  # (d, C) weight from node i into community c
    w_i = np.asarray(W.sum(axis=1)).ravel()  # (d,) strength
    sq = np.asarray(w_ic.multiply(w_ic).sum(axis=1)).ravel()
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.clip(1.0 - sq / np.where(w_i > 0, w_i, 1.0) ** 2, 0.0, 1.0)  # clip float round-off
    return np.where(w_i > 0, p, np.nan)


def boundary_nodes(p: np.ndarray, percentile: float) -> np.ndarray:
    """Binary boundary nodes: participation at or above the given percentile of the finite values.

    A node with P = 0 (all its positive weight inside one community) is never a boundary node, even when
    the percentile itself is 0; NaN (no positive edges) never is either.
    """
    finite = np.isfinite(p)
    if not finite.any():
        return np.zeros(p.shape, dtype=bool)
    cut = np.percentile(p[finite], percentile)
    q = np.nan_to_num(p, nan=-np.inf)
    return finite & (q >= cut) & (q > 0)


@dataclass
class BoundaryTopology:
    nodes: pd.DataFrame  # one row per node
    edges: pd.DataFrame  # one row per undirected edge
    sweep: pd.DataFrame  # (gamma, node) rows: community and participation at every swept resolution
    summary: dict


def boundary_topology(
    states, mask: np.ndarray | None, cfg: dict, seed: int, *, device: str = "cpu"
) -> BoundaryTopology:
    """Graph, signed Leiden communities, participation and boundary nodes of one boundary's states (n, d);
    the correlations are computed on ``device`` (a torch device string)."""
    graph = correlation_graph(states, mask, cfg["top_k"], cfg["chunk_tokens"], device=device)
    leiden = cfg["leiden"]
    leiden_seed = seed if leiden["seed"] is None else leiden["seed"]

    def detect(gamma):
        comm = signed_leiden(graph, gamma, cfg["negative_resolution"], leiden["n_iterations"], leiden_seed)
        return comm, participation(graph, comm.membership)

    comm, p = detect(cfg["resolution"])
    is_boundary = boundary_nodes(p, cfg["boundary_percentile"])
    deg_pos, deg_neg = graph.degrees()
    w = np.abs(graph.r)
    s_pos = np.bincount(np.r_[graph.src, graph.dst], np.r_[w, w] * np.r_[graph.positive, graph.positive], graph.n_nodes)
    s_neg = np.bincount(np.r_[graph.src, graph.dst], np.r_[w, w] * np.r_[graph.negative, graph.negative], graph.n_nodes)
    nodes = pd.DataFrame(
        {
            "node": np.arange(graph.n_nodes),
            "community": comm.membership,
            "participation": p,
            "boundary": is_boundary,
            "degree": deg_pos + deg_neg,
            "degree_pos": deg_pos,
            "degree_neg": deg_neg,
            "strength_pos": s_pos,
            "strength_neg": s_neg,
        }
    )
    edges = pd.DataFrame({"source": graph.src, "target": graph.dst, "r": graph.r})
    rows = [
        pd.DataFrame({"gamma": comm.resolution, "node": nodes.node, "community": comm.membership, "participation": p})
    ]
    for gamma in sorted(set(map(float, cfg["resolution_sweep"])) - {float(cfg["resolution"])}):
        c, pg = detect(gamma)
        rows.append(pd.DataFrame({"gamma": gamma, "node": nodes.node, "community": c.membership, "participation": pg}))
    sweep = pd.concat(rows, ignore_index=True).sort_values(["gamma", "node"], kind="stable")
    summary = {
        "n_nodes": graph.n_nodes,
        "n_edges_pos": int(graph.positive.sum()),
        "n_edges_neg": int(graph.negative.sum()),
        "n_communities": comm.n_communities,
        "quality": comm.quality,
        "n_boundary_nodes": int(is_boundary.sum()),
    }
    log.info("graph: %s", summary)
    return BoundaryTopology(nodes, edges, sweep, summary)
