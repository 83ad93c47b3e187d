"""The residual stream as a sequence of sublayer steps, and the adapter contract every family implements.

Vocabulary (one for files, tables, figures and logs, like TransformerLens' hook points):

- ``L{l}.attn``  the state entering the attention sublayer of block ``l`` (the block input ``h_l``);
- ``L{l}.mlp``   the state entering the MLP sublayer (``h_l + Attn_l``), sequential-residual blocks only;
- ``L{l}.block`` the block input of a block with a single update (parallel residual, Mamba);
- ``L{l}.pli``   the state entering a per-layer-input step (Gemma-4: after the MLP); its update also applies
  the block's output scale, so that it ends the block;
- ``final``      the output of the last block, before the final norm.

A boundary names both a state and the sublayer update applied there: ``x_next = x + F_b(x)``.
Module paths appear only inside the adapters; no other code names an architecture.

Token ids are part of the contract: an update may depend on the token at its position as well as on the
state (Gemma-4's per-layer token embeddings; keys and values shared from earlier layers). Every entry
point takes them as an optional ``tokens`` argument (``update``, ``update_in_context``, ``sublayer``);
capture and clean runs have them from their input ids, and a clean run keeps them for its resumes.
Families whose updates do not depend on them ignore them; ``uses_tokens`` says which do.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from ..names import FAMILY_KINDS, FINAL, KIND_ORDER, boundary_names, parse_boundary  # noqa: F401  (re-exported)
from .plain import check_plain

# transformers' attention layer types -> the short names used for masks and rotary tables
HF_LAYER_TYPES = {"sliding_attention": "sliding", "full_attention": "full"}


@dataclass(frozen=True, order=True)
class Boundary:
    layer: int
    order: int  # position of the sublayer inside its block (attn/block 0, mlp 1, pli 2)
    kind: str  # one of names.KINDS

    @property
    def name(self) -> str:
        return f"L{self.layer}.{self.kind}"

    @classmethod
    def parse(cls, name: str) -> Boundary:
        layer, kind = parse_boundary(name)
        if kind not in KIND_ORDER:
            raise ValueError(f"boundary '{name}': unknown kind '{kind}' (known: {', '.join(KIND_ORDER)})")
        return cls(layer, KIND_ORDER[kind], kind)

    def __str__(self) -> str:
        return self.name


@dataclass
class Context:
    """Positions, per-layer-type additive attention masks and rotary tables for one call of the blocks."""

    positions: torch.Tensor  # (B, Tq) long
    masks: dict = field(default_factory=dict)  # layer type -> (B, 1, Tq, S) additive float mask
    rope: dict = field(default_factory=dict)  # layer type -> (cos, sin)
    tokens: torch.Tensor | None = None  # (B, Tq) token ids of the queries, where known
    extra: dict = field(default_factory=dict)  # family-specific per-call state (e.g. shared keys/values)


class RecordingKV:
    """A duck-typed KV cache for a clean full-sequence run: records each layer's keys and values."""

    def __init__(self):
        self.kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, key, value, layer_idx, *args, **kwargs):
        self.kv[layer_idx] = (key, value)
        return key, value


class PrefixKV:
    """A duck-typed KV cache for single-token queries laid out as a (windows, r) grid.

    The clean keys/values of the run's windows are stacked on the batch axis; grid row w continues
    window ``windows[w]``. ``update`` appends the r queries' own keys/values after the clean keys of
    their window (no per-query copy of the prefix); the attention mask (``Adapter.resume_context``) lets
    query i see the clean keys before its position and, of the appended keys, only its own.
    """

    def __init__(self, kv: dict[int, tuple[torch.Tensor, torch.Tensor]], windows: torch.Tensor):
        self.kv, self.windows = kv, windows

    def update(self, key, value, layer_idx, *args, **kwargs):
        k0, v0 = self.kv[layer_idx]  # (W, heads, T, dh)
        return (
            torch.cat([k0.index_select(0, self.windows), key], dim=2),
            torch.cat([v0.index_select(0, self.windows), value], dim=2),
        )


