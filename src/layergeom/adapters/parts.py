"""A sublayer described as parts, for the structured mean Jacobian (``spectral/structured.py``).

An adapter's ``structure(b)`` returns a :class:`Sublayer`: the update of boundary b on ONE token (a length-1
sequence, no context) as a sum of branches ``F(x) = Σ_k post_k(core_k(pre_k(x)))``, each built from

- :class:`Norm`: RMSNorm ``y = s ⊙ x / sqrt(mean(x²) + eps)`` or LayerNorm
  ``y = s ⊙ (x − mean x) / sqrt(var x + eps) + β``, with scale ``s = offset + weight`` (``offset`` 1 for
  norms that store ``w`` and multiply by ``1 + w``; a missing weight means ``s = 1``);
- :class:`Linear`: ``y = W x + b`` with W stored (out, in) like ``nn.Linear`` (transpose Conv1D weights);
- :class:`Attention`: attention on a length-1 sequence: the softmax over one key is 1, so the output is
  ``out(value(x))`` whatever the queries, keys, rotary tables, scalings or query/key norms (grouped-query
  value heads are repeated onto the query heads with :func:`repeat_heads`);
- :class:`MLP`: ``down(act(up x))`` or, gated, ``down(act(gate x) ⊙ up x)``, act a pointwise callable (the
  model's own activation module, so its exact formula and derivative are used).

A boundary that cannot be described (state-space mixers, mixtures of experts, anything unknown) returns None
and its Jacobian is taken by autodiff. The description holds views of the model's parameters, no copies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Norm:
    kind: str  # "rms" | "layer"
    eps: float
    weight: torch.Tensor | None = None  # (d,)
    bias: torch.Tensor | None = None  # (d,) LayerNorm only
    offset: float = 0.0  # scale = offset + weight

    def __post_init__(self):
        if self.kind not in ("rms", "layer"):
            raise ValueError(f"norm kind '{self.kind}' is not one of rms, layer")
        if self.kind == "rms" and self.bias is not None:
            raise ValueError("an RMSNorm has no bias")

    def scale(self, d: int, like: torch.Tensor) -> torch.Tensor:
        """The per-coordinate scale s = offset + weight, (d,) in the dtype of `like`."""
        if self.weight is None:
            return torch.ones(d, dtype=like.dtype, device=like.device)
        return self.weight.to(like.dtype) + self.offset


@dataclass(frozen=True)
class Linear:
    weight: torch.Tensor  # (out, in)
    bias: torch.Tensor | None = None  # (out,)


@dataclass(frozen=True)
class Attention:
    value: Linear  # (heads·head_dim, d): value heads already repeated onto the query heads
    out: Linear  # (d, heads·head_dim)


@dataclass(frozen=True)
class MLP:
    up: Linear  # (d_ff, d)
    down: Linear  # (d, d_ff)
    act: Callable[[torch.Tensor], torch.Tensor]  # pointwise
    gate: Linear | None = None  # (d_ff, d): down(act(gate x) ⊙ up x)


@dataclass(frozen=True)
class Branch:
    core: Attention | MLP
    pre: Norm | None = None
    post: Norm | None = None


@dataclass(frozen=True)
class Sublayer:
    """``F(x) = Σ_k branch_k(x)`` on one token; one branch for sequential blocks, two for a parallel residual."""

    branches: tuple[Branch, ...]

    @property
    def attends(self) -> bool:
        """Whether some branch mixes tokens (its in-context Jacobian differs from the isolated one)."""
        return any(isinstance(br.core, Attention) for br in self.branches)


# ---- helpers for the adapters ------------------------------------------------------------------------
def linear(module: nn.Module) -> Linear:
    """An ``nn.Linear`` as a part."""
    return Linear(module.weight, module.bias)


def conv1d(module: nn.Module, rows: slice = slice(None)) -> Linear:
    """A GPT-2 ``Conv1D`` (weight stored (in, out)) as a part; `rows` selects output features."""
    bias = None if module.bias is None else module.bias[rows]
    return Linear(module.weight[:, rows].T, bias)


def repeat_heads(part: Linear, n_heads: int, head_dim: int) -> Linear:
    """Value projection of n_kv heads repeated onto n_heads query heads (``repeat_kv``: each kv head serves
    n_heads / n_kv consecutive query heads)."""
    n_kv = part.weight.shape[0] // head_dim
    if n_kv == n_heads:
        return part
    rep = n_heads // n_kv
    w = part.weight.reshape(n_kv, head_dim, -1).repeat_interleave(rep, dim=0).reshape(n_heads * head_dim, -1)
    b = None if part.bias is None else part.bias.reshape(n_kv, head_dim).repeat_interleave(rep, dim=0).reshape(-1)
    return Linear(w, b)


def layer_norm(module: nn.Module) -> Norm | None:
    """An ``nn.LayerNorm`` over the last dimension as a part (None for anything else)."""
    if not isinstance(module, nn.LayerNorm) or len(module.normalized_shape) != 1:
        return None
    return Norm("layer", float(module.eps), module.weight, module.bias)


def rms_norm(module: nn.Module, offset: float = 0.0) -> Norm | None:
    """An RMSNorm module with a ``weight`` and ``variance_epsilon`` or ``eps`` as a part (None otherwise).

    The weight convention (``w`` or ``1 + w``) is not visible on the module: the adapter passes `offset`.
    """
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    weight = getattr(module, "weight", None)
    if eps is None or not isinstance(weight, torch.Tensor) or getattr(module, "bias", None) is not None:
        return None
    return Norm("rms", float(eps), weight, None, offset)


def gated_mlp(module: nn.Module) -> MLP | None:
    """A ``down(act(gate x) ⊙ up x)`` module with gate_proj, up_proj, down_proj and act_fn (None otherwise)."""
    names = ("gate_proj", "up_proj", "down_proj")
    if not all(isinstance(getattr(module, n, None), nn.Linear) for n in names) or not callable(
        getattr(module, "act_fn", None)
    ):
        return None
    return MLP(
        up=linear(module.up_proj), down=linear(module.down_proj), act=module.act_fn, gate=linear(module.gate_proj)
    )
