"""Shared fixtures: tiny random models of every family and every model type the adapters list.

The models of config/test.yaml (what the workflow runs) are one source; ``TINY_CONFIGS`` adds a tiny
config for every other model type an adapter lists, so that the contract tests run over all of them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: no spinning OpenMP threads on 2 shared cores
if os.environ.get("PYTEST_XDIST_WORKER"):  # `pytest -n N`: the N workers share the cores (not N × all of them)
    _threads = str(max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, _threads)

import pytest

pytest.register_assert_rewrite("lg_runs")

import torch  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from layergeom.adapters import FAMILIES, MODEL_TYPES, adapter_class, get_adapter  # noqa: E402
from layergeom.models import build_random  # noqa: E402


def load_script(path: Path):
    """A repository script (bench/, tools/) imported as a module named after its file (registered in
    sys.modules, which dataclasses need), for tests of its functions; its folder goes first on sys.path, as
    `python path` puts it (a bench script imports bench/harness.py)."""
    import importlib.util

    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


TEST_CONFIG = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())


def _model_type(m: dict) -> str:
    return m["hf_config"].get("model_type") or adapter_class(m["family"]).model_types[0]


# family -> its first model in config/test.yaml (the family's default tiny model)
TINY: dict[str, dict] = {}
for _m in TEST_CONFIG["models"].values():
    TINY.setdefault(_m["family"], _m)

# model type -> hf_config: config/test.yaml's models, then one tiny config for each other listed type
_SMALL = dict(vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=64, max_position_embeddings=128)  # fmt: skip
TINY_CONFIGS: dict[str, dict] = {_model_type(m): m["hf_config"] for m in TEST_CONFIG["models"].values()}
for _t, _extra in {
    # sliding-window layers where the type has them (window 8 < the 24-token test windows)
    "qwen2": dict(use_sliding_window=True, sliding_window=8, max_window_layers=1),  # layer 1 sliding
    "qwen3": dict(use_sliding_window=True, sliding_window=8, max_window_layers=1, head_dim=8),
    "mistral": dict(sliding_window=8),  # one window over every layer
    "olmo": {},
    "olmo2": {},
    # layer 1 without rotary positions (NoPE) and sliding; its default pad id lies outside a tiny vocabulary
    "smollm3": dict(use_sliding_window=True, sliding_window=8, no_rope_layers=[1, 0], pad_token_id=0),
    # the multimodal wrapper around a text decoder without per-layer inputs and with the MoE branch
    "gemma4": dict(
        text_config=dict(
            _SMALL,
            model_type="gemma4_text",
            head_dim=8,
            global_head_dim=16,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"],
            hidden_size_per_layer_input=0,
            enable_moe_block=True,
            num_experts=4,
            top_k_experts=2,
            moe_intermediate_size=16,
            final_logit_softcapping=30.0,
        ),
        vision_config=None,
        audio_config=None,
        image_token_id=7,  # a placeholder id inside the tiny vocabulary: replaced by the pad id on text
    ),
}.items():
    if _t not in TINY_CONFIGS:
        TINY_CONFIGS[_t] = dict(_extra, model_type=_t) if _t == "gemma4" else dict(_SMALL, model_type=_t, **_extra)

MODEL_TYPE_LIST = sorted(MODEL_TYPES)


def _perturb_scalars(model) -> None:
    """Layer-scale buffers start at 1 in a random model: draw them so that folding them in is tested."""
    g = torch.Generator().manual_seed(0)
    for name, buf in model.named_buffers():
        if name.endswith("layer_scalar"):
            buf.copy_(0.5 + torch.rand(buf.shape, generator=g, dtype=torch.float64).to(buf.dtype))


def tiny_model(family: str, seed: int = 0, dtype=torch.float32, model_type: str | None = None):
    """A tiny randomly initialised model (vocab 512, 2-4 layers, d=32) of a family, or of one model type."""
    if model_type is None:
        return build_random(family, TINY[family]["hf_config"], seed, dtype=dtype)
    if model_type not in TINY_CONFIGS:
        raise KeyError(f"model type '{model_type}' has no tiny config in tests/conftest.py (TINY_CONFIGS)")
    model = build_random(MODEL_TYPES[model_type], TINY_CONFIGS[model_type], seed, dtype=dtype)
    with torch.no_grad():
        _perturb_scalars(model)
    return model


def central_differences(fn, x: torch.Tensor, h: float) -> torch.Tensor:
    """(N, d_out, d_in) Jacobians of a row-wise map fn((M, d)) -> (M, d): 4th-order central differences, batched."""
    N, d = x.shape
    eye = torch.eye(d, dtype=x.dtype)
    steps = (2 * h, h, -h, -2 * h)
    X = torch.cat([x[:, None] + s * eye for s in steps], dim=1).reshape(-1, d)  # (N*4d, d)
    Y = fn(X).reshape(N, 4, d, -1)  # (N, step, d_in, d_out)
    return ((-Y[:, 0] + 8 * Y[:, 1] - 8 * Y[:, 2] + Y[:, 3]) / (12 * h)).transpose(1, 2)


@pytest.fixture(params=FAMILIES)
def family(request):
    return request.param


@pytest.fixture(params=MODEL_TYPE_LIST)
def model_type(request):
    return request.param


@pytest.fixture
def tiny_adapter(family):
    return get_adapter(tiny_model(family))


@pytest.fixture
def type_adapter(model_type):
    return get_adapter(tiny_model(MODEL_TYPES[model_type], model_type=model_type))


@pytest.fixture
def token_ids():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 512, (2, 24), generator=g)


# ---- markers: `dag` (tests that start Snakemake) and `slow` -----------------------------------------------
# `pytest -m "not dag"` leaves out every test that starts Snakemake: those that need lg_runs' shared run (the
# `reference_run` fixture, directly or through another fixture: marked here), run Snakemake jobs or dry runs of
# their own, or parse the workflow (`@pytest.mark.dag` where they are; the guard below fails an unmarked one):
# the unit tests remain (2.1 min on 2 idle cores; 1.1–1.2 min with `-n auto`, pytest-xdist).
# `pytest -m "not dag and not slow"` also leaves out the unit tests below, each over ~3 s on 2 idle cores
# (statistical coverage runs, killed-and-resumed model dumps, every figure drawn, a training run): the quick
# loop while editing (45 s with `-n auto`).
DAG_FIXTURES = frozenset({"reference_run"})
SLOW_TESTS = {
    "test_modes.py": {"test_ginibre_real_eigenvalues_match_lapack_and_edelman_kostlan_shub"},
    "test_spectral.py": {"test_intervals_cover_the_true_metrics_at_the_promised_rate",
                         "test_mode_fraction_intervals_near_the_axis_and_the_circle_have_width_and_cover"},
    "test_train.py": {"test_training_lowers_heldout_loss", "test_same_seed_gives_identical_checkpoints"},
    "test_envs.py": {"test_script_imports_are_provided_by_the_rule_env"},
    "test_cluster.py": {"test_dag_builds_and_lints_without_torch"},
    "test_papers_config.py": {"test_papers_dag_fans_out_offline", "test_papers_dag_builds_without_the_model_packages"},
    "test_plots_spectral.py": {"test_draw_every_figure"},
    "test_trends.py": {"test_gradient_figure_per_kind"},
    "test_coupling_layers.py": {"test_per_layer_test_controls_the_layer_fdr"},
    "test_precision.py": {"test_store_is_temp_only_when_not_kept", "test_dag_refuses_stages_whose_boundaries_were_not_kept",
                          "test_per_model_store_overrides_build_and_keep_is_global"},
    "test_inspect.py": {"test_workflow_infers_family_and_layers_and_refuses_a_wrong_family_at_dag_time"},
    "test_resume.py": {"test_a_damaged_activation_store_is_not_resumed", "test_killed_activation_dump_resumes"},
}  # fmt: skip


# The `dag` marker is kept true at run time: a test that starts Snakemake (a subprocess whose command names
# snakemake, lg_runs' in-process parse or dry runs) without it fails, so `-m "not dag"` never runs one.
_RUNNING = {"dag": True}  # is the running test marked `dag` (outside tests: yes)


def require_dag_marker(what: str) -> None:
    if not _RUNNING["dag"]:
        raise AssertionError(f"this test {what}: mark it `dag` (@pytest.mark.dag; tests/conftest.py)")


def _names_snakemake(args) -> bool:
    tokens = args.split() if isinstance(args, str) else list(args) if isinstance(args, (list, tuple)) else [args]
    return any(Path(str(t)).name == "snakemake" for t in tokens)


class _GuardedPopen(subprocess.Popen):
    def __init__(self, args, *a, **k):
        if _names_snakemake(args):
            require_dag_marker(f"runs Snakemake ({' '.join(map(str, args)) if not isinstance(args, str) else args})")
        super().__init__(args, *a, **k)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """The guard holds through the test's setup too (module fixtures made for it included)."""
    _RUNNING["dag"] = item.get_closest_marker("dag") is not None
    real = subprocess.Popen
    if not _RUNNING["dag"]:
        subprocess.Popen = _GuardedPopen
    try:
        yield
    finally:
        subprocess.Popen = real
        _RUNNING["dag"] = True


