"""The residual stream as a sequence of sublayer steps, and the adapter contract every family implements.

Vocabulary (one for files, tables, figures and logs, like TransformerLens' hook points):

- ``L{l}.attn``  the state entering the attention sublayer of block ``l`` (the block input ``h_l``);
- ``L{l}.mlp``   the state entering the MLP sublayer (``h_l + Attn_l``), sequential-residual blocks only;
- ``L{l}.block`` the block input of a block with a single update (parallel residual, Mamba);
- ``final``      the output of the last block, before the final norm.

A boundary names both a state and the sublayer update applied there: ``x_next = x + F_b(x)``.
Module paths appear only inside the adapters; no other code names an architecture.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from ..names import FINAL, boundary_names  # noqa: F401  (re-exported)


@dataclass(frozen=True, order=True)
class Boundary:
    layer: int
    order: int  # position of the sublayer inside its block (attn 0, mlp 1)
    kind: str  # "attn" | "mlp" | "block"

    @property
    def name(self) -> str:
        return f"L{self.layer}.{self.kind}"

    @classmethod
    def parse(cls, name: str) -> Boundary:
        layer, kind = name.split(".")
        return cls(int(layer[1:]), {"attn": 0, "block": 0, "mlp": 1}[kind], kind)

    def __str__(self) -> str:
        return self.name


@dataclass
class Context:
    """Positions, per-layer-type additive attention masks and rotary tables for one call of the blocks."""

    positions: torch.Tensor  # (B, Tq) long
    masks: dict = field(default_factory=dict)  # layer type -> (B, 1, Tq, S) additive float mask
    rope: dict = field(default_factory=dict)  # layer type -> (cos, sin)


class RecordingKV:
    """A duck-typed KV cache for a clean full-sequence run: records each layer's keys and values."""

    def __init__(self):
        self.kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, key, value, layer_idx, *args, **kwargs):
        self.kv[layer_idx] = (key, value)
        return key, value


class PrefixKV:
    """A duck-typed KV cache for m single-token queries that share one clean prefix.

    ``update`` appends each query's own key/value after the clean keys of the whole window; the
    attention mask (built by ``Adapter.resume_context``) hides the clean keys at and after each
    query's position, so query a sees exactly its causal prefix plus itself.
    """

    def __init__(self, kv: dict[int, tuple[torch.Tensor, torch.Tensor]], m: int):
        self.kv, self.m = kv, m

    def update(self, key, value, layer_idx, *args, **kwargs):
        k0, v0 = self.kv[layer_idx]  # (1, heads, T, dh)
        shape = (self.m, *k0.shape[1:])
        return torch.cat([k0.expand(shape), key], dim=2), torch.cat([v0.expand(shape), value], dim=2)


@dataclass
class CleanRun:
    """What a clean pass over one window leaves behind for cheap resumes."""

    logits: torch.Tensor  # (T, V) fp32
    states: list[torch.Tensor]  # block inputs h_0 .. h_{L-1} and the final state, each (T, d)
    cache: object  # family-specific prefix cache (keys/values, or recurrent states)
    positions: torch.Tensor | None = None  # positions the cache was prepared for (recurrent models)


def cache_kwarg(module: nn.Module) -> str:
    """transformers 5.x renames ``past_key_values`` to ``cache``; use whichever the block takes."""
    params = inspect.signature(module.forward).parameters
    for name in ("cache", "past_key_values", "layer_past"):
        if name in params:
            return name
    raise TypeError(f"{type(module).__name__}.forward takes no cache argument")


