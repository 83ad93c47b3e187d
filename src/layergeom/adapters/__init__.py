"""Architecture adapters: one small class per family. Adding an architecture means adding one adapter."""

from __future__ import annotations

from .base import FINAL, Adapter, Boundary, CleanRun, boundary_names
from .gemma3 import Gemma3Adapter
from .gpt2 import GPT2Adapter
from .llama import LlamaAdapter
from .mamba import MambaAdapter
from .neox import NeoXAdapter

ADAPTERS: dict[str, type[Adapter]] = {
    a.family: a for a in (GPT2Adapter, NeoXAdapter, LlamaAdapter, Gemma3Adapter, MambaAdapter)
}
FAMILIES = tuple(ADAPTERS)


def adapter_class(family: str) -> type[Adapter]:
    try:
        return ADAPTERS[family]
    except KeyError:
        raise ValueError(f"unknown model family '{family}'; known: {', '.join(FAMILIES)}") from None


def family_of(model_type: str) -> str:
    """The family whose adapter handles a transformers ``model_type``."""
    for fam, cls in ADAPTERS.items():
        if model_type in cls.model_types:
            return fam
    raise ValueError(f"no adapter handles model_type '{model_type}'; known families: {', '.join(FAMILIES)}")


def get_adapter(model) -> Adapter:
    return adapter_class(family_of(model.config.model_type))(model)


def boundaries_for(family: str, n_layers: int) -> list[str]:
    """Boundary names of a model, known from the config alone (used to fan out jobs)."""
    return boundary_names(adapter_class(family).kinds, n_layers)


__all__ = [
    "ADAPTERS",
    "FAMILIES",
    "FINAL",
    "Adapter",
    "Boundary",
    "CleanRun",
    "adapter_class",
    "boundaries_for",
    "boundary_names",
    "family_of",
    "get_adapter",
]
