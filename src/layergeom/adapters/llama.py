"""Llama-style decoders: pre-norm (or OLMo-2/3 post-sublayer norms), sequential residual, rotary positions.

Model types and what each needs beyond Llama (read from their transformers modeling files):

- ``llama`` (Llama, SmolLM2), ``olmo`` (non-parametric LayerNorm, clipped qkv: inside the modules);
- ``qwen2``, ``qwen3`` (q/k norms inside the attention), ``smollm3`` (NoPE layers: the attention module
  skips the rotary table itself): ``config.layer_types`` may mix sliding-window and full attention;
- ``mistral``: one sliding window over every layer when ``config.sliding_window`` is set;
- ``olmo2``, ``olmo3``: norms after the sublayers (``x + norm(attn(x))``, ``x + norm(mlp(x))``); OLMo-3 also
  alternates sliding and full attention with one rotary table per layer type.

The attention modules take ``attention_mask`` positionally in most of these types: the isolated update
(a length-1 input, nothing to mask) passes ``attention_mask=None`` explicitly. A sliding-window layer gets
the windowed causal mask of its layer type (eager attention ignores the window argument: the mask is
what limits it); rotary tables are built per layer type where the rotary module takes one.
"""

from __future__ import annotations

import inspect

from .base import HF_LAYER_TYPES, Adapter, Boundary, cache_kwarg


class LlamaAdapter(Adapter):
    family = "llama"
    model_types = ("llama", "qwen2", "qwen3", "mistral", "olmo", "olmo2", "olmo3", "smollm3")

    def blocks(self):
        return self.model.model.layers

    def embed(self, input_ids):
        return self.model.model.embed_tokens(input_ids)

    def final_norm(self):
        return self.model.model.norm

    def pre_mlp_module(self, j):
        # OLMo-2/3 put their norms after the sublayers; the pre-MLP state is then the MLP's own input
        block = self.blocks()[j]
        return block.mlp if self._post_norm(block) else block.post_attention_layernorm

    @staticmethod
    def _post_norm(block) -> bool:
        return not hasattr(block, "input_layernorm")

    # ---- attention layer types: masks and rotary tables --------------------------------------------
    def layer_type(self, j):
        cfg = self.config
        if cfg.model_type == "mistral":  # Mistral applies its window (if any) to every layer
            return "sliding" if getattr(cfg, "sliding_window", None) else "full"
        types = getattr(cfg, "layer_types", None)
        return HF_LAYER_TYPES[types[j]] if types else "full"

    def window(self, layer_type):
        return self.config.sliding_window if layer_type == "sliding" else None

    def rope(self, h, positions, layer_type):
        rotary = self.model.model.rotary_emb
        if "layer_type" in inspect.signature(rotary.forward).parameters:  # one table per layer type (OLMo-3)
            hf = {v: k for k, v in HF_LAYER_TYPES.items()}[layer_type]
            return rotary(h, positions, hf)
        return rotary(h, positions)

    # ---- sublayers -----------------------------------------------------------------------------------
    def _attn(self, j, x, ctx):
        block, lt = self.blocks()[j], self.layer_type(j)
        if ctx is None:  # a length-1 input: position 0, nothing to mask
            pe, mask = self.rope(x, x.new_zeros(x.shape[:2], dtype=int), lt), None
        else:
            pe, mask = ctx.rope[lt], ctx.masks[lt]
        if self._post_norm(block):
            return block.post_attention_layernorm(block.self_attn(x, position_embeddings=pe, attention_mask=mask)[0])
        return block.self_attn(block.input_layernorm(x), position_embeddings=pe, attention_mask=mask)[0]

    def _mlp(self, block, x):
        if self._post_norm(block):
            return block.post_feedforward_layernorm(block.mlp(x))
        return block.mlp(block.post_attention_layernorm(x))

    def sublayer(self, b, x, ctx, tokens=None):
        return self._attn(b.layer, x, ctx) if b.kind == "attn" else self._mlp(self.blocks()[b.layer], x)

    def call_block(self, j, h, ctx, cache):
        block, lt = self.blocks()[j], self.layer_type(j)
        return block(
            h,
            attention_mask=ctx.masks[lt],
            position_ids=ctx.positions,
            position_embeddings=ctx.rope[lt],
            **{cache_kwarg(block): cache},
        )

    def structure(self, b):
        from . import parts

        b = Boundary.parse(b) if isinstance(b, str) else b
        block = self.blocks()[b.layer]
        post = self._post_norm(block)  # OLMo-2/3: the norm follows the sublayer, there is no pre-norm
        if b.kind == "attn":
            att = block.self_attn
            if getattr(self.config, "clip_qkv", None) is not None:  # OLMo's clamp of q, k, v: not linear
                return None
            value = parts.repeat_heads(parts.linear(att.v_proj), self.config.num_attention_heads, att.head_dim)
            core = parts.Attention(value=value, out=parts.linear(att.o_proj))
            norm = block.post_attention_layernorm if post else block.input_layernorm
        else:
            core = parts.gated_mlp(block.mlp)
            norm = block.post_feedforward_layernorm if post else block.post_attention_layernorm
        # OLMo(-1)'s LayerNorm has no parameters and a fixed eps of 1e-5
        norm = parts.Norm("layer", 1e-5) if type(norm).__name__ == "OlmoLayerNorm" else parts.rms_norm(norm)
        if core is None or norm is None:
            return None
        return parts.Sublayer((parts.Branch(core, post=norm) if post else parts.Branch(core, pre=norm),))
