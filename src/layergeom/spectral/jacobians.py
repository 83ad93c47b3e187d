"""Exact per-sample Jacobians of sublayer updates and their mean (Paper B, METHODS.md §2.1-2.2).

``J_b(s) = ∂F_b/∂x`` at the state ``x_s`` of sample s at boundary b, where ``F_b`` is the adapter's
sublayer update: isolated (``adapter.update``: x fed alone as a length-1 sequence, the paper's choice)
or in context (``adapter.update_in_context``: the same position with its real prefix, an extension).
Derivatives are exact reverse- or forward-mode autodiff through ``torch.func``, vmapped over the samples
of a chunk and over the d basis vectors, so each chunk is a handful of large batched GEMMs; the mean
J̄_b is accumulated in float64 whatever the compute dtype.

A sample is the last position of a window (never the BOS position 0): one sample per window, at most
``n_samples`` windows (a seeded subset when there are more). The samples' token ids go along with their
states (``tokens=``), for adapters whose updates depend on the token as well (``adapter.uses_tokens``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch.func import jacfwd, jacrev, vmap

from ..adapters import Adapter, Boundary
from ..names import TOKENWISE_KINDS
from ..runtime import LayergeomError

log = logging.getLogger("layergeom")

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _parse(b: Boundary | str) -> Boundary:
    return Boundary.parse(b) if isinstance(b, str) else b


def _jac(mode: str):
    try:
        return {"rev": jacrev, "fwd": jacfwd}[mode]
    except KeyError:
        raise LayergeomError(f"spectra.autodiff: '{mode}' is not one of rev, fwd") from None


# ---- batched exact Jacobians ------------------------------------------------------------------
@torch.no_grad()  # torch.func differentiates regardless; nothing keeps a graph to the weights
def isolated_jacobians(
    adapter: Adapter, b: Boundary | str, x: torch.Tensor, *, mode: str = "rev", tokens: torch.Tensor | None = None
) -> torch.Tensor:
    """Isolated sublayer Jacobians ∂F_b/∂x of one chunk of states x (c, d) -> (c, d, d), rows = outputs.

    tokens (c,) are the samples' token ids (None where the adapter's updates do not read them)."""
    b = _parse(b)

    def f(v, t):  # (d,) -> (d,): one state fed alone as a length-1 sequence
        return adapter.update(b, v[None], None if t is None else t[None])[0]

    return vmap(_jac(mode)(f, argnums=0), in_dims=(0, None if tokens is None else 0))(x, tokens)  # (c, d_out, d_in)


@torch.no_grad()  # torch.func differentiates regardless; nothing keeps a graph to the weights
def in_context_jacobians(
    adapter: Adapter,
    b: Boundary | str,
    prefix: torch.Tensor,
    x: torch.Tensor,
    *,
    mode: str = "rev",
    tokens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Same-position Jacobians ∂F_b/∂x at the last position of [prefix (c, T-1, d), x (c, d)] -> (c, d, d).

    tokens (c, T) are the token ids of each sequence, prefix and last position (None where unused)."""
    b = _parse(b)

    def f(v, p, t):  # v (d,), p (T-1, d) -> (d,): the prefix is held fixed
        return adapter.update_in_context(b, p[None], v[None], None if t is None else t[None])[0]

    in_dims = (0, 0, None if tokens is None else 0)
    return vmap(_jac(mode)(f, argnums=0), in_dims=in_dims)(x, prefix, tokens)  # (c, d_out, d_in)


@torch.no_grad()  # torch.func differentiates regardless; nothing keeps a graph to the weights
def naive_jacobians(
    adapter: Adapter, b: Boundary | str, x: torch.Tensor, tokens: torch.Tensor | None = None
) -> torch.Tensor:
    """Reference: one ``torch.autograd.functional.jacobian`` call per sample (slow; for tests and benchmarks)."""
    b = _parse(b)
    tok = [None] * len(x) if tokens is None else tokens[:, None]

    def one(xi, t):
        return torch.autograd.functional.jacobian(lambda v: adapter.update(b, v[None], t)[0], xi)

    return torch.stack([one(xi, t) for xi, t in zip(x, tok)])  # (N, d_out, d_in)