def pytest_configure(config):
    """`pytest -n N` (pytest-xdist) runs the unit tests only: each worker would make the shared whole-DAG run
    of its own (N runs of Snakemake at 2 cores each, on the same cores), so `-m` must leave out `dag`."""
    from _pytest.mark.expression import Expression

    if not getattr(config.option, "numprocesses", None) or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    m = config.option.markexpr
    marks = ({"dag"}, {"dag", "slow"})  # a dag test's marks
    if not m or any(Expression.compile(m).evaluate(lambda name, ms=ms, **_: name in ms) for ms in marks):
        raise pytest.UsageError(
            f"pytest -n runs the unit tests only: add -m 'not dag'{f' (not -m {m!r})' if m else ''}"
        )


def pytest_collection_modifyitems(config, items):
    seen: dict[str, set[str]] = {}
    for item in items:
        if DAG_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.dag)
        module = item.path.name
        seen.setdefault(module, set()).add(item.originalname if hasattr(item, "originalname") else item.name)
        if getattr(item, "originalname", item.name) in SLOW_TESTS.get(module, ()):
            item.add_marker(pytest.mark.slow)
    whole_modules = not config.option.keyword and not any("::" in a for a in config.args)
    for module, slow in SLOW_TESTS.items():  # a renamed test must not silently lose its mark
        stale = slow - seen[module] if module in seen and whole_modules else set()
        if stale:
            raise pytest.UsageError(f"tests/conftest.py SLOW_TESTS names no test {sorted(stale)} in {module}")
