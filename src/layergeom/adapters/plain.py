"""Every model an adapter works on runs transformers' own torch code: no fused kernel swapped in.

The Jacobians must be exact: autodiff (forward mode, float64 where a stage asks for it) through the modules the
adapter names. Two mechanisms of transformers put other code in their place:

- **Hub kernels** (the ``kernels`` package). ``from_pretrained(use_kernels=True)``, which is the default from
  transformers 5.25 on (where ``kernels`` is a dependency), and ``model.kernelize()`` replace the ``forward`` of
  layers such as RMSNorm, the activations, the rotary embedding and Mamba's scan and convolution by kernels
  fetched from the Hub, for the device the model is on (CUDA, ROCm, XPU; a mapping may name the CPU too).
  ``layergeom.models`` and ``layergeom.materialize`` load with ``use_kernels=False``; :func:`check_plain` refuses
  a model in which any module's ``forward`` is not its class's own.
- **Fused packages** (``mamba_ssm``, ``causal_conv1d``, ``fla``). Where one is installed, the modeling code that
  lists it imports it and calls its kernels instead of the torch code (transformers up to 5.24 on every device,
  5.25 on CUDA). :func:`check_plain` refuses a model whose modeling code lists an installed one.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import re
from pathlib import Path

from torch import nn

from ..runtime import LayergeomError

# `use_kernel_func_from_hub_with_fallback("<function>", "<package>")`: where the package is installed, transformers'
# modeling code calls its kernel instead of the decorated torch function (5.25: for CUDA inputs; before: for all)
_FALLBACK = re.compile(r"use_kernel_func_from_hub_with_fallback\(\s*['\"][^'\"]+['\"]\s*,\s*['\"]([\w.]+)['\"]")


def swapped_modules(model: nn.Module) -> list[str]:
    """Modules, and the kernel functions attached to them, whose ``forward`` is not their class's own.

    ``kernels.kernelize`` sets a replacement ``forward`` (and ``_kernel_repo``) on the instance; transformers keeps
    the functions it lets ``kernelize`` replace (``use_kernelized_func``) in each module's ``_kernel_funcs``."""
    out = []
    for name, module in model.named_modules():
        parts = [(name or type(model).__name__, module)]
        parts += [(f"{name}.{k}", f) for k, f in vars(module).get("_kernel_funcs", {}).items()]
        out += [where for where, m in parts if "forward" in vars(m) or "_kernel_repo" in vars(m)]
    return out


def fused_packages(model: nn.Module) -> list[str]:
    """Installed packages whose fused kernels the model's modeling code calls instead of its torch code."""
    return sorted(p for p in listed_packages(type(model)) if importlib.util.find_spec(p.split(".")[0]) is not None)


@functools.cache
def listed_packages(cls: type) -> frozenset[str]:
    """The fused packages that the modeling code of a model class (and its transformers bases) lists."""
    packages = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("transformers.models."):
            continue
        try:
            source = Path(inspect.getsourcefile(klass)).read_text()
        except (TypeError, OSError):
            continue
        packages |= set(_FALLBACK.findall(source))
    return frozenset(packages)


def check_plain(model: nn.Module) -> None:
    """Refuse a model that would not run transformers' own torch code."""
    swapped = swapped_modules(model)
    if swapped or getattr(model, "use_kernels", False):
        shown = ", ".join(swapped[:3]) + (f" and {len(swapped) - 3} more" if len(swapped) > 3 else "")
        raise LayergeomError(
            f"hub kernels replace the code of {shown or 'the model'} (use_kernels or kernelize): the Jacobians need "
            f"the model's own torch code; load it with use_kernels=False (layergeom.models.load_model does)"
        )
    fused = fused_packages(model)
    if fused:
        raise LayergeomError(
            f"{', '.join(fused)} is installed, so transformers runs {type(model).__name__} through its fused "
            f"kernels instead of its torch code, which the exact Jacobians need: run layergeom in an environment "
            f"without {', '.join(fused)} (the locked one: tools/install.sh)"
        )
