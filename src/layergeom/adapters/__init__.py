"""Architecture adapters: one small class per family. Adding an architecture means adding one adapter.

Adding an architecture (a new ``model_type``, or a new family):

1. Read the transformers modeling file of the model type (``transformers/models/<type>/modeling_<type>.py``):
   the decoder layer's ``forward`` (where the residual additions are, what each sublayer takes: masks,
   rotary tables per layer type, sliding windows, caches, extra per-token inputs) and the model's
   ``forward`` (embedding scale, how masks and rotary tables are built, the final norm and the head).
2. If an existing adapter's block matches, add the type to its ``model_types``; otherwise write a new
   adapter (``base.Adapter``): module paths, ``sublayer`` (each update ``F_b`` so that
   ``x_next = x + F_b(x)`` holds exactly), ``call_block`` (for resumes), ``capture_points``. A new family's
   boundary kinds (one block's, in stream order) go in ``names.FAMILY_KINDS``, not in the adapter: the
   adapter reads its ``kinds`` from there, and the workflow builds its DAG from there without torch (an
   adapter whose family has no entry fails at import). A step that fits no existing boundary kind gets a
   new kind in ``names.KIND_ORDER`` (its order inside the block, and ``TOKENWISE_KINDS`` if it acts on
   each position alone). An update that depends on the token as well as the state sets ``uses_tokens``
   and reads the ``tokens`` argument.
3. Register a new adapter in ``ADAPTERS`` below and its family in the ``family`` enum of
   ``config/schema/config.schema.yaml`` (a test checks they are one list).
4. Give the type a tiny random config in ``tests/conftest.py`` (``TINY_CONFIGS``; vocab 512, 2–4
   layers, d≈32): the contract tests run over every listed type and fail on a type without one.
5. Add a row to the supported model types table in docs/models.md (a test checks it against the registry).
6. Optionally, a tiny model of the type in ``config/test.yaml`` so that the whole workflow runs it.
"""

from __future__ import annotations

from .base import FINAL, Adapter, Boundary, CleanRun, boundary_names
from .gemma3 import Gemma3Adapter
from .gemma4 import Gemma4Adapter
from .gpt2 import GPT2Adapter
from .llama import LlamaAdapter
from .mamba import MambaAdapter
from .neox import NeoXAdapter

ADAPTERS: dict[str, type[Adapter]] = {
    a.family: a for a in (GPT2Adapter, NeoXAdapter, LlamaAdapter, Gemma3Adapter, Gemma4Adapter, MambaAdapter)
}
FAMILIES = tuple(ADAPTERS)
MODEL_TYPES: dict[str, str] = {t: fam for fam, a in ADAPTERS.items() for t in a.model_types}  # model_type -> family


def adapter_class(family: str) -> type[Adapter]:
    try:
        return ADAPTERS[family]
    except KeyError:
        raise ValueError(f"unknown model family '{family}'; known: {', '.join(FAMILIES)}") from None


def family_of(model_type: str) -> str:
    """The family whose adapter handles a transformers ``model_type``."""
    try:
        return MODEL_TYPES[model_type]
    except KeyError:
        raise ValueError(
            f"no adapter handles model_type '{model_type}'; supported model types: {', '.join(MODEL_TYPES)}"
        ) from None


def get_adapter(model) -> Adapter:
    return adapter_class(family_of(model.config.model_type))(model)


def boundaries_for(family: str, n_layers: int) -> list[str]:
    """Boundary names of a model, known from the config alone (used to fan out jobs)."""
    return boundary_names(adapter_class(family).kinds, n_layers)


__all__ = [
    "ADAPTERS",
    "FAMILIES",
    "FINAL",
    "MODEL_TYPES",
    "Adapter",
    "Boundary",
    "CleanRun",
    "adapter_class",
    "boundaries_for",
    "boundary_names",
    "family_of",
    "get_adapter",
]
