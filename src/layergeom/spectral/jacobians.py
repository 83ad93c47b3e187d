"""Exact per-sample Jacobians of sublayer updates and their mean (Paper B, docs/methods.md §2.1-2.2).

``J_b(s) = ∂F_b/∂x`` at the state ``x_s`` of sample s at boundary b, where ``F_b`` is the adapter's
sublayer update: isolated (``adapter.update``: x fed alone as a length-1 sequence, the paper's choice)
or in context (``adapter.update_in_context``: the same position with its real prefix, an extension).

Two exact routes to ``J̄_b = mean_s J_b(s)``, chosen per boundary (:func:`choose_method`) and logged:

- ``structured`` (``structured.py``): where the adapter describes the isolated sublayer as parts, the mean is
  contracted over the samples before any d×d_ff×d product, without forming the per-sample Jacobians;
- ``autodiff``: reverse- or forward-mode autodiff through ``torch.func``, vmapped over the samples of a chunk
  and the d basis vectors (the reference, and the route for anything not described, or in context).

Samples (:func:`select_samples`) are non-BOS tokens of the sample windows, grouped into contiguous blocks of
windows (:func:`sample_groups`) whose means give the resampling replicates. Every sum over samples is
accumulated in float64 whatever the compute dtype. The samples' token ids go along with their states
(``tokens=``) for adapters whose updates also read the token (``adapter.uses_tokens``, e.g. Gemma-4).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import jacfwd, jacrev, vmap

from ..adapters import Adapter, Boundary
from ..names import TOKENWISE_KINDS
from ..runtime import LayergeomError
from .settings import JacobianSettings  # noqa: F401  (re-exported)
from .structured import PRODUCT_ELEMENTS, check_tolerance, structured_forward, structured_sums

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
    adapter: Adapter, b: Boundary | str, x: torch.Tensor, *, mode: str, tokens: torch.Tensor | None = None
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
    mode: str,
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


# ---- settings ----------------------------------------------------------------------------------------
# ---- samples and groups ------------------------------------------------------------------------------
def resolve_samples(samples, context: str):
    """The ``spectra.samples`` setting with null resolved by context: ``all`` isolated, ``last`` in context."""
    if samples is None:
        return "all" if context == "isolated" else "last"
    if samples in ("all", "last") or (isinstance(samples, int) and not isinstance(samples, bool) and samples >= 1):
        return samples
    raise LayergeomError(f"spectra.samples: '{samples}' is not one of all, last, a positive integer or null")


def select_samples(n_windows: int, window_tokens: int, n_samples: int, samples, seed: int) -> np.ndarray:
    """Sorted store rows of the samples.

    The sample windows are all windows, or a seeded subset of ``n_samples`` of them when there are more; of
    those windows ``samples`` takes the last token (``last``), every non-BOS token (``all``), or a seeded
    subset of that many non-BOS tokens (an integer; all of them when there are fewer).
    """
    T = window_tokens
    if T < 2:
        raise LayergeomError("Jacobian samples need windows of at least 2 tokens (position 0 is BOS)")
    windows = np.arange(n_windows)
    if n_windows > n_samples:
        windows = np.sort(np.random.default_rng(seed).choice(n_windows, size=n_samples, replace=False))
    if samples == "last":
        return windows * T + (T - 1)
    rows = (windows[:, None] * T + np.arange(1, T)[None, :]).ravel()  # every non-BOS token, sorted
    if samples == "all" or samples >= len(rows):
        return rows
    return np.sort(np.random.default_rng([seed, 1]).choice(rows, size=samples, replace=False))


def sample_groups(windows: np.ndarray, n_groups: int) -> tuple[np.ndarray, list[list[int]]]:
    """Group id of each sample (its window's block) and each group's [first, last] window.

    The distinct sample windows, sorted, are split into G = min(n_groups, #windows) nearly equal contiguous
    blocks (``np.array_split``); a window is the resampling unit, its tokens being correlated.
    """
    distinct = np.unique(windows)
    blocks = np.array_split(distinct, min(n_groups, len(distinct)))
    block_of = np.concatenate([np.full(len(b), i) for i, b in enumerate(blocks)])
    groups = block_of[np.searchsorted(distinct, windows)]
    return groups, [[int(b[0]), int(b[-1])] for b in blocks]


def summary_subset(n: int, k: int, seed: int) -> np.ndarray:
    """Sorted indices of the k samples (of n) that get per-sample summaries: all when k >= n, else seeded."""
    if k >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng([seed, 2]).choice(n, size=k, replace=False))


# ---- per-sample summaries ---------------------------------------------------------------------
def sample_summaries(J: torch.Tensor, spectral_norm: bool) -> dict[str, np.ndarray]:
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


def _concat(parts: list[dict[str, np.ndarray]], keys) -> dict[str, np.ndarray]:
    return {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0) for k in keys}


SUMMARY_KEYS = ("fro_norm", "trace", "asymmetry", "spectral_norm")


# ---- the route per boundary -------------------------------------------------------------------------
METHODS = ("auto", "structured", "autodiff")


def choose_method(adapter: Adapter, b: Boundary | str, context: str, method: str):
    """(route, description or None, reason) for boundary b: ``structured`` where the adapter describes the
    sublayer and the Jacobian is isolated (or the sublayer is tokenwise), else ``autodiff``.

    ``method: structured`` makes a boundary without a usable description an error; ``autodiff`` forces autodiff.
    """
    b = _parse(b)
    if method not in METHODS:
        raise LayergeomError(f"spectra.method: '{method}' is not one of {', '.join(METHODS)}")
    if method == "autodiff":
        return "autodiff", None, "spectra.method: autodiff"
    sub = adapter.structure(b)
    if sub is None:
        reason = f"the {adapter.family} adapter describes no structure for {b.name}"
    elif context == "in_context" and sub.attends:
        reason = f"{b.name} mixes tokens and the Jacobian is in context"
    else:
        return "structured", sub, "described as parts"
    if method == "structured":
        raise LayergeomError(f"spectra.method: structured, but {reason}; use method: auto or autodiff")
    return "autodiff", None, reason


def check_structure(adapter: Adapter, b: Boundary | str, sub, x: torch.Tensor) -> tuple[bool, str]:
    """Compare the description with the model on a few samples x (n, d): the update F(x), and the per-sample
    Jacobians against autodiff, both to ``structured.check_tolerance`` relative to their largest entry."""
    b = _parse(b)
    tol = check_tolerance(sub)
    with torch.no_grad():
        F_model, F_desc = adapter.update(b, x), structured_forward(sub, x)
    J_auto = isolated_jacobians(adapter, b, x, mode="rev").double()
    J_desc = structured_sums(sub, x, torch.arange(len(x)), len(x))
    errs = {
        "update": float((F_desc.double() - F_model.double()).abs().max() / F_model.double().abs().max()),
        "jacobian": float((J_desc - J_auto).abs().max() / J_auto.abs().max()),
    }
    ok = all(e <= tol for e in errs.values())  # NaN fails
    return ok, ", ".join(f"{k} {v:.1e}" for k, v in errs.items()) + f" (tolerance {tol:.1e})"


# ---- the mean Jacobian of one boundary --------------------------------------------------------------
@dataclass
class BoundaryJacobian:
    """J̄_b, the group means and counts, and the per-sample summaries of the summary subset."""

    boundary: str
    mean: np.ndarray  # (d, d) float64
    group_means: np.ndarray  # (G, d, d) float64
    group_counts: np.ndarray  # (G,)
    summaries: dict[str, np.ndarray]  # per summary sample: x_norm, fro_norm, trace, asymmetry, spectral_norm
    method: str

    @property
    def n_samples(self) -> int:
        return int(self.group_counts.sum())


def _chunks(n: int, chunk_size: int, positions: np.ndarray | None = None):
    """Index chunks of at most chunk_size samples; with positions, each chunk holds one position only."""
    if positions is None:
        yield from (np.arange(s, min(s + chunk_size, n)) for s in range(0, n, chunk_size))
        return
    for p in np.unique(positions):
        idx = np.flatnonzero(positions == p)
        yield from (idx[s : s + chunk_size] for s in range(0, len(idx), chunk_size))


def autodiff_sums(
    adapter: Adapter,
    b: Boundary | str,
    x: torch.Tensor,
    groups: np.ndarray,
    n_groups: int,
    *,
    prefix_of=None,
    tokens_of=None,
    positions: np.ndarray | None = None,
    keep: np.ndarray | None = None,
    chunk_size: int,
    mode: str,
    spectral_norm: bool,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, dict[str, np.ndarray]]:
    """Σ_{s in g} J_b(s) per group (G, d, d) float64 by autodiff, and the summaries of the samples in keep.

    x (N, d) are the sample states; prefix_of(idx) -> (c, p, d) gives the in-context prefix of samples idx,
    which share the position p (positions (N,)); None means isolated. tokens_of(idx) gives the samples' token
    ids, (c,) isolated or (c, p + 1) in context (None where the adapter's updates do not read tokens).
    Tokenwise kinds (MLP, per-layer inputs) act on each position alone, so their in-context Jacobian is the
    isolated one and skips the prefix.
    """
    b = _parse(b)
    N, d = x.shape
    keep_set = np.zeros(N, dtype=bool) if keep is None else np.isin(np.arange(N), keep)
    tokenwise = b.kind in TOKENWISE_KINDS
    in_context = prefix_of is not None and not tokenwise
    sums = torch.zeros(n_groups, d, d, dtype=torch.float64, device=adapter.device)
    parts, order = [], []
    for idx in _chunks(N, chunk_size, positions if in_context else None):
        xc = x[idx].to(adapter.device, dtype)  # (c, d)
        tc = None if tokens_of is None else tokens_of(idx).to(adapter.device)  # (c,) or (c, p + 1)
        if in_context:
            pc = prefix_of(idx).to(adapter.device, dtype)  # (c, p, d)
            J = in_context_jacobians(adapter, b, pc, xc, mode=mode, tokens=tc)
        else:
            last = None if tc is None or tc.ndim == 1 else tc[:, -1]  # (c,) the samples' own tokens
            J = isolated_jacobians(adapter, b, xc, mode=mode, tokens=tc if last is None else last)  # (c, d, d)
        if not torch.isfinite(J).all():
            raise LayergeomError(f"non-finite Jacobian at {b.name} (samples {idx[0]}..{idx[-1]})")
        sums.index_add_(0, torch.as_tensor(groups[idx], device=sums.device), J.double())
        sel = keep_set[idx]
        if sel.any():
            parts.append(sample_summaries(J[torch.as_tensor(sel)], spectral_norm))
            order.append(idx[sel])
    summ = _concat(parts, SUMMARY_KEYS)
    if order:  # chunks by position visit samples out of order
        o = np.argsort(np.concatenate(order), kind="stable")
        summ = {k: v[o] for k, v in summ.items()}
    return sums, summ


def mean_jacobian(
    adapter: Adapter,
    b: Boundary | str,
    x: torch.Tensor,
    prefix: torch.Tensor | None = None,
    *,
    tokens: torch.Tensor | None = None,
    chunk_size: int,
    mode: str,
    spectral_norm: bool,
    dtype: torch.dtype,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """J̄_b = mean_s J_b(s) by autodiff over states x (N, d), with prefixes (N, T-1, d) in context (None:
    isolated), and the summaries of every sample (the reference route, one group). tokens are the samples'
    token ids, (N,) or with a prefix (N, T) (None where the adapter does not read them)."""
    N = x.shape[0]
    if N == 0:
        raise LayergeomError(f"no samples for the Jacobian at {_parse(b).name}")
    prefix_of = None if prefix is None else (lambda idx: prefix[idx])
    positions = None if prefix is None else np.full(N, prefix.shape[1])
    tokens_of = None if tokens is None else (lambda idx: tokens[torch.as_tensor(idx)])
    sums, summ = autodiff_sums(
        adapter, b, x, np.zeros(N, dtype=np.int64), 1, prefix_of=prefix_of, tokens_of=tokens_of, positions=positions,
        keep=np.arange(N), chunk_size=chunk_size, mode=mode, spectral_norm=spectral_norm, dtype=dtype,
    )  # fmt: skip
    summ["x_norm"] = x.double().norm(dim=-1).cpu().numpy()
    return (sums[0] / N).cpu().numpy(), summ


def structured_summaries(sub, x: torch.Tensor, *, spectral_norm: bool) -> dict[str, np.ndarray]:
    """Summaries of the per-sample Jacobians of x (n, d) formed from the description (one group per sample)."""
    d = x.shape[1]
    per = max(1, PRODUCT_ELEMENTS // (4 * d * d))
    parts = []
    for s in range(0, len(x), per):
        xc = x[s : s + per]
        parts.append(sample_summaries(structured_sums(sub, xc, torch.arange(len(xc)), len(xc)), spectral_norm))
    return _concat(parts, SUMMARY_KEYS)


def boundary_jacobian(
    adapter: Adapter,
    b: Boundary | str,
    x: torch.Tensor,
    groups: np.ndarray,
    n_groups: int,
    *,
    summary_idx: np.ndarray,
    context: str,
    method: str,
    prefix_of=None,
    tokens_of=None,
    positions: np.ndarray | None = None,
    chunk_size: int,
    mode: str,
    spectral_norm: bool,
    dtype: torch.dtype,
    n_check: int = 2,
) -> BoundaryJacobian:
    """J̄_b and the group means over sample states x (N, d) with group ids (N,), by the route of
    :func:`choose_method`; a structured route is first checked against the model on n_check samples
    (a failed check falls back to autodiff with a warning, or is an error under ``method: structured``).

    Summaries are computed for the samples summary_idx (formed from the description, or by autodiff).
    """
    b = _parse(b)
    N = x.shape[0]
    if N == 0:
        raise LayergeomError(f"no samples for the Jacobian at {b.name}")
    route, sub, reason = choose_method(adapter, b, context, method)
    if sub is not None:
        probe = summary_idx[:n_check] if len(summary_idx) else np.arange(min(n_check, N))
        ok, report = check_structure(adapter, b, sub, x[probe].to(adapter.device, dtype))
        if not ok:
            msg = f"{b.name}: the structured description disagrees with the model ({report})"
            if method == "structured":
                raise LayergeomError(msg + "; use spectra.method: auto or autodiff")
            log.warning("%s; falling back to autodiff", msg)
            route, sub, reason = "autodiff", None, "the description failed its check"
        else:
            log.info("%s: structured description checked on %d samples: %s", b.name, len(probe), report)
    log.info("%s: %s J̄ over %d samples in %d groups (%s)", b.name, route, N, n_groups, reason)
    g = torch.as_tensor(groups, dtype=torch.long)
    if sub is not None:
        sums = structured_sums(sub, x.to(adapter.device), g.to(adapter.device), n_groups)
        if not torch.isfinite(sums).all():
            raise LayergeomError(f"non-finite Jacobian at {b.name}")
        summ = structured_summaries(sub, x[summary_idx].to(adapter.device), spectral_norm=spectral_norm)
    else:
        sums, summ = autodiff_sums(
            adapter, b, x, groups, n_groups, prefix_of=prefix_of, tokens_of=tokens_of, positions=positions,
            keep=summary_idx,
            chunk_size=chunk_size, mode=mode, spectral_norm=spectral_norm, dtype=dtype,
        )  # fmt: skip
    counts = np.bincount(groups, minlength=n_groups)
    summ["x_norm"] = x[summary_idx].double().norm(dim=-1).cpu().numpy()
    group_means = (sums / torch.as_tensor(counts, dtype=torch.float64, device=sums.device)[:, None, None]).cpu()
    mean = (sums.sum(0) / N).cpu().numpy()
    return BoundaryJacobian(b.name, mean, group_means.numpy(), counts, summ, route)
