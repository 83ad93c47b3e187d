"""The adapter contract, checked against plain forward passes for every model type each adapter lists.

Every model type in the registry gets a tiny random model (``conftest.TINY_CONFIGS``; a listed type
without one fails here) and is checked for: capture == hidden states of a plain forward,
``x_next = x + F_b(x)`` at every boundary on one token and in context, resume without a patch == clean
logits, resume with a patch == a full patched re-run, and exact Jacobians == finite differences.
"""

from __future__ import annotations

import re

import pytest
import torch
import yaml
from conftest import ROOT, TINY_CONFIGS, central_differences, tiny_model

from layergeom.adapters import ADAPTERS, FAMILIES, FINAL, MODEL_TYPES, Boundary, boundaries_for, get_adapter
from layergeom.names import KIND_ORDER, TOKENWISE_KINDS
from layergeom.spectral import jacobians as jac


# ---- the registry -------------------------------------------------------------------------------------
def test_every_listed_model_type_has_a_tiny_config():
    missing = sorted(set(MODEL_TYPES) - set(TINY_CONFIGS))
    assert not missing, f"model types without a tiny config in tests/conftest.py: {missing}"
    assert set(TINY_CONFIGS) <= set(MODEL_TYPES), "a tiny config for a model type no adapter lists"


def test_schema_family_enum_is_the_adapter_registry():
    schema = yaml.safe_load((ROOT / "config" / "schema" / "config.schema.yaml").read_text())
    enum = schema["$defs"]["model"]["properties"]["family"]["enum"]
    assert sorted(enum) == sorted(FAMILIES)


def test_model_types_are_unique_and_kinds_known():
    listed = [t for a in ADAPTERS.values() for t in a.model_types]
    assert len(listed) == len(set(listed)), "a model type listed by two adapters"
    for a in ADAPTERS.values():
        assert a.kinds and set(a.kinds) <= set(KIND_ORDER), a.family
        assert [KIND_ORDER[k] for k in a.kinds] == sorted(KIND_ORDER[k] for k in a.kinds), a.family


def test_models_doc_table_matches_registry():
    """docs/models.md's supported model types table: one row per model type, with its family and boundaries."""
    text = (ROOT / "docs" / "models.md").read_text()
    section = text.split("\n## Supported model types\n", 1)[1].split("\n#", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("|")][2:]  # skip header and rule
    table = {}
    for ln in rows:
        cells = [c.strip().strip("`") for c in ln.strip("|").split("|")]
        table[cells[0]] = cells
    assert set(table) == set(MODEL_TYPES)
    for t, cells in table.items():
        fam = MODEL_TYPES[t]
        assert cells[1] == fam, t
        assert cells[2] == f"{ADAPTERS[fam].__name__}", t
        assert re.findall(r"[a-z]+", cells[3]) == list(ADAPTERS[fam].kinds), t


# ---- per model type ---------------------------------------------------------------------------------
def _tokens(ad, ids):
    return ids if ad.uses_tokens else None


def test_boundaries_known_from_config(type_adapter, model_type):
    ad = type_adapter
    names = [b.name for b in ad.boundaries]
    assert names == boundaries_for(MODEL_TYPES[model_type], ad.n_layers)
    assert [Boundary.parse(n) for n in names] == sorted(Boundary.parse(n) for n in names)  # depth order
    assert {n.split(".")[1] for n in names} == set(ad.kinds)


def test_capture_equals_plain_forward(type_adapter, model_type, token_ids):
    """Block inputs captured through the adapter equal hidden_states of a plain forward pass."""
    ad = type_adapter
    cap = ad.capture(token_ids)
    assert set(cap) == {b.name for b in ad.boundaries} | {FINAL}
    hs = ad.model(input_ids=token_ids, output_hidden_states=True).hidden_states
    shift = 1 if model_type == "mamba" else 0  # Mamba's hidden_states have no embedding entry
    compared = 0
    for b in ad.boundaries:
        i = b.layer - shift
        if b.order == 0 and i >= 0:
            torch.testing.assert_close(cap[b.name], hs[i], rtol=0, atol=1e-6)
            compared += 1
    assert compared >= 1
    # the final state is the raw stream, not the normed last hidden state
    torch.testing.assert_close(ad.final_norm()(cap[FINAL]), hs[-1], rtol=0, atol=1e-5)
    assert not torch.allclose(cap[FINAL], hs[-1])


def test_stream_is_a_sum_of_updates_in_context(type_adapter, token_ids):
    """At every boundary and every position, state_next = state + F_b(state) over the real context."""
    ad = type_adapter
    cap = ad.capture(token_ids)
    names = [b.name for b in ad.boundaries] + [FINAL]
    for i, b in enumerate(ad.boundaries):
        x = cap[b.name]
        with torch.no_grad():
            nxt = x + ad.sublayer(b, x, ad.causal_context(x), _tokens(ad, token_ids))
        torch.testing.assert_close(nxt, cap[names[i + 1]], rtol=0, atol=1e-5, msg=f"{b}")


