"""Gemma 4 text decoder (``gemma4_text``, and the text decoder inside the multimodal ``gemma4`` wrapper).

A block, read from ``Gemma4TextDecoderLayer.forward`` (transformers 5.x)::

    h1  = h  + post_attn_norm(attn(input_norm(h)))                  # attention, sandwich norms
    h2  = h1 + post_ff_norm(mlp(pre_ff_norm(h1)) [+ MoE branch])    # MLP (+ experts in some sizes)
    out = s * (h2 + post_pli_norm(W_p(act(W_g h2) * e_l(tok))))      # per-layer input step, layer scalar s

Decisions:

- **Three boundaries per block**: ``L{l}.attn`` (h), ``L{l}.mlp`` (h1) and ``L{l}.pli`` (h2), so that
  ``x_next = x + F_b(x)`` holds exactly at each. The layer scalar multiplies the whole stream, so it is
  folded into the update that ends the block: ``F_pli(x) = s·(x + P(x, tok)) − x``; the attention and MLP
  updates are the plain sublayer outputs. A model without per-layer inputs keeps the ``pli`` boundary with
  ``F_pli(x) = (s − 1)·x`` (one boundary list per family, known from the config alone).
- **Token ids**: the per-layer input e_l(tok) (the per-layer token embedding mixed with a projection of the
  token's own input embedding) depends on the token only, not on the stream: ``F_pli`` takes the token ids
  through the adapter contract (``tokens=``); it acts on each position alone (a tokenwise kind).
- **Keys and values shared across layers** (``num_kv_shared_layers``): the last layers attend over the
  keys/values of the last earlier layer of the same attention type (the producer). The state x of such a
  layer enters its attention only through the queries; its keys/values are the producer's over the same
  tokens. The isolated update of a shared layer feeds the token alone as a length-1 sequence *through the
  producer* as well (its one key/value is the producer's for that token alone), so on one token its
  attention output is constant in x and its isolated Jacobian is exactly zero; in context the producer's
  keys/values are those of the whole sequence of tokens. A resume that starts after the producer takes
  the producer's clean keys/values from the clean run (a patch at a later layer cannot change them).
- **Sliding and full attention** alternate (``config.layer_types``): masks, windows and rotary tables
  (and head sizes, inside the attention module) per layer type, as in Gemma 3.
- **MoE branch** (``enable_moe_block``): the router and experts are recomputed with the experts' weights
  gathered per token, so that the update stays differentiable by ``torch.func`` (the module's own loop over
  experts has data-dependent shapes); it equals the module's output up to summation order.
- **Multimodal wrapper** (``gemma4``): the text decoder is analysed on text; multimodal placeholder ids are
  replaced by the pad id before both embeddings, as the wrapper does. Bidirectional attention over all
  tokens (``use_bidirectional_attention: all``) is refused: the stream is causal here.
"""

from __future__ import annotations

import torch

from .base import HF_LAYER_TYPES, Adapter, PrefixKV, cache_kwarg

_HF = {v: k for k, v in HF_LAYER_TYPES.items()}


