"""The stream's vocabulary, importable without torch: boundary names and the final state."""

from __future__ import annotations

FINAL = "final"


def boundary_names(kinds: tuple[str, ...], n_layers: int) -> list[str]:
    """All boundary names of a model in depth order (without ``final``)."""
    return [f"L{l}.{k}" for l in range(n_layers) for k in kinds]