def test_single_token_decomposition(type_adapter, token_ids):
    """For a length-1 input, state_next = state + F_b(state) at every boundary (``update``)."""
    ad = type_adapter
    cap = ad.capture(token_ids[:, :1])
    names = [b.name for b in ad.boundaries] + [FINAL]
    for i, b in enumerate(ad.boundaries):
        x = cap[b.name][:, 0]
        with torch.no_grad():
            out = x + ad.update(b, x, tokens=token_ids[:, 0])
        torch.testing.assert_close(out, cap[names[i + 1]][:, 0], rtol=0, atol=1e-5, msg=f"{b}")


def test_update_in_context_matches_stream(type_adapter, token_ids):
    """In context, the update at the last position maps the captured state to the next one."""
    ad = type_adapter
    cap = ad.capture(token_ids)
    names = [b.name for b in ad.boundaries] + [FINAL]
    for i, b in enumerate(ad.boundaries):
        seq = cap[b.name]
        with torch.no_grad():
            out = ad.update_in_context(b, seq[:, :-1], seq[:, -1], tokens=token_ids)
        torch.testing.assert_close(seq[:, -1] + out, cap[names[i + 1]][:, -1], rtol=0, atol=1e-5, msg=f"{b}")


@pytest.mark.parametrize("model_type", [t for t, f in MODEL_TYPES.items() if ADAPTERS[f].uses_tokens])
def test_token_dependent_updates_need_tokens(model_type, token_ids):
    """An adapter whose updates read the token ids refuses to guess them, and the token matters."""
    ad = get_adapter(tiny_model(MODEL_TYPES[model_type], model_type=model_type))
    cap = ad.capture(token_ids[:, :1])
    reads = [b for b in ad.boundaries if b.kind == "pli"] if ad.text_config.hidden_size_per_layer_input else []
    for b in reads:
        x = cap[b.name][:, 0]
        with pytest.raises(ValueError, match="token ids"):
            ad.update(b, x)
        with torch.no_grad():
            other = ad.update(b, x, tokens=token_ids[:, 0] + 1) - ad.update(b, x, tokens=token_ids[:, 0])
        assert other.abs().max() > 1e-4, b


def test_resume_without_patch_reproduces_clean_logits(type_adapter, token_ids):
    ad = type_adapter
    ids = token_ids[:1]
    with torch.no_grad():
        clean = ad.model(input_ids=ids).logits[0].float()
    positions = torch.tensor([1, 5, 11, 23])
    run = ad.clean_run(ids, positions)
    torch.testing.assert_close(run.logits, clean, rtol=0, atol=1e-5)
    for layer in range(ad.n_layers + 1):
        got = ad.resume(run, layer, run.states[layer][positions], positions)
        torch.testing.assert_close(got, clean[positions], rtol=0, atol=1e-5, msg=f"layer {layer}")


def test_resume_patch_matches_full_rerun_and_is_causal(type_adapter, token_ids):
    ad = type_adapter
    ids = token_ids[:1]
    positions = torch.tensor([3, 9, 17])
    run = ad.clean_run(ids, positions)
    with torch.no_grad():
        clean = ad.model(input_ids=ids).logits[0].float()
    g = torch.Generator().manual_seed(1)
    for layer in range(ad.n_layers + 1):
        patched = run.states[layer][positions] + torch.randn(len(positions), ad.d_model, generator=g)
        fast = ad.resume(run, layer, patched, positions)
        for i, t in enumerate(positions.tolist()):
            slow_all = _full_patched(ad, ids, layer, t, patched[i])
            torch.testing.assert_close(fast[i], slow_all[t], rtol=0, atol=1e-5, msg=f"layer {layer}, t={t}")
            torch.testing.assert_close(fast[i], ad.patched_logits_full(ids, layer, t, patched[i]), rtol=0, atol=1e-5)
            # a patch at position t changes nothing before t, and something at t
            torch.testing.assert_close(slow_all[:t], clean[:t], rtol=0, atol=1e-6)
            assert (slow_all[t] - clean[t]).abs().max() > 1e-4


def test_stacked_runs_resume_each_window(type_adapter, token_ids):
    """Rows of several windows in one resume call (``stack_runs``) == each window's own resume."""
    ad = type_adapter
    positions = [torch.tensor([2, 11, 20]), torch.tensor([7, 19])]
    runs = [ad.clean_run(token_ids[w : w + 1], p) for w, p in enumerate(positions)]
    stacked = ad.stack_runs(runs)
    g = torch.Generator().manual_seed(2)
    for layer in range(ad.n_layers + 1):
        patched = [r.states[layer][p] + torch.randn(len(p), ad.d_model, generator=g) for r, p in zip(runs, positions)]
        alone = torch.cat([ad.resume(r, layer, s, p) for r, s, p in zip(runs, patched, positions)])
        # rows interleaved across windows, so a wrong window index cannot go unnoticed
        order = torch.tensor([0, 3, 1, 4, 2])
        windows = torch.tensor([0, 0, 0, 1, 1])[order]
        together = ad.resume(stacked, layer, torch.cat(patched)[order], torch.cat(positions)[order], windows)
        torch.testing.assert_close(together, alone[order], rtol=0, atol=1e-5)


