"""Activation-correlation graphs of the residual stream (Paper B §3.1).

Nodes are the d residual coordinates of one boundary. Edges come from the Pearson correlation of the
boundary state across all non-BOS tokens: each node keeps its top-k partners by |r|, the union is
symmetrised, and the signed edges are split into a positive and a negative layer weighted by |r|.

The correlation is streamed from the activation memmap in chunks, merging per-chunk means and centred
cross-products in float64 (Chan et al.'s pairwise update), so memory is O(d² + chunk·d) whatever the
corpus size and no precision is lost to large coordinate means (massive activations). The products run in
torch on the job's device (a GPU in a GPU job); the top-k selection runs in numpy on the CPU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..runtime import LayergeomError

log = logging.getLogger("layergeom")


@dataclass
class SignedGraph:
    """A top-k correlation graph on d nodes: undirected edges (i < j) with their correlation r."""

    n_nodes: int
    src: np.ndarray  # (m,) int64
    dst: np.ndarray  # (m,) int64
    r: np.ndarray  # (m,) float64, signed correlation of the edge

    @property
    def positive(self) -> np.ndarray:
        return self.r > 0

    @property
    def negative(self) -> np.ndarray:
        return self.r < 0

    def layer(self, sign: int):
        """The positive (sign=+1) or negative (sign=-1) layer as an igraph Graph on all d nodes, weight |r|."""
        import igraph as ig

        keep = self.positive if sign > 0 else self.negative
        g = ig.Graph(n=self.n_nodes, edges=np.column_stack([self.src[keep], self.dst[keep]]).tolist())
        g.es["weight"] = np.abs(self.r[keep]).tolist()
        return g

    def degrees(self) -> tuple[np.ndarray, np.ndarray]:
        """(positive degree, negative degree) per node."""
        pos, neg = self.positive, self.negative
        deg_pos = np.bincount(np.r_[self.src[pos], self.dst[pos]], minlength=self.n_nodes)
        deg_neg = np.bincount(np.r_[self.src[neg], self.dst[neg]], minlength=self.n_nodes)
        return deg_pos, deg_neg


def streamed_correlation(states, mask: np.ndarray | None, chunk_tokens: int, *, device: str = "cpu") -> np.ndarray:
    """Pearson correlation matrix of the columns of ``states`` (n, d) over the rows selected by ``mask``.

    ``states`` may be a read-only memmap: rows are read ``chunk_tokens`` at a time on the CPU, sent to
    ``device`` (a torch device string) as stored, converted to float64 there and merged into a running mean
    and centred cross-product (Chan et al. 1979). Columns with zero variance get correlation 0 with every
    other column (and 1 with themselves). Returns the (d, d) float64 matrix as a numpy array.
    """
    import torch

    n_rows, d = states.shape
    if mask is not None and len(mask) != n_rows:
        raise LayergeomError(f"mask has {len(mask)} rows but the states have {n_rows}")
    f64 = {"dtype": torch.float64, "device": device}
    count = 0
    mean = torch.zeros(d, **f64)
    m2 = torch.zeros((d, d), **f64)  # centred cross-products Σ (x-μ)(x-μ)ᵀ
    for start in range(0, n_rows, chunk_tokens):
        rows = np.asarray(states[start : start + chunk_tokens])  # (chunk, d) as stored (float32 for a store)
        if mask is not None:
            rows = rows[mask[start : start + chunk_tokens]]
        nb = rows.shape[0]
        if nb == 0:
            continue
        rows = np.require(rows, requirements=("C", "W"))  # a memmap's rows are read-only: copied (as stored)
        x = torch.from_numpy(rows).to(**f64)  # exact: every float32 is a float64
        mb = x.mean(dim=0)
        xc = x - mb
        delta = mb - mean
        tot = count + nb
        m2 += (xc.T @ xc).add_(torch.outer(delta, delta).mul_(count * nb / tot))  # (d, d), two temporaries
        mean += delta * (nb / tot)
        count = tot
    if count < 2:
        raise LayergeomError(f"a correlation needs at least 2 tokens, got {count}")
    if not bool(torch.isfinite(m2).all()):
        raise LayergeomError("non-finite values in the activations: the correlation is undefined")
    # the d standard deviations on the CPU in numpy: torch's CPU sqrt is not always correctly rounded (it
    # differs from np.sqrt in the last bit), and these d numbers scale every correlation
    sd = np.sqrt(np.clip(torch.diagonal(m2).cpu().numpy(), 0.0, None))
    const = sd <= 1e-12 * max(float(sd.max()), 1e-300)
    if const.any():
        log.warning("%d of %d coordinates are constant over the tokens: they get no edges", const.sum(), d)
    inv = torch.from_numpy(np.where(const, 0.0, 1.0 / np.where(const, 1.0, sd))).to(**f64)
    corr = m2 * inv[:, None] * inv[None, :]  # (d, d): products alone, correctly rounded on every device
    corr.clamp_(-1.0, 1.0)
    corr.fill_diagonal_(1.0)
    return corr.cpu().numpy()


def topk_graph(corr: np.ndarray, k: int) -> SignedGraph:
    """Each node's top-k partners by |r| (self excluded), union-symmetrised; zero correlations dropped."""
    d = corr.shape[0]
    if d < 2:
        raise LayergeomError(f"a graph needs at least 2 nodes, got {d}")
    k = min(int(k), d - 1)
    score = np.abs(corr)
    np.fill_diagonal(score, -np.inf)
    nbr = np.argpartition(-score, k - 1, axis=1)[:, :k]  # (d, k) partner indices, unordered
    adj = np.zeros((d, d), dtype=bool)
    adj[np.arange(d)[:, None], nbr] = True
    adj |= adj.T  # union symmetrisation
    src, dst = np.nonzero(np.triu(adj, 1))
    r = corr[src, dst]
    keep = r != 0
    return SignedGraph(d, src[keep].astype(np.int64), dst[keep].astype(np.int64), r[keep].astype(np.float64))


def correlation_graph(
    states, mask: np.ndarray | None, k: int, chunk_tokens: int, *, device: str = "cpu"
) -> SignedGraph:
    """Paper B's graph of one boundary: streamed Pearson correlations (on ``device``), then the top-k |r| union
    graph (numpy, on the CPU: ``argpartition``'s choice among tied |r| is part of the graph)."""
    if k > states.shape[1] - 1:
        log.warning("top_k=%d is not below d=%d: every node keeps all partners", k, states.shape[1])
    return topk_graph(streamed_correlation(states, mask, chunk_tokens, device=device), k)
