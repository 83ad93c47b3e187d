"""Functional test: replace the stream leaving block l at the anchor position by t and measure the KL.

For every anchor a and layer l, KL(p_clean || p_patched) of the next-token distribution at a, where the
patched run has the input of block l+1 (the final state for the last block) replaced by t = T(h_l(a)) at
position a only. Positions before a are causal and unaffected, so one clean pass per window caches the
prefix and each patch costs one token through the remaining blocks (``Adapter.resume``); the anchors of
consecutive windows are resumed together so that those tokens go through the blocks as matrix products.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from ..resume.snapshots import NO_SNAPSHOTS, Snapshots
from ..runtime import progress

log = logging.getLogger("layergeom")


def kl_from_logits(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || q) = sum_v p_v (log p_v - log q_v) of the softmax distributions of rows of (fp32) logits, nat."""
    p = torch.softmax(p_logits.double(), dim=-1)
    return kl_against(p_logits, p, q_logits[:, None, :])[:, 0]


def kl_against(p_logits: torch.Tensor, p: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || q_j) for n patched distributions per clean one: p_logits (m, V) with p = softmax(p_logits) in
    float64 (computed once per anchor), q_logits (m, n, V). Returns (m, n) float64.

    With D = Q - P (logits), KL = log sum_v p_v e^{D_v} - sum_v p_v D_v: both terms are of the size of the
    logit change, and log1p/expm1 avoid rounding near 1, so the difference keeps its precision for tiny
    patches (log p - log q from log-softmaxes, each ~11 nats for a 50k vocabulary, leaves a floor of ~1e-6
    nats in float32 and ~1e-15 in float64). The reduction runs in float64 (two batched dot products with
    p); D is formed in fp32, exactly when the logits are close.
    """
    D = (q_logits - p_logits[:, None, :]).double()  # (m, n, V)
    pc = p[:, :, None]  # (m, V, 1)
    total = p.sum(-1, keepdim=True)  # 1 up to rounding, divided out exactly
    mean = torch.bmm(D, pc)[..., 0] / total  # sum_v p_v D_v
    top = D.amax(-1, keepdim=True)
    if float(top.max()) < 50:  # log1p/expm1: no rounding floor near 1 (e^D stays far from overflow)
        lse = torch.log1p(torch.bmm(D.expm1_(), pc)[..., 0] / total)
    else:  # a huge logit increase: shift by the largest D first
        lse = top[..., 0] + torch.log(torch.bmm(D.sub_(top).exp_(), pc)[..., 0] / total)
    return lse - mean


def _by_window(windows: np.ndarray) -> dict[int, np.ndarray]:
    order = np.argsort(windows, kind="stable")
    uniq, starts = np.unique(windows[order], return_index=True)
    return {int(w): order[s:e] for w, s, e in zip(uniq, starts, [*starts[1:], len(order)])}


def _chunks(groups: dict[int, np.ndarray], rows_per_anchor: int, max_rows: int) -> list[list[tuple[int, np.ndarray]]]:
    """Consecutive windows whose patched rows (anchors x variants) fit in max_rows; at least one window each."""
    chunks, chunk, n = [], [], 0
    for w, idx in groups.items():
        rows = len(idx) * rows_per_anchor
        if chunk and n + rows > max_rows:
            chunks.append(chunk)
            chunk, n = [], 0
        chunk.append((w, idx))
        n += rows
    return [*chunks, chunk] if chunk else chunks


@torch.no_grad()
def patched_kl(
    adapter,
    token_ids: np.ndarray,
    windows: np.ndarray,
    positions: np.ndarray,
    patches: dict[int, np.ndarray],
    max_rows: int,
    snapshots: Snapshots = NO_SNAPSHOTS,
) -> dict[int, np.ndarray]:
    """KL at every anchor for every patched state, reusing one clean pass per window.

    token_ids (n_windows, T); windows, positions (m,) the anchors' window and position; patches maps a
    layer l to states (n_variants, m, d) that replace the input of block l+1 at the anchors (one variant
    per map class). Returns layer -> KL (n_variants, m) float64. Consecutive windows are resumed together
    (``adapter.stack_runs``): one ``adapter.resume`` call per (chunk of windows, layer) covers all their
    anchors and variants, at most ``max_rows`` rows unless a single window has more. ``snapshots``
    (``layergeom.resume.snapshots.Snapshots``; default none) resumes after its last snapshot (the KL of the chunks of
    windows done) and saves as it goes; each chunk's KL depends on that chunk only.
    """
    device = adapter.device
    out = {l: np.full(p.shape[:2], np.nan) for l, p in patches.items()}
    n_var = {p.shape[0] for p in patches.values()}
    if len(n_var) > 1:
        raise ValueError("every layer needs the same number of patched variants")
    n_var = n_var.pop() if n_var else 1
    groups = _by_window(np.asarray(windows))
    chunks = _chunks(groups, n_var, max_rows)
    last = snapshots.load()
    done = 0 if last is None else last["done"]
    if last is not None:
        out = last["state"]
    bar = progress(total=len(groups), desc="patched KL", unit="window", initial=sum(len(c) for c in chunks[:done]))
    for ci, chunk in enumerate(chunks):
        if ci < done:
            continue
        runs, cleans, pos, win = [], [], [], []
        for i, (w, idx) in enumerate(chunk):
            p = torch.as_tensor(np.asarray(positions)[idx], dtype=torch.long, device=device)  # (mw,)
            run = adapter.clean_run(torch.as_tensor(token_ids[w], dtype=torch.long, device=device)[None], p)
            cleans.append(run.logits[p])  # (mw, V)
            run.logits = None  # only the anchors' rows are needed; a window's logits are T x V
            runs.append(run)
            pos.append(p)
            win.append(torch.full_like(p, i))
        idx = np.concatenate([i for _, i in chunk])
        run, clean, pos, win = adapter.stack_runs(runs), torch.cat(cleans), torch.cat(pos), torch.cat(win)
        p = torch.softmax(clean.double(), dim=-1)  # once per anchor, for every layer and variant
        pos, win = pos.repeat_interleave(n_var), win.repeat_interleave(n_var)
        for l, states in patches.items():
            # rows anchor-major: the variants of one anchor are consecutive
            s = torch.as_tensor(states[:, idx], device=device).transpose(0, 1).reshape(len(idx) * n_var, -1)
            logits = adapter.resume(run, l + 1, s, pos, win)  # (mc * n_var, V)
            kl = kl_against(clean, p, logits.view(len(idx), n_var, -1))  # (mc, n_var)
            out[l][:, idx] = kl.T.cpu().numpy()
        bar.update(len(chunk))
        snapshots.save(ci + 1, lambda: out)
    bar.close()
    return out


@torch.no_grad()
def patched_kl_slow(
    adapter,
    token_ids: np.ndarray,
    windows: np.ndarray,
    positions: np.ndarray,
    patches: dict[int, np.ndarray],
) -> dict[int, np.ndarray]:
    """Reference path for :func:`patched_kl`: a full forward pass per patched state (``patched_logits_full``)."""
    out = {l: np.full(p.shape[:2], np.nan) for l, p in patches.items()}
    device = adapter.device
    for i, (w, p) in enumerate(zip(windows, positions)):
        ids = torch.as_tensor(token_ids[int(w)], dtype=torch.long, device=device)[None]
        clean = adapter.model(input_ids=ids, use_cache=False).logits[0, int(p)].float()
        for l, states in patches.items():
            for v in range(states.shape[0]):
                state = torch.as_tensor(states[v, i], device=device)
                logits = adapter.patched_logits_full(ids, l + 1, int(p), state)
                out[l][v, i] = float(kl_from_logits(clean[None], logits[None])[0])
    return out