# ---- samples ----------------------------------------------------------------------------------
def sample_rows(n_windows: int, window_tokens: int, n_samples: int, seed: int = 0) -> np.ndarray:
    """Store rows of the samples: the last position of each window, a seeded subset of n_samples windows."""
    if window_tokens < 2:
        raise LayergeomError("Jacobian samples need windows of at least 2 tokens (position 0 is BOS)")
    windows = np.arange(n_windows)
    if n_windows > n_samples:
        windows = np.sort(np.random.default_rng(seed).choice(n_windows, size=n_samples, replace=False))
    return windows * window_tokens + (window_tokens - 1)


# ---- per-sample summaries ---------------------------------------------------------------------
def sample_summaries(J: torch.Tensor, spectral_norm: bool = False) -> dict[str, np.ndarray]:
    """Small per-sample metrics of Jacobians J (c, d, d): Frobenius norm, trace, asymmetry (and σ1)."""
    J64 = J.double()
    fro = torch.linalg.matrix_norm(J64)  # (c,)
    asym = torch.linalg.matrix_norm(J64 - J64.transpose(1, 2)) / (2 * fro)
    out = {
        "fro_norm": fro,
        "trace": J64.diagonal(dim1=1, dim2=2).sum(-1),
        "asymmetry": asym,
        "spectral_norm": torch.linalg.matrix_norm(J64, ord=2) if spectral_norm else torch.full_like(fro, np.nan),
    }
    return {k: v.cpu().numpy() for k, v in out.items()}


# ---- the mean Jacobian --------------------------------------------------------------------------
@dataclass
class MeanJacobian:
    """J̄_b (float64, d×d) and one row of summaries per sample."""

    boundary: str
    mean: np.ndarray  # (d, d) float64
    summaries: pd.DataFrame
    n_samples: int


def mean_jacobian(
    adapter: Adapter,
    b: Boundary | str,
    x: torch.Tensor,
    prefix: torch.Tensor | None = None,
    *,
    tokens: torch.Tensor | None = None,
    chunk_size: int = 16,
    mode: str = "rev",
    spectral_norm: bool = False,
    dtype: torch.dtype = torch.float32,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Mean Jacobian J̄_b = mean_s J_b(s) over states x (N, d), chunked, accumulated in float64.

    prefix (N, T-1, d) selects the in-context Jacobian; None the isolated one. tokens are the samples' token
    ids, (N,) or with a prefix (N, T) (None where the adapter does not read them). Returns J̄ (d, d) and
    per-sample summaries. Tokenwise kinds (MLP, per-layer inputs) act on each position alone, so their
    in-context Jacobian is the isolated one (the tests check this identity through the adapter); they skip
    the prefix.
    """
    b = _parse(b)
    N, d = x.shape
    if N == 0:
        raise LayergeomError(f"no samples for the Jacobian at {b.name}")
    total = torch.zeros(d, d, dtype=torch.float64, device=adapter.device)
    parts: list[dict[str, np.ndarray]] = []
    tokenwise = b.kind in TOKENWISE_KINDS
    for start in range(0, N, chunk_size):
        xc = x[start : start + chunk_size].to(adapter.device, dtype)  # (c, d)
        tc = None if tokens is None else tokens[start : start + chunk_size].to(adapter.device)  # (c,) or (c, T)
        if prefix is None or tokenwise:
            last = None if tc is None else (tc if tc.ndim == 1 else tc[:, -1])  # (c,) the samples' own tokens
            J = isolated_jacobians(adapter, b, xc, mode=mode, tokens=last)
        else:
            pc = prefix[start : start + chunk_size].to(adapter.device, dtype)  # (c, T-1, d)
            J = in_context_jacobians(adapter, b, pc, xc, mode=mode, tokens=tc)
        if not torch.isfinite(J).all():
            raise LayergeomError(f"non-finite Jacobian at {b.name} (samples {start}..{start + len(xc) - 1})")
        total += J.double().sum(0)
        s = sample_summaries(J, spectral_norm)
        s["x_norm"] = xc.double().norm(dim=-1).cpu().numpy()
        parts.append(s)
    summaries = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return (total / N).cpu().numpy(), summaries
