"""The stream's vocabulary, importable without torch: boundary names and the final state."""

from __future__ import annotations

FINAL = "final"


def boundary_names(kinds: tuple[str, ...], n_layers: int) -> list[str]:
    """All boundary names of a model in depth order (without ``final``)."""
    return [f"L{l}.{k}" for l in range(n_layers) for k in kinds]


def parse_boundary(name: str) -> tuple[int, str]:
    """``L{layer}.{kind}`` -> (layer, kind)."""
    layer, kind = name.split(".")
    if not (layer.startswith("L") and layer[1:].isdigit()):
        raise ValueError(f"'{name}' is not a boundary name L{{layer}}.{{kind}}")
    return int(layer[1:]), kind
