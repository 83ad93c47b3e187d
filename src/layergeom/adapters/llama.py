"""Llama-style decoders (SmolLM2, Llama, Qwen2, Mistral, OLMo): pre-norm, sequential residual, rotary."""

from __future__ import annotations

from .base import Adapter, Boundary, cache_kwarg


class LlamaAdapter(Adapter):
    family = "llama"
    model_types = ("llama", "qwen2", "qwen3", "mistral", "olmo", "olmo2", "olmo3", "smollm3")
    kinds = ("attn", "mlp")

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

    def rope(self, h, positions, layer_type):
        return self.model.model.rotary_emb(h, positions)

    def _attn(self, block, x, ctx):
        kw = {"attention_mask": None if ctx is None else ctx.masks["full"]}  # OLMo-2 requires the argument
        pos = ctx.positions if ctx is not None else x.new_zeros(x.shape[:2], dtype=int)
        pe = ctx.rope["full"] if ctx is not None else self.rope(x, pos, "full")
        if self._post_norm(block):
            return block.post_attention_layernorm(block.self_attn(x, position_embeddings=pe, **kw)[0])
        return block.self_attn(block.input_layernorm(x), position_embeddings=pe, **kw)[0]

    def _mlp(self, block, x):
        if self._post_norm(block):
            return block.post_feedforward_layernorm(block.mlp(x))
        return block.mlp(block.post_attention_layernorm(x))

    def sublayer(self, b, x, ctx):
        block = self.blocks()[b.layer]
        return self._attn(block, x, ctx) if b.kind == "attn" else self._mlp(block, x)

    def call_block(self, j, h, ctx, cache):
        block = self.blocks()[j]
        return block(
            h,
            attention_mask=ctx.masks["full"],
            position_ids=ctx.positions,
            position_embeddings=ctx.rope["full"],
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
