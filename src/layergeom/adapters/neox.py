"""GPT-NeoX / Pythia: parallel residual, one update per block ``out = x + attn(ln1 x) + mlp(ln2 x)``."""

from __future__ import annotations

import torch

from .base import Adapter, Boundary, cache_kwarg


class NeoXAdapter(Adapter):
    family = "gpt_neox"
    model_types = ("gpt_neox",)

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

    def structure(self, b):
        from . import parts

        b = Boundary.parse(b) if isinstance(b, str) else b
        block = self.blocks()[b.layer]
        att, mlp = block.attention, block.mlp
        # query_key_value holds [q | k | v] per head along its outputs; a length-1 softmax is 1
        heads, hs = self.config.num_attention_heads, att.head_size
        rows = torch.arange(3 * heads * hs, device=self.device).view(heads, 3, hs)[:, 2].reshape(-1)
        qkv = att.query_key_value
        value = parts.Linear(qkv.weight[rows], None if qkv.bias is None else qkv.bias[rows])
        attn = parts.Attention(value=value, out=parts.linear(att.dense))
        ff = parts.MLP(up=parts.linear(mlp.dense_h_to_4h), down=parts.linear(mlp.dense_4h_to_h), act=mlp.act)
        ln1, ln2 = parts.layer_norm(block.input_layernorm), parts.layer_norm(block.post_attention_layernorm)
        if ln1 is None or ln2 is None:
            return None
        return parts.Sublayer((parts.Branch(attn, pre=ln1), parts.Branch(ff, pre=ln2)))  # parallel residual
