"""The exact mean Jacobian of a sublayer described as parts, without forming the per-sample Jacobians.

The adapter describes the isolated update of a boundary as branches ``post ∘ core ∘ pre`` (see
``adapters/parts.py``). Per sample s, with n = pre(x_s) and y = core(n):

- a norm's Jacobian is its constant scale times a per-sample scalar minus a low-rank term,
  ``J_norm = D (c I − U Vᵀ)``, D = diag(s), c = 1/r; RMSNorm: U = x/(d r³), V = x (rank 1); LayerNorm:
  U = [1/(d r), x̃/(d r³)], V = [1, x̃] with x̃ = x − mean x (rank 2: the centring and the variance);
- the core's Jacobian is a sum of terms ``L_t diag(g_t) R_t``: attention on one token ``W_O · W_V`` (g = 1:
  the softmax over one key is 1); an MLP ``W_down diag(act'(z)) W_up``; a gated MLP
  ``W_down [diag(act'(z_g) ⊙ z_u) W_gate + diag(act(z_g)) W_up]``.

So ``J_s = D_Q (c̃_s I − Ũ_s Ṽ_sᵀ) K_s (c_s I − U_s V_sᵀ)`` with ``K_s = Σ_t L_t diag(g_ts) R_t D_P``, and the sum
over the samples of a group is, exactly,

    Σ_s J_s = D_Q [ Σ_t L_t diag(Σ_s c̃_s c_s g_ts) R_t D_P                    (one d×m×d product per term)
                   − Σ_s c̃_s (K_s U_s) V_sᵀ − Σ_s c_s Ũ_s (K_sᵀ Ṽ_s)ᵀ + Σ_s Ũ_s (Ṽ_sᵀ K_s U_s) V_sᵀ ]

where K_s is only ever applied to the k ≤ 2 vectors of a sample. The constant diagonals of the norms leave the
sum, and their per-sample factors are scalars that fold into the weights of g, so the sample axis is
contracted before any d×m×d product: O(N·d·m + G·d²·m + N·k·d²) for G groups of N samples instead of
O(N·d²·m). Per-sample work runs in the weights' dtype; every sum over samples is accumulated in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..adapters.parts import MLP, Attention, Branch, Norm, Sublayer

#: per-sample tensors of one chunk hold at most about this many elements
CHUNK_ELEMENTS = 1 << 24
#: a (G, d, m) batch of scaled weights for the d×m×d products holds at most about this many elements
PRODUCT_ELEMENTS = 1 << 26


@dataclass
class NormJacobian:
    """Per-sample norm outputs and Jacobians ``diag(scale) (c I − U Vᵀ)``."""

    out: torch.Tensor  # (n, d)
    scale: torch.Tensor  # (d,)
    c: torch.Tensor  # (n,)
    U: torch.Tensor  # (n, k, d)
    V: torch.Tensor  # (n, k, d)


def norm_jacobian(norm: Norm | None, x: torch.Tensor) -> NormJacobian:
    """Output and Jacobian factors of a norm (or of the identity, for None) at the rows of x (n, d)."""
    n, d = x.shape
    if norm is None:
        empty = x.new_zeros(n, 0, d)
        return NormJacobian(x, x.new_ones(d), x.new_ones(n), empty, empty)
    s = norm.scale(d, x)  # (d,)
    if norm.kind == "rms":  # y = s ⊙ x / r, r = sqrt(mean x² + eps)
        xc = x
        r = torch.sqrt(x.pow(2).mean(-1) + norm.eps)  # (n,)
        U = (x / (d * r[:, None] ** 3))[:, None]  # (n, 1, d)
        V = x[:, None]
    else:  # y = s ⊙ x̃ / r + β, x̃ = x − mean x, r = sqrt(mean x̃² + eps)
        xc = x - x.mean(-1, keepdim=True)
        r = torch.sqrt(xc.pow(2).mean(-1) + norm.eps)
        ones = x.new_ones(n, d)
        U = torch.stack([ones / (d * r[:, None]), xc / (d * r[:, None] ** 3)], dim=1)  # (n, 2, d)
        V = torch.stack([ones, xc], dim=1)
    out = s * xc / r[:, None]
    if norm.bias is not None:
        out = out + norm.bias.to(x.dtype)
    return NormJacobian(out, s, 1 / r, U, V)


def _affine(part, x):
    y = x @ part.weight.T
    return y if part.bias is None else y + part.bias


def core_terms(core: Attention | MLP, n: torch.Tensor):
    """Output y (n_s, d) of a core at normed inputs n (n_s, d) and its Jacobian terms [(L, g or None, R)]."""
    if isinstance(core, Attention):
        return _affine(core.out, _affine(core.value, n)), [(core.out.weight, None, core.value.weight)]
    up = _affine(core.up, n)  # (n_s, m)
    if core.gate is None:
        a, da = torch.func.jvp(core.act, (up,), (torch.ones_like(up),))  # pointwise: the tangent is act'(z)
        return _affine(core.down, a), [(core.down.weight, da, core.up.weight)]
    gate = _affine(core.gate, n)
    a, da = torch.func.jvp(core.act, (gate,), (torch.ones_like(gate),))
    y = _affine(core.down, a * up)
    return y, [(core.down.weight, da * up, core.gate.weight), (core.down.weight, a, core.up.weight)]


@torch.no_grad()
def structured_forward(sub: Sublayer, x: torch.Tensor) -> torch.Tensor:
    """F(x) (n, d) from the description alone (to check it against the model's own update)."""
    out = 0
    for br in sub.branches:
        y, _ = core_terms(br.core, norm_jacobian(br.pre, x).out)
        out = out + norm_jacobian(br.post, y).out
    return out


def weights_dtype(sub: Sublayer) -> torch.dtype:
    """The dtype of the described weights (the compute dtype of the per-sample work)."""
    core = sub.branches[0].core
    return (core.out if isinstance(core, Attention) else core.down).weight.dtype


def _inner_width(sub: Sublayer) -> int:
    return max(
        int(br.core.value.weight.shape[0] if isinstance(br.core, Attention) else br.core.up.weight.shape[0])
        for br in sub.branches
    )


def _branch_sums(br: Branch, x: torch.Tensor, groups: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Σ_{s in g} J_s of one branch for every group g: (G, d, d) float64."""
    N, d = x.shape
    if N == 0:
        raise ValueError("no samples")
    f64 = torch.float64
    m_max = _inner_width(Sublayer((br,)))
    chunk = max(1, CHUNK_ELEMENTS // (m_max * 4))
    # per group: the weights of each core term's diagonal, and the d×d sum of the low-rank terms
    weights: list[torch.Tensor] | None = None
    Rs: list[torch.Tensor] | None = None
    low = torch.zeros(n_groups, d, d, dtype=f64, device=x.device)
    scale_post = None
    for start in range(0, N, chunk):
        xs, gs = x[start : start + chunk], groups[start : start + chunk]
        P = norm_jacobian(br.pre, xs)
        y, terms = core_terms(br.core, P.out)
        Q = norm_jacobian(br.post, y)
        scale_post = Q.scale
        if Rs is None:  # the weights are the same for every chunk
            Rs = [R if br.pre is None else R * P.scale for _, _, R in terms]  # R_t D_P  (m, d)
            # (G, m), or (G, 1) for a term without diagonal (attention): its product is shared by all groups
            weights = [torch.zeros(n_groups, 1 if g is None else R.shape[0], dtype=f64, device=x.device)
                       for (_, g, _), R in zip(terms, Rs)]  # fmt: skip
        w = (Q.c * P.c).to(f64)  # (n,)
        for t, (_, g, _) in enumerate(terms):
            weights[t].index_add_(0, gs, w[:, None] if g is None else w[:, None] * g.to(f64))
        k, kq = P.U.shape[1], Q.U.shape[1]
        if k == 0 and kq == 0:
            continue
        terms_rank = []  # (left (n, j, d), right (n, j, d)) pairs whose Σ_s Σ_j left ⊗ right enters with a sign
        if k:
            KU = sum(  # K_s U_s  (n, k, d)
                ((P.U @ R.T) * (1 if g is None else g[:, None, :])) @ L.T for (L, g, _), R in zip(terms, Rs)
            )
            terms_rank.append((-(Q.c[:, None, None] * KU), P.V))  # − c̃ (K U) Vᵀ
        if kq:
            KtV = sum(  # K_sᵀ Ṽ_s  (n, kq, d)
                ((Q.V @ L) * (1 if g is None else g[:, None, :])) @ R for (L, g, _), R in zip(terms, Rs)
            )
            terms_rank.append((-(P.c[:, None, None] * Q.U), KtV))  # − c Ũ (Kᵀ Ṽ)ᵀ
        if k and kq:
            M = Q.V @ KU.transpose(1, 2)  # Ṽᵀ K U  (n, kq, k)
            terms_rank.append((M.transpose(1, 2) @ Q.U, P.V))  # + Ũ (Ṽᵀ K U) Vᵀ
        for left, right in terms_rank:
            left, right = left.to(f64), right.to(f64)
            for g in torch.unique(gs).tolist():
                sel = gs == g
                low[g] += left[sel].reshape(-1, d).T @ right[sel].reshape(-1, d)  # Σ_s Σ_j left_sj right_sjᵀ
    # the diagonal terms: one L diag(ŵ_g) R D_P product per term and group, batched over groups
    total = low
    for (L, _, _), R, wt in zip(terms, Rs, weights):
        if wt.shape[1] == 1:  # no diagonal: ŵ_g L R D_P, one product for every group
            total += wt[:, :, None] * (L @ R).to(f64)[None]
            continue
        m = L.shape[1]
        per = max(1, PRODUCT_ELEMENTS // (d * m))
        for g0 in range(0, n_groups, per):
            scaled = L[None] * wt[g0 : g0 + per, None, :].to(L.dtype)  # (G', d, m)
            total[g0 : g0 + per] += (scaled @ R).to(f64)  # (G', d, d)
    return total * scale_post.to(f64)[None, :, None]  # D_Q on the rows


@torch.no_grad()
def structured_sums(sub: Sublayer, x: torch.Tensor, groups: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Σ_{s in g} J_s for every group g = 0..G-1 of samples x (N, d) with group ids (N,): (G, d, d) float64.

    x is cast to the dtype of the described weights; one group per sample gives the per-sample Jacobians.
    """
    x = x.to(weights_dtype(sub))
    groups = groups.to(x.device, torch.long)
    return sum(_branch_sums(br, x, groups, n_groups) for br in sub.branches)


def check_tolerance(sub: Sublayer) -> float:
    """Relative bound for the description vs the model's own update and autodiff Jacobian on a few samples.

    Both sides round at float32 level at least (the norms of transformers compute in float32 even in a
    float64 model), with sums over the widest inner dimension m: rounding stays near sqrt(m)·ε_fp32, a
    description error (a missing bias, weight or scale) is orders of magnitude larger.
    """
    return 32 * math.sqrt(_inner_width(sub)) * torch.finfo(torch.float32).eps