def query_grid(windows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lay m rows out as (W', r): one grid row per window present, r = the most rows of one window.

    Returns (window ids (W',), index (W', r) of the row in each slot, valid (W', r)); empty slots repeat
    their window's first row and are dropped from the results.
    """
    wids, inverse, counts = torch.unique(windows, return_inverse=True, return_counts=True)
    m = windows.shape[0]
    order = torch.argsort(inverse, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.empty_like(order)
    slot[order] = torch.arange(m, device=windows.device) - starts[inverse[order]]
    index = torch.full((len(wids), int(counts.max())), -1, dtype=torch.long, device=windows.device)
    index[inverse, slot] = torch.arange(m, device=windows.device)
    valid = index >= 0
    return wids, torch.where(valid, index, index[:, :1]), valid


@dataclass
class CleanRun:
    """What a clean pass over one window (or, from ``Adapter.stack_runs``, several) leaves behind for resumes."""

    logits: torch.Tensor | None  # (T, V) fp32; None for stacked runs
    states: list[torch.Tensor]  # block inputs h_0 .. h_{L-1} and the final state, each (T, d) or (W, T, d)
    cache: object  # family-specific prefix cache (keys/values (W, heads, T, dh), or recurrent states)
    positions: torch.Tensor | None = None  # positions the cache was prepared for (recurrent models)
    ids: torch.Tensor | None = None  # (W, T) token ids of the window(s), for token-dependent updates

    @property
    def tokens(self) -> int:
        """Window length T."""
        return self.states[0].shape[-2]


def cache_kwarg(module: nn.Module) -> str:
    """transformers 5.x renames ``past_key_values`` (Mamba: ``cache_params``, up to 5.23) to ``cache``; use whichever
    the block takes."""
    params = inspect.signature(module.forward).parameters
    for name in ("cache", "past_key_values", "cache_params", "layer_past"):
        if name in params:
            return name
    raise TypeError(f"{type(module).__name__}.forward takes no cache argument")


class Adapter:
    """One architecture family seen as a residual stream of sublayer steps.

    Subclasses set ``family`` and ``model_types`` and implement the small set of module-path methods
    below; everything a stage needs (capture, isolated updates, patched resumes) is built here from those.
    ``kinds`` (the boundary kinds of one block, in stream order) is read from the family's entry in
    ``names.FAMILY_KINDS``, the one place they are declared (torch-free, for the workflow's DAG).
    """

    family: ClassVar[str]
    model_types: ClassVar[tuple[str, ...]]
    kinds: ClassVar[tuple[str, ...]]  # = names.FAMILY_KINDS[family], set by __init_subclass__
    uses_tokens: ClassVar[bool] = False  # whether some update depends on the token ids (then pass them)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "kinds" in vars(cls):
            raise TypeError(f"{cls.__name__}: declare the kinds of family '{cls.family}' in names.FAMILY_KINDS")
        if cls.family not in FAMILY_KINDS:
            raise TypeError(
                f"{cls.__name__}: family '{cls.family}' has no entry in names.FAMILY_KINDS (its boundary kinds)"
            )
        cls.kinds = FAMILY_KINDS[cls.family]

    def __init__(self, model: nn.Module):
        model_type = getattr(model.config, "model_type", None)
        if model_type not in self.model_types:
            raise ValueError(f"the {self.family} adapter handles model types {self.model_types}, got '{model_type}'")
        self.model = model.eval()
        check_plain(self.model)  # the model's own torch code: no hub kernel or fused package in its place
        self.config = model.config
        self.text_config = model.config.get_text_config()  # the decoder's settings (multimodal wrappers)
        self.check_config()

    # ---- facts ---------------------------------------------------------------------------------
    def check_config(self) -> None:
        """Refuse configurations the adapter cannot represent faithfully."""

    @property
    def n_layers(self) -> int:
        return len(self.blocks())

    @property
    def d_model(self) -> int:
        return int(self.text_config.hidden_size)

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

    def capture_points(self, j: int) -> dict[str, nn.Module]:
        """Kind -> a module of block j whose first input is the state at ``L{j}.kind``, for the kinds after
        the first (the block input is hooked on the block itself)."""
        mod = self.pre_mlp_module(j)
        return {} if mod is None else {"mlp": mod}

    def capture_extra(self, j: int, out: dict[str, torch.Tensor]) -> list:
        """Extra hooks filling ``out`` with states no module takes as its input (returns the handles)."""
        return []

    def sublayer(
        self, b: Boundary, x: torch.Tensor, ctx: Context | None, tokens: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The update ``F_b(x)`` of boundary b on a sequence x (B, T, d); ctx None means T=1, no context.

        tokens (B, T) are the token ids at those positions (needed where ``uses_tokens``)."""
        raise NotImplementedError

    def call_block(self, j: int, h: torch.Tensor, ctx: Context, cache) -> torch.Tensor:
        """Block j on h (B, Tq, d) with the masks, rotary tables and token ids of ctx, through cache."""
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
        """Context for a (W', r) grid of single-token queries at `positions` over [clean keys 0..T-1, the
        r queries' own keys]: query i sees the clean keys before its position and its own key."""
        n, r = positions.shape
        clean = torch.arange(T, device=h.device)
        k = torch.cat([clean[None].expand(n, T), positions], dim=1)  # (W', T + r)
        allowed = torch.cat(
            [
                (clean[None, None, :] < positions[:, :, None]),  # (W', r, T)
                torch.eye(r, dtype=torch.bool, device=h.device)[None].expand(n, r, r),
            ],
            dim=2,
        )
        return self._context(h, positions, k, allowed)

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
                for kind, mod in self.capture_points(j).items():
                    handles.append(mod.register_forward_pre_hook(grab(f"L{j}.{kind}"), with_kwargs=True))
                handles += self.capture_extra(j, out)
            handles.append(self.final_norm().register_forward_pre_hook(grab(FINAL), with_kwargs=True))
            self.model(input_ids=input_ids.to(self.device), use_cache=False)
        finally:
            for h in handles:
                h.remove()
        return out

    # ---- (b) isolated sublayer updates ---------------------------------------------------------
    def update(self, b: Boundary | str, x: torch.Tensor, tokens: torch.Tensor | None = None) -> torch.Tensor:
        """``F_b(x)`` for each row of x (N, d) fed alone as a length-1 sequence (no context).

        tokens (N,) are the rows' token ids (needed where ``uses_tokens``)."""
        b = Boundary.parse(b) if isinstance(b, str) else b
        tok = None if tokens is None else tokens.reshape(-1, 1).to(self.device)
        return self.sublayer(b, x[:, None, :], None, tok)[:, 0, :]

    def update_in_context(
        self, b: Boundary | str, prefix: torch.Tensor, x: torch.Tensor, tokens: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``F_b`` at the last position of [prefix (N, T-1, d), x (N, d)]: the same-position update in context.

        tokens (N, T) are the token ids of the whole sequence, prefix and last position (where ``uses_tokens``)."""
        b = Boundary.parse(b) if isinstance(b, str) else b
        seq = torch.cat([prefix, x[:, None, :]], dim=1)
        tok = None if tokens is None else tokens.reshape(seq.shape[:2]).to(self.device)
        return self.sublayer(b, seq, self.causal_context(seq), tok)[:, -1, :]

    # ---- (b') the isolated update as parts, for the structured mean Jacobian ---------------------
    def structure(self, b: Boundary | str):
        """The isolated update of boundary b as a ``parts.Sublayer`` (linear maps, norms, a pointwise
        activation), or None where the family describes none: its Jacobians are then taken by autodiff."""
        return None

    # ---- (c) resume from a boundary with one position patched -----------------------------------
    @torch.no_grad()
    def clean_run(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> CleanRun:
        """Run one window (1, T) block by block, keeping every block input and the prefix cache."""
        input_ids = input_ids.to(self.device)
        h = self.embed(input_ids)
        ctx = self.causal_context(h)
        ctx.tokens = input_ids
        cache = RecordingKV()
        states = []
        for j in range(self.n_layers):
            states.append(h[0])
            h = self.call_block(j, h, ctx, cache)
        states.append(h[0])
        return CleanRun(logits=self.head(h)[0], states=states, cache=cache.kv, ids=input_ids)

    def stack_runs(self, runs: list[CleanRun]) -> CleanRun:
        """Single-window clean runs as one, so that one ``resume`` call serves rows of all their windows.

        Resuming many windows' anchors together turns the remaining blocks' matrix-vector products into
        matrix products (the weights are read once per call, not once per window).
        """
        kv = {j: tuple(torch.cat([r.cache[j][i] for r in runs]) for i in (0, 1)) for j in runs[0].cache}
        return CleanRun(logits=None, states=self._stack_states(runs), cache=kv, ids=self._stack_ids(runs))

    @staticmethod
    def _stack_ids(runs: list[CleanRun]) -> torch.Tensor | None:
        return None if any(r.ids is None for r in runs) else torch.cat([r.ids for r in runs])  # (W, T)

    @staticmethod
    def _stack_states(runs: list[CleanRun]) -> list[torch.Tensor]:
        return [torch.stack([r.states[j] for r in runs]) for j in range(len(runs[0].states))]

    @torch.no_grad()
    def resume(
        self,
        run: CleanRun,
        layer: int,
        states: torch.Tensor,
        positions: torch.Tensor,
        windows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Next-token logits (m, V) when the input of block `layer` is replaced at one position each.

        states (m, d) are the patched block inputs (layer == n_layers patches the final state) and
        positions (m,) their token positions; each row is one patched single-token query over the
        clean run's cached prefix, so a patch costs about one token through the remaining blocks.
        For a stacked run (``stack_runs``), windows (m,) says which of its windows each row continues.
        """
        positions = positions.to(self.device)
        windows = torch.zeros_like(positions) if windows is None else windows.to(self.device)
        wids, index, valid = query_grid(windows)
        h = states.to(self.device, run.states[0].dtype)[index]  # (W', r, d)
        ctx = self.resume_context(h, positions[index], run.tokens)
        if run.ids is not None:
            ctx.tokens = run.ids[wids[:, None], positions[index]]  # (W', r) the queries' own tokens
        cache = PrefixKV(run.cache, wids)
        for j in range(layer, self.n_layers):
            h = self.call_block(j, h, ctx, cache)
        # back to the callers' row order before the (large) head, dropping the empty slots
        return self.head(h[valid][torch.argsort(index[valid])])  # (m, V)

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
