"""The stream's vocabulary, importable without torch: boundary kinds and names, and the final state."""

from __future__ import annotations

FINAL = "final"

# Boundary kinds and their order inside a block. ``attn`` and ``block`` open a block (the block input);
# ``mlp`` is the state entering the MLP; ``pli`` the state entering a per-layer-input step (Gemma-4),
# whose update also applies the block's output scale. A new kind is added here and nowhere else.
KIND_ORDER: dict[str, int] = {"attn": 0, "block": 0, "mlp": 1, "pli": 2}
KINDS = tuple(KIND_ORDER)
# Kinds whose update acts on each position alone (no mixing across positions): their in-context
# update and Jacobian equal the isolated ones.
TOKENWISE_KINDS = frozenset({"mlp", "pli"})


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
