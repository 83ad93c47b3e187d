"""The stream's vocabulary, importable without torch: boundary names, the kinds of each family, the final state.

The workflow builds its DAG from this module alone (``rules/common.smk``), so that parsing the Snakefile, a
dry run and ``snakemake --lint`` need neither torch nor numpy. ``FAMILY_KINDS`` is the one declaration of each
family's boundary kinds: the adapters (which import torch) read their ``kinds`` from it, and an adapter whose
family has no entry here fails at import (``adapters.base.Adapter.__init_subclass__``).
"""

from __future__ import annotations

from .runtime import LayergeomError

FINAL = "final"

# Boundary kinds and their order inside a block. ``attn`` and ``block`` open a block (the block input);
# ``mlp`` is the state entering the MLP; ``pli`` the state entering a per-layer-input step (Gemma-4),
# whose update also applies the block's output scale. A new kind is added here and nowhere else.
KIND_ORDER: dict[str, int] = {"attn": 0, "block": 0, "mlp": 1, "pli": 2}
KINDS = tuple(KIND_ORDER)
# Kinds whose update acts on each position alone (no mixing across positions): their in-context
# update and Jacobian equal the isolated ones.
TOKENWISE_KINDS = frozenset({"mlp", "pli"})

# family -> the boundary kinds of one block, in the order the stream passes them. The adapters' ``kinds``
# (adapters/base.py reads them from here); a new family's adapter needs its entry here.
FAMILY_KINDS: dict[str, tuple[str, ...]] = {
    "gpt2": ("attn", "mlp"),
    "gpt_neox": ("block",),  # parallel residual: one update per block
    "llama": ("attn", "mlp"),
    "gemma3": ("attn", "mlp"),
    "gemma4": ("attn", "mlp", "pli"),  # per-layer input after the MLP
    "mamba": ("block",),
}


def boundary_names(kinds: tuple[str, ...], n_layers: int) -> list[str]:
    """All boundary names of a model in depth order (without ``final``)."""
    return [f"L{l}.{k}" for l in range(n_layers) for k in kinds]


def parse_boundary(name: str) -> tuple[int, str]:
    """``L{layer}.{kind}`` -> (layer, kind)."""
    layer, kind = name.split(".")
    if not (layer.startswith("L") and layer[1:].isdigit()):
        raise ValueError(f"'{name}' is not a boundary name L{{layer}}.{{kind}}")
    return int(layer[1:]), kind


def boundary_regex() -> str:
    """A regular expression matching every boundary name (Snakemake wildcard constraint)."""
    return r"L\d+\.(" + "|".join(KINDS) + ")"


def family_kinds(family: str) -> tuple[str, ...]:
    try:
        return FAMILY_KINDS[family]
    except KeyError:
        raise ValueError(f"unknown model family '{family}'; known: {', '.join(sorted(FAMILY_KINDS))}") from None


def boundaries_for(family: str, n_layers: int) -> list[str]:
    """Boundary names of a model of `family` with `n_layers` blocks, known from the config alone."""
    return boundary_names(family_kinds(family), n_layers)


def all_kinds() -> list[str]:
    """Every boundary kind of every family, each once (for the workflow's wildcard constraint)."""
    return sorted({k for kinds in FAMILY_KINDS.values() for k in kinds}, key=lambda k: (KIND_ORDER[k], k))


def block_input_names(boundaries: list[str]) -> list[str]:
    """The first boundary of each block (its input h_l), then ``final``: what the tokenwise stage reads."""
    firsts: dict[int, str] = {}
    for b in boundaries:
        firsts.setdefault(parse_boundary(b)[0], b)
    return [firsts[l] for l in sorted(firsts)] + [FINAL]


def kept_boundaries(boundaries: list[str], setting) -> list[str]:
    """``activations.boundaries`` -> the boundaries a store keeps, in depth order (``final`` is always kept).

    ``all`` keeps every boundary; ``block_inputs`` the block inputs (all the tokenwise stage reads); a list
    names the boundaries to keep, each of which must be a boundary of the model.
    """
    if setting in (None, "all"):
        return list(boundaries)
    if setting == "block_inputs":
        return block_input_names(boundaries)[:-1]
    if isinstance(setting, str):
        raise LayergeomError(f"activations.boundaries: '{setting}' is not all, block_inputs or a list of boundaries")
    unknown = sorted(set(setting) - set(boundaries))
    if unknown:
        raise LayergeomError(
            f"activations.boundaries: {unknown} are not boundaries of this model ({boundaries[:3]}...)"
        )
    return [b for b in boundaries if b in set(setting)]
