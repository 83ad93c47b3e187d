"""The stream's vocabulary, importable without torch: boundary names, the kinds of each family, the final state.

The workflow builds its DAG from this module alone (``rules/common.smk``), so that parsing the Snakefile, a
dry run and ``snakemake --lint`` need neither torch nor numpy. Each adapter's ``kinds`` must equal its
family's entry here (``tests/test_cluster.py`` checks it).
"""

from __future__ import annotations

FINAL = "final"

# family -> the boundary kinds of one block, in the order the stream passes them
FAMILY_KINDS: dict[str, tuple[str, ...]] = {
    "gpt2": ("attn", "mlp"),
    "gpt_neox": ("block",),  # parallel residual: one update per block
    "llama": ("attn", "mlp"),
    "gemma3": ("attn", "mlp"),
    "gemma4": ("attn", "mlp", "pli"),  # per-layer input after the MLP
    "mamba": ("block",),
}

# kind -> its position inside a block (the sort key of boundaries within a layer)
KIND_ORDER: dict[str, int] = {"attn": 0, "block": 0, "mlp": 1, "pli": 2}


def boundary_names(kinds: tuple[str, ...], n_layers: int) -> list[str]:
    """All boundary names of a model in depth order (without ``final``)."""
    return [f"L{l}.{k}" for l in range(n_layers) for k in kinds]


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
