"""The adapter contract, checked against plain forward passes for every family."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

from layergeom.adapters import FINAL, Boundary, boundaries_for, get_adapter


def test_boundaries_known_from_config(tiny_adapter, family):
    names = [b.name for b in tiny_adapter.boundaries]
    assert names == boundaries_for(family, tiny_adapter.n_layers)
    kinds = {n.split(".")[1] for n in names}
    assert kinds == ({"block"} if family in ("gpt_neox", "mamba") else {"attn", "mlp"})


def test_capture_equals_plain_forward(tiny_adapter, family, token_ids):
    """Block inputs captured through the adapter equal hidden_states of a plain forward pass."""
    cap = tiny_adapter.capture(token_ids)
    out = tiny_adapter.model(input_ids=token_ids, output_hidden_states=True)
    hs = out.hidden_states
    shift = 1 if family == "mamba" else 0  # Mamba's hidden_states have no embedding entry
    firsts = [b for b in tiny_adapter.boundaries if b.order == 0]
    compared = 0
    for b in firsts:
        i = b.layer - shift
        if i >= 0:
            torch.testing.assert_close(cap[b.name], hs[i], rtol=0, atol=1e-6)
            compared += 1
    assert compared >= 1
    # the final state is the raw stream, not the normed last hidden state
    normed = tiny_adapter.final_norm()(cap[FINAL])
    torch.testing.assert_close(normed, hs[-1], rtol=0, atol=1e-5)
    assert not torch.allclose(cap[FINAL], hs[-1])


def test_pre_mlp_state_is_block_input_plus_attention(tiny_adapter, token_ids):
    """For sequential blocks the L.mlp state is h + Attn(h) over the real context."""
    cap = tiny_adapter.capture(token_ids)
    for b in tiny_adapter.boundaries:
        if b.kind != "mlp":
            continue
        attn = Boundary(b.layer, 0, "attn")
        x = cap[attn.name]
        ctx = tiny_adapter.causal_context(x)
        expect = x + tiny_adapter.sublayer(attn, x, ctx)
        torch.testing.assert_close(cap[b.name], expect, rtol=0, atol=1e-5)


def test_single_token_decomposition(tiny_adapter, token_ids):
    """For a length-1 input, state_next = state + F_b(state) at every boundary."""
    cap = tiny_adapter.capture(token_ids[:, :1])
    names = [b.name for b in tiny_adapter.boundaries] + [FINAL]
    for i, b in enumerate(tiny_adapter.boundaries):
        x = cap[b.name][:, 0]
        torch.testing.assert_close(x + tiny_adapter.update(b, x), cap[names[i + 1]][:, 0], rtol=0, atol=1e-5)


def test_update_in_context_matches_stream(tiny_adapter, token_ids):
    """In context, the update at the last position maps the captured state to the next one."""
    cap = tiny_adapter.capture(token_ids)
    names = [b.name for b in tiny_adapter.boundaries] + [FINAL]
    for i, b in enumerate(tiny_adapter.boundaries):
        seq = cap[b.name]
        out = tiny_adapter.update_in_context(b, seq[:, :-1], seq[:, -1])
        torch.testing.assert_close(seq[:, -1] + out, cap[names[i + 1]][:, -1], rtol=0, atol=1e-5)


def test_resume_without_patch_reproduces_clean_logits(tiny_adapter, token_ids):
    ids = token_ids[:1]
    clean = tiny_adapter.model(input_ids=ids).logits[0].float()
    positions = torch.tensor([1, 5, 11, 23])
    run = tiny_adapter.clean_run(ids, positions)
    torch.testing.assert_close(run.logits, clean, rtol=0, atol=1e-5)
    for layer in range(tiny_adapter.n_layers + 1):
        got = tiny_adapter.resume(run, layer, run.states[layer][positions], positions)
        torch.testing.assert_close(got, clean[positions], rtol=0, atol=1e-5)


def test_resume_patch_matches_full_rerun_and_is_causal(tiny_adapter, token_ids):
    ids = token_ids[:1]
    positions = torch.tensor([3, 9, 17])
    run = tiny_adapter.clean_run(ids, positions)
    g = torch.Generator().manual_seed(1)
    for layer in range(tiny_adapter.n_layers + 1):
        patched = run.states[layer][positions] + torch.randn(len(positions), tiny_adapter.d_model, generator=g)
        fast = tiny_adapter.resume(run, layer, patched, positions)
        for i, t in enumerate(positions.tolist()):
            slow_all = _full_patched(tiny_adapter, ids, layer, t, patched[i])
            torch.testing.assert_close(fast[i], slow_all[t], rtol=0, atol=1e-5)
            # a patch at position t changes nothing before t, and something at t
            clean = tiny_adapter.model(input_ids=ids).logits[0].float()
            torch.testing.assert_close(slow_all[:t], clean[:t], rtol=0, atol=1e-6)
            assert (slow_all[t] - clean[t]).abs().max() > 1e-4


def test_stacked_runs_resume_each_window(tiny_adapter, token_ids):
    """Rows of several windows in one resume call (``stack_runs``) == each window's own resume."""
    positions = [torch.tensor([2, 11, 20]), torch.tensor([7, 19])]
    runs = [tiny_adapter.clean_run(token_ids[w : w + 1], p) for w, p in enumerate(positions)]
    stacked = tiny_adapter.stack_runs(runs)
    g = torch.Generator().manual_seed(2)
    for layer in range(tiny_adapter.n_layers + 1):
        patched = [
            r.states[layer][p] + torch.randn(len(p), tiny_adapter.d_model, generator=g) for r, p in zip(runs, positions)
        ]
        alone = torch.cat([tiny_adapter.resume(r, layer, s, p) for r, s, p in zip(runs, patched, positions)])
        # rows interleaved across windows, so a wrong window index cannot go unnoticed
        order = torch.tensor([0, 3, 1, 4, 2])
        windows = torch.tensor([0, 0, 0, 1, 1])[order]
        together = tiny_adapter.resume(stacked, layer, torch.cat(patched)[order], torch.cat(positions)[order], windows)
        torch.testing.assert_close(together, alone[order], rtol=0, atol=1e-5)


def _full_patched(adapter, ids, layer, t, state):
    """Logits at every position of a full forward with the input of block `layer` overwritten at t."""

    def patch(module, args, kwargs):
        x = (args[0] if args else kwargs["hidden_states"]).clone()
        x[:, t] = state
        return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})

    mod = adapter.blocks()[layer] if layer < adapter.n_layers else adapter.final_norm()
    h = mod.register_forward_pre_hook(patch, with_kwargs=True)
    try:
        with torch.no_grad():
            return adapter.model(input_ids=ids).logits[0].float()
    finally:
        h.remove()


def test_wrong_family_is_refused():
    from layergeom.adapters import adapter_class

    with pytest.raises(ValueError, match="handles model types"):
        adapter_class("gpt2")(tiny_model("llama"))


def test_get_adapter_picks_family(family):
    assert get_adapter(tiny_model(family)).family == family