class Gemma4Adapter(Adapter):
    family = "gemma4"
    model_types = ("gemma4_text", "gemma4")
    uses_tokens = True

    def check_config(self):
        tc = self.text_config
        if getattr(tc, "use_bidirectional_attention", None) == "all":
            raise ValueError(
                "this Gemma-4 model attends bidirectionally (use_bidirectional_attention='all'); "
                "the gemma4 adapter models a causal decoder"
            )
        modes = tc.kv_sharing_modes
        for j, mode in enumerate(modes):
            if mode == "reuse" and tc.layer_types[j] not in self._producers():
                raise ValueError(f"Gemma-4 layer {j} reuses keys/values that no earlier layer produces")

    # ---- module paths ---------------------------------------------------------------------------
    def _lm(self):
        """The text decoder (``Gemma4TextModel``), inside the multimodal wrapper or not."""
        inner = self.model.model
        return getattr(inner, "language_model", inner)

    def blocks(self):
        return self._lm().layers

    def _text_ids(self, ids):
        """Multimodal placeholder ids -> the pad id, as the wrapper does before embedding text."""
        placeholders = [getattr(self.config, k, None) for k in ("image_token_id", "video_token_id", "audio_token_id")]
        placeholders = [p for p in placeholders if p is not None]
        if not placeholders or self.config is self.text_config:
            return ids
        mm = torch.isin(ids, torch.tensor(placeholders, device=ids.device))
        return torch.where(mm, self.text_config.pad_token_id, ids)

    def embed(self, input_ids):
        return self._lm().embed_tokens(self._text_ids(input_ids))  # the sqrt(d)-scaled embedding

    def final_norm(self):
        return self._lm().norm

    def head(self, h):
        logits = super().head(h)
        cap = getattr(self.text_config, "final_logit_softcapping", None)
        return logits if cap is None else cap * (logits / cap).tanh()

    def capture_points(self, j):
        block = self.blocks()[j]
        points = {"mlp": block.pre_feedforward_layernorm}
        if self.text_config.hidden_size_per_layer_input:
            points["pli"] = block.per_layer_input_gate  # its input is the stream h2
        return points

    def capture_extra(self, j, out):
        if self.text_config.hidden_size_per_layer_input:
            return []
        # no module takes h2 as its input: h2 = h1 + post_ff_norm(...) is rebuilt from the norm's output
        name = f"L{j}"

        def hook(module, args, output):
            out[f"{name}.pli"] = (out[f"{name}.mlp"] + output).detach()

        return [self.blocks()[j].post_feedforward_layernorm.register_forward_hook(hook)]

    # ---- attention layer types ------------------------------------------------------------------
    def layer_type(self, j):
        return HF_LAYER_TYPES[self.text_config.layer_types[j]]

    def window(self, layer_type):
        return self.text_config.sliding_window if layer_type == "sliding" else None

    def rope(self, h, positions, layer_type):
        return self._lm().rotary_emb(h, positions, _HF[layer_type])

    def _producers(self) -> dict[str, int]:
        """HF layer type -> the layer whose keys/values the shared layers of that type reuse."""
        tc = self.text_config
        return {tc.layer_types[j]: j for j, mode in enumerate(tc.kv_sharing_modes) if mode == "store"}

    def _is_shared(self, j) -> bool:
        return self.text_config.kv_sharing_modes[j] == "reuse"

    # ---- token-dependent inputs -----------------------------------------------------------------
    def _need_tokens(self, tokens, what):
        if tokens is None:
            raise ValueError(f"the gemma4 adapter needs the token ids for {what}: pass tokens=")
        return tokens

    def _per_layer_inputs(self, tokens):
        """Per-layer inputs e_l(tok) (..., L, P) of token ids (...,): token embedding + projected input embedding."""
        lm = self._lm()
        ids = self._text_ids(tokens)
        emb = lm.embed_tokens(ids)
        return lm.project_per_layer_inputs(emb, lm.get_per_layer_inputs(ids, emb))

    def _ctx_per_layer_inputs(self, ctx):
        if not self.text_config.hidden_size_per_layer_input:
            return None
        if "pli" not in ctx.extra:
            ctx.extra["pli"] = self._per_layer_inputs(self._need_tokens(ctx.tokens, "the per-layer inputs"))
        return ctx.extra["pli"]  # (B, Tq, L, P)

    @torch.no_grad()
    def _shared_kv(self, j, tokens):
        """Keys/values that shared layer j reads, for a causal pass over token ids (B, T) from position 0."""
        tokens = self._need_tokens(tokens, f"the keys/values that layer {j} shares with an earlier layer")
        hf = self.text_config.layer_types[j]
        h = self.embed(tokens)
        ctx = self.causal_context(h)
        ctx.tokens = tokens
        for i in range(self._producers()[hf] + 1):
            h = self.call_block(i, h, ctx, None)
        return {hf: ctx.extra["shared_kv"][hf]}

    def _resumed_shared_kv(self, j, ctx, cache):
        """Shared keys/values for a resume that starts after the producer: its clean keys/values of each
        query's window, then (the queries' own key slots) its clean keys/values at the query positions."""
        if not isinstance(cache, PrefixKV):
            raise RuntimeError(f"Gemma-4 layer {j} reuses keys/values of a layer that did not run")
        k0, v0 = cache.kv[self._producers()[self.text_config.layer_types[j]]]  # (W, heads, T, dh)
        out = []
        for t in (k0, v0):
            t = t.index_select(0, cache.windows)  # (W', heads, T, dh)
            idx = ctx.positions[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3])  # (W', heads, r, dh)
            out.append(torch.cat([t, t.gather(2, idx)], dim=2))  # (W', heads, T + r, dh)
        return tuple(out)

    # ---- sublayers ------------------------------------------------------------------------------
    def _attn(self, j, x, ctx, tokens):
        block, lt = self.blocks()[j], self.layer_type(j)
        if ctx is None:  # a length-1 input: position 0, nothing to mask
            pe, mask = self.rope(x, x.new_zeros(x.shape[:2], dtype=int), lt), None
        else:
            pe, mask = ctx.rope[lt], ctx.masks[lt]
        shared = self._shared_kv(j, tokens) if self._is_shared(j) else {}
        attn = block.self_attn(
            block.input_layernorm(x), position_embeddings=pe, attention_mask=mask, shared_kv_states=shared
        )[0]
        return block.post_attention_layernorm(attn)

    @staticmethod
    def _experts(block, x):
        """The MoE branch before its last norm, with each token's top-k experts' weights gathered."""
        flat = x.reshape(-1, x.shape[-1])  # (n, d)
        _, weights, idx = block.router(flat)  # (n, k), (n, k)
        y = block.pre_feedforward_layernorm_2(flat)
        ex = block.experts
        gate, up = torch.einsum("nkod,nd->nko", ex.gate_up_proj[idx], y).chunk(2, dim=-1)  # (n, k, I) each
        z = torch.einsum("nkdi,nki->nkd", ex.down_proj[idx], ex.act_fn(gate) * up)  # (n, k, d)
        return (z * weights[..., None].to(z.dtype)).sum(1).reshape(x.shape)

    def _mlp(self, j, x):
        block = self.blocks()[j]
        h = block.mlp(block.pre_feedforward_layernorm(x))
        if block.enable_moe_block:
            h = block.post_feedforward_layernorm_1(h) + block.post_feedforward_layernorm_2(self._experts(block, x))
        return block.post_feedforward_layernorm(h)

    def _pli(self, j, x, tokens):
        """F_pli(x) = s·(x + norm(W_p(act(W_g x) · e_j(tok)))) − x: the per-layer input step and the layer scalar."""
        block = self.blocks()[j]
        s = block.layer_scalar
        if not self.text_config.hidden_size_per_layer_input:
            return x * s - x
        e = self._per_layer_inputs(self._need_tokens(tokens, "the per-layer inputs"))[..., j, :]  # (B, T, P)
        y = block.post_per_layer_input_norm(block.per_layer_projection(block.act_fn(block.per_layer_input_gate(x)) * e))
        return (x + y) * s - x

    def sublayer(self, b, x, ctx, tokens=None):
        if b.kind == "attn":
            return self._attn(b.layer, x, ctx, tokens)
        if b.kind == "mlp":
            return self._mlp(b.layer, x)
        return self._pli(b.layer, x, tokens)

    def call_block(self, j, h, ctx, cache):
        block, lt = self.blocks()[j], self.layer_type(j)
        pli = self._ctx_per_layer_inputs(ctx)
        shared = ctx.extra.setdefault("shared_kv", {})
        hf = _HF[lt]
        if self._is_shared(j) and hf not in shared:
            shared[hf] = self._resumed_shared_kv(j, ctx, cache)
        return block(
            h,
            None if pli is None else pli[:, :, j, :],
            shared_kv_states=shared,
            position_embeddings=ctx.rope[lt],
            attention_mask=ctx.masks[lt],
            position_ids=ctx.positions,
            **{cache_kwarg(block): cache},
        )
