"""Gemma 3: sandwich norms (four per block), q/k norms, sqrt(d)-scaled embeddings, local/global attention."""

from __future__ import annotations

from .base import HF_LAYER_TYPES as _TYPES
from .base import Adapter, Boundary, cache_kwarg


class Gemma3Adapter(Adapter):
    family = "gemma3"
    model_types = ("gemma3_text",)

    def blocks(self):
        return self.model.model.layers

    def embed(self, input_ids):
        return self.model.model.embed_tokens(input_ids)  # the scaled embedding module

    def final_norm(self):
        return self.model.model.norm

    def head(self, h):
        logits = super().head(h)
        cap = getattr(self.config, "final_logit_softcapping", None)
        return logits if cap is None else cap * (logits / cap).tanh()

    def layer_type(self, j):
        return _TYPES[self.config.layer_types[j]]

    def window(self, layer_type):
        return self.config.sliding_window if layer_type == "sliding" else None

    def rope(self, h, positions, layer_type):
        hf = {v: k for k, v in _TYPES.items()}[layer_type]
        return self.model.model.rotary_emb(h, positions, hf)

    def pre_mlp_module(self, j):
        return self.blocks()[j].pre_feedforward_layernorm

    def sublayer(self, b, x, ctx, tokens=None):
        block = self.blocks()[b.layer]
        if b.kind == "mlp":
            return block.post_feedforward_layernorm(block.mlp(block.pre_feedforward_layernorm(x)))
        lt = self.layer_type(b.layer)
        if ctx is None:
            pe, kw = self.rope(x, x.new_zeros(x.shape[:2], dtype=int), lt), {}
        else:
            pe, kw = ctx.rope[lt], {"attention_mask": ctx.masks[lt]}
        attn = block.self_attn(block.input_layernorm(x), position_embeddings=pe, **kw)[0]
        return block.post_attention_layernorm(attn)

    def call_block(self, j, h, ctx, cache):
        block = self.blocks()[j]
        lt = self.layer_type(j)
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
        if b.kind == "mlp":  # GeGLU between sandwich norms
            core = parts.gated_mlp(block.mlp)
            pre, post = block.pre_feedforward_layernorm, block.post_feedforward_layernorm
        else:  # a length-1 softmax is 1: queries, keys, their norms and the softcap drop out
            att = block.self_attn
            value = parts.repeat_heads(parts.linear(att.v_proj), self.config.num_attention_heads, att.head_dim)
            core = parts.Attention(value=value, out=parts.linear(att.o_proj))
            pre, post = block.input_layernorm, block.post_attention_layernorm
        pre, post = parts.rms_norm(pre, offset=1.0), parts.rms_norm(post, offset=1.0)  # Gemma scales by 1 + w
        if core is None or pre is None or post is None:
            return None
        return parts.Sublayer((parts.Branch(core, pre=pre, post=post),))
