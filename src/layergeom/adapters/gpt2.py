"""GPT-2 / DistilGPT2: pre-norm LayerNorm, sequential residual, learned absolute positions."""

from __future__ import annotations

from .base import Adapter, Boundary, cache_kwarg


class GPT2Adapter(Adapter):
    family = "gpt2"
    model_types = ("gpt2",)

    def blocks(self):
        return self.model.transformer.h

    def embed(self, input_ids):
        tr = self.model.transformer
        pos = self._positions(input_ids)
        return tr.wte(input_ids) + tr.wpe(pos)

    @staticmethod
    def _positions(input_ids):
        import torch

        return torch.arange(input_ids.shape[1], device=input_ids.device)[None].expand_as(input_ids)

    def final_norm(self):
        return self.model.transformer.ln_f

    def pre_mlp_module(self, j):
        return self.blocks()[j].ln_2

    def sublayer(self, b, x, ctx, tokens=None):
        block = self.blocks()[b.layer]
        if b.kind == "attn":
            kw = {} if ctx is None else {"attention_mask": ctx.masks["full"]}
            return block.attn(block.ln_1(x), **kw)[0]
        return block.mlp(block.ln_2(x))

    def call_block(self, j, h, ctx, cache):
        block = self.blocks()[j]
        out = block(h, attention_mask=ctx.masks["full"], **{cache_kwarg(block): cache})
        return out[0] if isinstance(out, tuple) else out

    def structure(self, b):
        from . import parts

        b = Boundary.parse(b) if isinstance(b, str) else b
        block = self.blocks()[b.layer]
        if b.kind == "attn":
            attn, d = block.attn, self.d_model
            if getattr(attn, "is_cross_attention", False):
                return None
            # c_attn holds [query | key | value] along its outputs; a length-1 softmax is 1
            core = parts.Attention(value=parts.conv1d(attn.c_attn, slice(2 * d, 3 * d)), out=parts.conv1d(attn.c_proj))
            norm = parts.layer_norm(block.ln_1)
        else:
            core = parts.MLP(up=parts.conv1d(block.mlp.c_fc), down=parts.conv1d(block.mlp.c_proj), act=block.mlp.act)
            norm = parts.layer_norm(block.ln_2)
        return None if norm is None else parts.Sublayer((parts.Branch(core, pre=norm),))
