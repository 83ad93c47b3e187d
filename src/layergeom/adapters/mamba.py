"""Mamba (selective state space): one update per block, ``out = x + mixer(norm(x))``.

There is no attention and no KV cache: the prefix a patched token needs at block j is the mixer's
convolution window and recurrent SSM state after the clean positions before it. `clean_run` steps the
clean window through each mixer in its recurrent form and keeps those states at the anchor positions,
so a resume is one recurrent step per remaining block.
"""

from __future__ import annotations

import torch

from .base import Adapter, CleanRun, cache_kwarg


class MambaStates:
    """Duck-typed Mamba cache: per layer a conv window (B, d_inner, K) and an SSM state (B, d_inner, N).

    Only the mixer's one-token recurrent step reads it. transformers up to 5.24 updates both states in place;
    5.25 also counts the step (``increase_count``) and hands the new SSM state back (``update_recurrent_state``)
    instead of writing into the old one. Both are served here; a method that a later transformers calls and
    this class lacks ends in one clear error (pyproject.toml's range for transformers is what was tested).
    """

    def __init__(self, states: dict[int, tuple[torch.Tensor, torch.Tensor]]):
        self.states = states

    def get_conv_state(self, layer_idx, state_idx=0):
        return self.states[layer_idx][0]

    def get_recurrent_state(self, layer_idx, state_idx=0):
        return self.states[layer_idx][1]

    def is_recording_past(self, layer_idx):
        return False

    def increase_count(self, layer_idx, state_idx=0):
        """transformers >= 5.25 counts the decoded steps; the states are all this cache keeps."""

    def update_recurrent_state(self, recurrent_state, layer_idx, state_idx=0, **kwargs):
        """transformers >= 5.25: the step's new SSM state replaces the old one (earlier versions wrote in place)."""
        if isinstance(recurrent_state, list | tuple):  # the states after each of several steps: the last
            recurrent_state = recurrent_state[-1]
        self.states[layer_idx] = (self.states[layer_idx][0], recurrent_state)
        return recurrent_state

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        import transformers

        raise AttributeError(
            f"transformers {transformers.__version__}'s Mamba mixer asks its cache for '{name}', which the Mamba "
            f"adapter's state cache does not provide: use a transformers version in pyproject.toml's range"
        )


class MambaAdapter(Adapter):
    family = "mamba"
    model_types = ("mamba",)

    def blocks(self):
        return self.model.backbone.layers

    def embed(self, input_ids):
        return self.model.backbone.embeddings(input_ids)

    def final_norm(self):
        return self.model.backbone.norm_f

    def causal_context(self, h):
        return None  # the mixer is causal by construction

    def sublayer(self, b, x, ctx, tokens=None):
        block = self.blocks()[b.layer]
        return block.mixer(block.norm(x))  # a full-sequence scan from a zero state

    def call_block(self, j, h, ctx, cache):
        block = self.blocks()[j]
        return block(h, **{cache_kwarg(block): cache})

    def _zero_states(self, mixer, batch, like):
        conv = like.new_zeros(batch, mixer.intermediate_size, mixer.conv_kernel_size)
        ssm = like.new_zeros(batch, mixer.intermediate_size, mixer.ssm_state_size)
        return conv, ssm

    @torch.no_grad()
    def clean_run(self, input_ids, positions=None):
        if positions is None:
            raise ValueError("the Mamba adapter needs the anchor positions to keep their recurrent states")
        h = self.embed(input_ids.to(self.device))
        wanted = sorted({int(p) for p in positions})
        states, kept = [], {}
        for j, block in enumerate(self.blocks()):
            states.append(h[0])
            # step the clean prefix through the recurrent form; keep the state *before* each wanted position
            step = MambaStates({j: self._zero_states(block.mixer, 1, h)})
            per_pos = {}  # (window, position) -> states; window 0 until stack_runs renumbers
            for t in range(max(wanted) + 1):
                if t in wanted:
                    per_pos[0, t] = tuple(s.clone() for s in step.states[j])
                if t < max(wanted):
                    block.mixer(block.norm(h[:, t : t + 1]), **{cache_kwarg(block.mixer): step})
            kept[j] = per_pos
            h = self.call_block(j, h, None, None)
        states.append(h[0])
        return CleanRun(logits=self.head(h)[0], states=states, cache=kept, positions=positions)

    def stack_runs(self, runs):
        kept = {j: {(i, p): st for i, r in enumerate(runs) for (_, p), st in r.cache[j].items()} for j in runs[0].cache}
        return CleanRun(logits=None, states=self._stack_states(runs), cache=kept)

    @torch.no_grad()
    def resume(self, run, layer, states, positions, windows=None):
        h = states[:, None, :].to(self.device, run.states[0].dtype)
        keys = list(zip([0] * len(positions) if windows is None else windows.tolist(), positions.tolist()))
        for j in range(layer, self.n_layers):
            conv = torch.cat([run.cache[j][k][0] for k in keys])
            ssm = torch.cat([run.cache[j][k][1] for k in keys])
            h = self.call_block(j, h, None, MambaStates({j: (conv, ssm)}))
        return self.head(h)[:, 0, :]