class Adapter:
    """One architecture family seen as a residual stream of sublayer steps.

    Subclasses set ``family``, ``model_types`` and ``kinds`` and implement the small set of
    module-path methods below; everything a stage needs (capture, isolated updates, patched
    resumes) is built here from those.
    """

    family: ClassVar[str]
    model_types: ClassVar[tuple[str, ...]]
    kinds: ClassVar[tuple[str, ...]] = ("attn", "mlp")

    def __init__(self, model: nn.Module):
        model_type = getattr(model.config, "model_type", None)
        if model_type not in self.model_types:
            raise ValueError(f"the {self.family} adapter handles model types {self.model_types}, got '{model_type}'")
        self.model = model.eval()
        self.config = model.config
        self.check_config()

    # ---- facts ---------------------------------------------------------------------------------
    def check_config(self) -> None:
        """Refuse configurations the adapter cannot represent faithfully."""

    @property
    def n_layers(self) -> int:
        return len(self.blocks())

    @property
    def d_model(self) -> int:
        return int(self.config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def boundaries(self) -> list[Boundary]:
        return [Boundary.parse(n) for n in boundary_names(self.kinds, self.n_layers)]

    def layer_type(self, j: int) -> str:
        """Attention layer type of block j (``full`` or ``sliding``); selects mask and rotary table."""
        return "full"

    # ---- family-specific module paths (override) -----------------------------------------------
    def blocks(self) -> nn.ModuleList:
        raise NotImplementedError

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> the residual stream entering block 0 (B, T, d)."""
        raise NotImplementedError

    def final_norm(self) -> nn.Module:
        raise NotImplementedError

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Final state (..., d) -> next-token logits (..., V), in fp32."""
        return self.model.get_output_embeddings()(self.final_norm()(h)).float()

    def pre_mlp_module(self, j: int) -> nn.Module | None:
        """A module whose input is the ``L{j}.mlp`` state (None where the block has one update)."""
        return None

    def sublayer(self, b: Boundary, x: torch.Tensor, ctx: Context | None) -> torch.Tensor:
        """The update ``F_b(x)`` of boundary b on a sequence x (B, T, d); ctx None means T=1, no context."""
        raise NotImplementedError

    def call_block(self, j: int, h: torch.Tensor, ctx: Context, cache) -> torch.Tensor:
        raise NotImplementedError

    def rope(self, h: torch.Tensor, positions: torch.Tensor, layer_type: str):
        """Rotary (cos, sin) for the given positions, or None for families without rotary embeddings."""
        return None

    def window(self, layer_type: str) -> int | None:
        return None

    # ---- contexts and masks ----------------------------------------------------------------------
    def _context(self, h, q_pos, k_pos, allowed_extra=None) -> Context:
        """Additive masks for queries at q_pos (B, Tq) over keys at k_pos (B, S); causal (+ window)."""
        ctx = Context(positions=q_pos)
        neg = torch.finfo(h.dtype).min
        for lt in {self.layer_type(j) for j in range(self.n_layers)}:
            allowed = k_pos[:, None, :] <= q_pos[:, :, None]  # (B, Tq, S)
            if allowed_extra is not None:
                allowed = allowed & allowed_extra
            w = self.window(lt)
            if w is not None:
                allowed = allowed & (k_pos[:, None, :] > q_pos[:, :, None] - w)
            ctx.masks[lt] = torch.zeros(allowed.shape, dtype=h.dtype, device=h.device).masked_fill(~allowed, neg)[
                :, None
            ]
            ctx.rope[lt] = self.rope(h, q_pos, lt)
        return ctx

    def causal_context(self, h: torch.Tensor) -> Context:
        """Context for a full causal pass over h (B, T, d), positions 0..T-1."""
        B, T = h.shape[:2]
        pos = torch.arange(T, device=h.device)[None].expand(B, T)
        return self._context(h, pos, pos)

    def resume_context(self, h: torch.Tensor, positions: torch.Tensor, T: int) -> Context:
        """Context for m single-token queries at `positions` over [clean keys 0..T-1, own key]."""
        m = positions.shape[0]
        q = positions[:, None]  # (m, 1)
        k = torch.cat([torch.arange(T, device=h.device)[None].expand(m, T), q], dim=1)  # (m, T+1)
        prefix_ok = torch.cat(
            [torch.arange(T, device=h.device)[None] < q, torch.ones(m, 1, dtype=torch.bool, device=h.device)], dim=1
        )
        return self._context(h, q, k, prefix_ok[:, None, :])

    # ---- (a) capture ----------------------------------------------------------------------------
    @torch.no_grad()
    def capture(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """The raw residual stream at every boundary and ``final`` during a plain forward pass.

        Returns name -> (B, T, d), hooked on the block inputs, the pre-MLP norms and the final norm,
        so that no final norm is ever mistaken for the stream.
        """
        out: dict[str, torch.Tensor] = {}
        handles = []

        def grab(name):
            def hook(module, args, kwargs):
                x = args[0] if args else kwargs["hidden_states"]
                out[name] = x.detach()

            return hook

        try:
            for j, block in enumerate(self.blocks()):
                handles.append(block.register_forward_pre_hook(grab(f"L{j}.{self.kinds[0]}"), with_kwargs=True))
                mod = self.pre_mlp_module(j)
                if mod is not None:
                    handles.append(mod.register_forward_pre_hook(grab(f"L{j}.mlp"), with_kwargs=True))
            handles.append(self.final_norm().register_forward_pre_hook(grab(FINAL), with_kwargs=True))
            self.model(input_ids=input_ids.to(self.device), use_cache=False)
        finally:
            for h in handles:
                h.remove()
        return out

    # ---- (b) isolated sublayer updates ---------------------------------------------------------
    def update(self, b: Boundary | str, x: torch.Tensor) -> torch.Tensor:
        """``F_b(x)`` for each row of x (N, d) fed alone as a length-1 sequence (no context)."""
        b = Boundary.parse(b) if isinstance(b, str) else b
        return self.sublayer(b, x[:, None, :], None)[:, 0, :]

    def update_in_context(self, b: Boundary | str, prefix: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``F_b`` at the last position of [prefix (N, T-1, d), x (N, d)]: the same-position update in context."""
        b = Boundary.parse(b) if isinstance(b, str) else b
        seq = torch.cat([prefix, x[:, None, :]], dim=1)
        return self.sublayer(b, seq, self.causal_context(seq))[:, -1, :]

    # ---- (c) resume from a boundary with one position patched -----------------------------------
    @torch.no_grad()
    def clean_run(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> CleanRun:
        """Run one window (1, T) block by block, keeping every block input and the prefix cache."""
        h = self.embed(input_ids.to(self.device))
        ctx = self.causal_context(h)
        cache = RecordingKV()
        states = []
        for j in range(self.n_layers):
            states.append(h[0])
            h = self.call_block(j, h, ctx, cache)
        states.append(h[0])
        return CleanRun(logits=self.head(h)[0], states=states, cache=cache.kv)

    @torch.no_grad()
    def resume(self, run: CleanRun, layer: int, states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Next-token logits (m, V) when the input of block `layer` is replaced at one position each.

        states (m, d) are the patched block inputs (layer == n_layers patches the final state) and
        positions (m,) their token positions; each row is one patched single-token query over the
        clean run's cached prefix, so a patch costs about one token through the remaining blocks.
        """
        h = states[:, None, :].to(self.device, run.states[0].dtype)
        positions = positions.to(self.device)
        ctx = self.resume_context(h, positions, run.states[0].shape[0])
        cache = PrefixKV(run.cache, h.shape[0])
        for j in range(layer, self.n_layers):
            h = self.call_block(j, h, ctx, cache)
        return self.head(h)[:, 0, :]

    @torch.no_grad()
    def patched_logits_full(self, input_ids: torch.Tensor, layer: int, position: int, state: torch.Tensor):
        """Reference path: a full forward with the input of block `layer` overwritten at one position."""

        def patch(module, args, kwargs):
            x = (args[0] if args else kwargs["hidden_states"]).clone()
            x[:, position] = state.to(x)
            if args:
                return (x, *args[1:]), kwargs
            kwargs["hidden_states"] = x
            return args, kwargs

        mod = self.blocks()[layer] if layer < self.n_layers else self.final_norm()
        handle = mod.register_forward_pre_hook(patch, with_kwargs=True)
        try:
            logits = self.model(input_ids=input_ids.to(self.device), use_cache=False).logits
        finally:
            handle.remove()
        return logits[0, position].float()