# Finite differences against the exact (torch.func) Jacobians, in float64. transformers computes its norms
# (RMSNorm, OLMo's LayerNorm, Mamba's) and its softmaxes in float32 even in a float64 model, so an update
# carries float32 rounding δ ≈ eps32·max|F|, which a 4th-order central difference with step h turns into an
# error of about (1 + 8 + 8 + 1)/12·δ/h per accumulated term: bound 16·eps32·max|F|/h. Its truncation error,
# ~(h/s)⁴·max|J|, depends on the scale s over which the update bends: about the state's RMS r behind a norm
# (norms are scale-invariant), less in a sharp softmax. So the steps are a geometric grid from 2e-3·r to
# 1e-1·r, and J must match the differences at one of them within 1e-4·max|J| plus that step's rounding
# bound. Where a model runs in float64 throughout the rounding term is far smaller and the same bound holds.
FD_STEPS, FD_TOL, FD_ROUND = (2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 1e-1), 1e-4, 16 * torch.finfo(torch.float32).eps


def assert_matches_fd(J: torch.Tensor, fn, x: torch.Tensor, what: str) -> None:
    """J (d, d) at one state x (d,) of a row-wise map fn against finite differences (bound: see above)."""
    r = float(x.pow(2).mean().sqrt())
    with torch.no_grad():
        F = float(fn(x[None]).abs().max())
        tries = []
        for c in FD_STEPS:
            fd = central_differences(fn, x[None], c * r)[0]
            atol = FD_TOL * float(fd.abs().max()) + FD_ROUND * F / (c * r)
            tries.append((float((J - fd).abs().max()) / atol, c, float((J - fd).abs().max()), atol))
    best = min(tries)
    assert best[0] <= 1, f"{what}: |J - FD| = {best[2]:.2e} > {best[3]:.2e} at the best step {best[1]:g}·r"


@pytest.fixture
def type_adapter64(model_type):
    return get_adapter(tiny_model(MODEL_TYPES[model_type], dtype=torch.float64, model_type=model_type))


def test_jacobians_match_finite_differences(type_adapter64, token_ids):
    """Isolated and in-context Jacobians (torch.func) == finite differences at every boundary, at states
    of the model's own stream (so that token-dependent updates see their real tokens)."""
    ad = type_adapter64
    ids = token_ids[:2, :6]  # (N, T)
    N, T = ids.shape
    cap = ad.capture(ids)
    for b in ad.boundaries:
        seq = cap[b.name]  # (N, T, d)
        x, prefix = seq[:, -1], seq[:, :-1]
        J = jac.isolated_jacobians(ad, b, x, mode="rev", tokens=ids[:, -1])  # (N, d, d)
        Jc = jac.in_context_jacobians(ad, b, prefix, x, mode="rev", tokens=ids)
        for i in range(N):

            def iso(X, i=i, b=b):
                return ad.update(b, X, tokens=ids[i, -1].expand(len(X)))

            def ctx(X, i=i, b=b, p=prefix):
                return ad.update_in_context(b, p[i].expand(len(X), T - 1, -1), X, tokens=ids[i].expand(len(X), T))

            assert_matches_fd(J[i], iso, x[i], f"{b} isolated, sample {i}")
            assert_matches_fd(Jc[i], ctx, x[i], f"{b} in context, sample {i}")
        assert float(Jc.abs().max()) > 1e-6, f"{b}: degenerate update in context"
        if b.kind in TOKENWISE_KINDS:  # acts on each position alone: the prefix does not matter
            assert torch.allclose(Jc, J, atol=1e-10 * float(J.abs().max()), rtol=0), b


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


def test_unknown_model_type_is_refused():
    from layergeom.adapters import family_of

    with pytest.raises(ValueError, match="no adapter handles model_type 'phi'.*supported model types: .*olmo3"):
        family_of("phi")


def test_get_adapter_picks_family(model_type):
    model = tiny_model(MODEL_TYPES[model_type], model_type=model_type)
    assert model.config.model_type == model_type
    assert get_adapter(model).family == MODEL_TYPES[model_type]


def test_materialize_refuses_an_unsupported_model_type(tmp_path):
    """A model whose model_type no adapter handles is refused, naming it and the supported types; nothing written."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from layergeom import materialize, models
    from layergeom.runtime import LayergeomError

    cfg = AutoConfig.for_model("gemma2", vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, head_dim=8, intermediate_size=64)  # fmt: skip
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "hf")
    mcfg = {"source": "local", "family": "gemma3", "path": str(tmp_path / "hf"), "n_layers": 2,
            "checkpoints": {"trained": {}}}  # fmt: skip
    with pytest.raises(LayergeomError, match=r"no adapter handles model_type 'gemma2'; supported model types: ") as e:
        materialize.materialize("x", "trained", mcfg, tmp_path / "out")
    assert all(f"{t} ({f})" in str(e.value) for t, f in MODEL_TYPES.items())
    assert not (tmp_path / "out").exists()
    # a config-built model names its type: one of its family's
    with pytest.raises(LayergeomError, match="'gpt2' is not a llama model type.*olmo3"):
        models.build_random("llama", {"model_type": "gpt2"}, 0)
