"""No fused kernel in place of a model's own torch code (layergeom.adapters.plain): the Jacobians must be exact.

transformers >= 5.25 requires the ``kernels`` package and, by default, has ``from_pretrained`` replace the forward
of layers it knows (RMSNorm, activations, rotary embeddings, Mamba's scan and convolution) with kernels for the
device the model is on. Hub kernels exist for CUDA, ROCm and XPU only; a kernel mapping for the CPU stands in for
them here, so that the swap happens on this machine: transformers' own loader takes it, layergeom's does not.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from conftest import TINY_CONFIGS, tiny_model
from torch import nn
from transformers import AutoModelForCausalLM

from layergeom.adapters import MODEL_TYPES, get_adapter
from layergeom.adapters.plain import check_plain, fused_packages, swapped_modules
from layergeom.models import load_model
from layergeom.runtime import LayergeomError


def hub_kernels():
    """The `kernels` package, where this transformers uses it (it ignores a version outside its supported range)."""
    kernels = pytest.importorskip("kernels", reason="the hub kernels package is not installed")
    from transformers.utils.import_utils import is_kernels_available

    if not is_kernels_available():
        pytest.skip(f"transformers does not use kernels {kernels.__version__} (outside its supported range)")
    return kernels


class _Repo:
    """A kernel 'repository' for the CPU: a layer with the module's own forward, set on the instance all the same."""

    def __init__(self, cls):
        self.cls = cls

    def load(self):
        return type(f"Hub{self.cls.__name__}", (nn.Module,), {"forward": self.cls.forward})


def cpu_kernel_mapping(model) -> dict:
    """A CPU kernel for every layer and kernel function of ``model`` that ``kernelize`` can replace."""
    mapping = {}
    for module in model.modules():
        for cls in [type(module), *(type(f) for f in vars(module).get("_kernel_funcs", {}).values())]:
            name = getattr(cls, "kernel_layer_name", None)
            if name is not None:
                mapping[name] = {"cpu": _Repo(cls)}
    return mapping


@pytest.mark.parametrize("model_type", sorted(TINY_CONFIGS))
def test_models_load_with_their_own_modules_where_hub_kernels_are_installed(model_type, tmp_path):
    """Under a kernel mapping that covers every replaceable layer of the model, transformers' loader with kernels
    on (the default from 5.25) swaps them and the adapter refuses the model; layergeom's loader swaps none, and
    the model computes what the unswapped one does."""
    kernels = hub_kernels()
    ref = tiny_model(MODEL_TYPES[model_type], model_type=model_type)
    ref.save_pretrained(tmp_path, safe_serialization=True)
    mapping = cpu_kernel_mapping(ref)
    with kernels.use_kernel_mapping(mapping):
        ours = load_model(tmp_path)
        theirs = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager", use_kernels=True)
    assert swapped_modules(ours) == [] and not ours.use_kernels
    adapter = get_adapter(ours)  # check_plain passes
    ids = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(adapter.model(ids).logits, ref(ids).logits, rtol=0, atol=0)
    if mapping:  # the types whose modeling code lists no replaceable layer have nothing to swap
        assert swapped_modules(theirs), f"kernelize swapped nothing under {sorted(mapping)}"
        with pytest.raises(LayergeomError, match="hub kernels replace"):
            get_adapter(theirs)


def test_the_mapping_covers_the_layers_hub_kernels_replace_on_gpus():
    """The stand-in mapping names the layers that transformers' own default mapping replaces on a GPU (RMSNorm,
    rotary embedding, Mamba's functions), so the test above exercises those swaps."""
    hub_kernels()
    from transformers.integrations.hub_kernels import get_kernel_mapping_transformers

    gpu_layers = set(get_kernel_mapping_transformers())
    covered = set()
    for model_type in ("llama", "mamba"):
        covered |= set(cpu_kernel_mapping(tiny_model(MODEL_TYPES[model_type], model_type=model_type)))
    assert {"RMSNorm", "rotary_pos_emb", "selective_scan_fn"} <= covered & gpu_layers, sorted(covered & gpu_layers)


def test_a_swapped_forward_is_refused_without_the_kernels_package():
    """check_plain looks at the modules themselves: any instance-level forward is refused, whatever set it."""
    model = tiny_model("llama")
    check_plain(model)
    norm = model.model.layers[0].input_layernorm
    norm.forward = lambda hidden_states: hidden_states  # what kernelize does, by hand
    assert swapped_modules(model) == ["model.layers.0.input_layernorm"]
    with pytest.raises(LayergeomError, match=r"model\.layers\.0\.input_layernorm"):
        get_adapter(model)


def test_installed_fused_packages_are_refused(monkeypatch):
    """Where mamba_ssm is installed, transformers' Mamba code calls its fused kernels instead of the torch code:
    refused, with the package named; a Llama, whose modeling code lists no fused package, is not."""
    mamba, llama = tiny_model("mamba"), tiny_model("llama")
    assert fused_packages(mamba) == [], "this environment has a fused package installed"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "mamba_ssm" else real(n, *a))
    assert "mamba_ssm" in fused_packages(mamba)
    with pytest.raises(LayergeomError, match="mamba_ssm is installed"):
        get_adapter(mamba)
    assert fused_packages(llama) == []
    check_plain(llama)


def test_random_models_are_built_without_kernels():
    """from_config never kernelizes (it takes no use_kernels): the tiny and `init` models are plain too."""
    model = tiny_model("llama")
    assert swapped_modules(model) == [] and not getattr(model, "use_kernels", False)
