"""Memory and runtime of the topology jobs: one boundary's graph (the streamed correlation and Leiden) and the
coupling's permutation tests, at the rates of :mod:`.rates` with the margins of :mod:`.margins`."""

from __future__ import annotations

from .margins import MIN_MB, UNKNOWN_MINUTES, _mb, _minutes
from .rates import RATES


def topology_graph_bytes(d: int, n_tokens: int, chunk_tokens: int = 4096, top_k: int = 20) -> float:
    """Peak bytes of one boundary's graph: the boundary's float32 states (memory-mapped, their pages count once
    read), a float64 chunk with its masked copy and centred copy, the cross-products, the correlation and its
    scaling temporary, then |r| and its negation, the partner indices and the boolean adjacency (and transpose)."""
    d2 = float(d) * d
    return 4.0 * n_tokens * d + 3 * 8.0 * chunk_tokens * d + (8 * 3 + 8 * 2 + 3) * d2 + 8.0 * d * top_k


def topology_graph_mem_mb(d: int | None, n_tokens: int, chunk_tokens: int = 4096, top_k: int = 20) -> int:
    if not d:
        return MIN_MB
    return _mb(topology_graph_bytes(int(d), int(n_tokens), int(chunk_tokens), int(top_k)))


def topology_graph_runtime_min(d: int | None, n_tokens: int, n_boundaries: int) -> int:
    """Per boundary c1·d (the Leiden passes) + c_t·tokens·d² (the streamed correlation), RATES["topology_graph"]."""
    if not d:
        return UNKNOWN_MINUTES
    c1, ct = RATES["topology_graph"]
    return _minutes((c1 * float(d) + ct * float(n_tokens) * float(d) ** 2) * n_boundaries)


def coupling_mem_mb(d: int | None, n_boundaries: int, n_sweep: int = 0) -> int:
    """One J̄_b (float64) and I + J̄_b at a time, and every boundary's node and sweep tables (~100 B per row)."""
    if not d:
        return MIN_MB
    return _mb(2 * 8.0 * d * d + 100.0 * d * n_boundaries * (2 + n_sweep))


def coupling_runtime_min(d: int | None, n_boundaries: int, n_permutations: int, n_sweep: int = 0) -> int:
    """Permutation tests: 3 amplifications per boundary (and one per swept γ), each `n_permutations` rank
    correlations of d units (an upper bound: the tests stop early once p is clearly above q)."""
    if not d:
        return UNKNOWN_MINUTES
    return _minutes(RATES["coupling_perm_d"] * float(d) * n_permutations * n_boundaries * (3 + n_sweep))
