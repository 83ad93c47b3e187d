"""GPT-NeoX / Pythia: parallel residual, one update per block ``out = x + attn(ln1 x) + mlp(ln2 x)``."""

from __future__ import annotations

from .base import Adapter, cache_kwarg


class NeoXAdapter(Adapter):
    family = "gpt_neox"
    model_types = ("gpt_neox",)
    kinds = ("block",)

    def check_config(self):
        if not getattr(self.config, "use_parallel_residual", True):
            raise ValueError(
                "this GPT-NeoX model has use_parallel_residual=False; the gpt_neox adapter models the "
                "parallel residual of Pythia (one L{l}.block update per layer)"
            )

    def blocks(self):
        return self.model.gpt_neox.layers

    def embed(self, input_ids):
        return self.model.gpt_neox.embed_in(input_ids)

    def final_norm(self):
        return self.model.gpt_neox.final_layer_norm

    def rope(self, h, positions, layer_type):
        return self.model.gpt_neox.rotary_emb(h, positions)

    def sublayer(self, b, x, ctx, tokens=None):
        block = self.blocks()[b.layer]
        if ctx is None:
            pos = x.new_zeros(x.shape[:2], dtype=int)
            pe, mask = self.rope(x, pos, "full"), None
        else:
            pe, mask = ctx.rope["full"], ctx.masks["full"]
        attn = block.attention(block.input_layernorm(x), attention_mask=mask, position_embeddings=pe)[0]
        return attn + block.mlp(block.post_attention_layernorm(x))

    def call_block(self, j, h, ctx, cache):
        block = self.blocks()[j]
        out = block(
            h,
            attention_mask=ctx.masks["full"],
            position_ids=ctx.positions,
            position_embeddings=ctx.rope["full"],
            **{cache_kwarg(block): cache},
        )
        return out[0] if isinstance(out, tuple) else out
