"""Running on a cluster: profiles that merge as intended, GPU tags and the local GPU limit, the grouped per-layer
fits, resources that grow with each retry, hub downloads on the submitting host, the DAG without torch, the CUDA
environment, and GPU jobs whose torch sees no GPU.

Profile merges and rule resources are read from Snakemake's own argument parsing and workflow parser, not from
the YAML files alone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import ROOT, require_dag_marker

from layergeom import fetch, materialize, models, names, network, schedule
from layergeom.runtime import LayergeomError, gpus_assigned, resolve_device, visible_gpus

TEST_CONFIG = ROOT / "config" / "test.yaml"
PAPERS = ROOT / "config" / "papers.yaml"
WORKFLOW_PROFILE = ROOT / "profiles" / "default" / "config.yaml"
CLUSTER_PROFILES = [ROOT / "profiles" / "slurm" / "config.yaml", ROOT / "tests" / "cluster" / "profile" / "config.yaml"]
GPU_RULES = {"activations", "tokenwise_fit", "tokenwise_kl", "train_model"}  # + spectra_jacobians_<model>
# settings of how to run, which the workflow profile must leave to the command line or a --profile
RUN_SETTINGS = {"cores", "jobs", "keep-going", "retries", "executor", "resources", "default-resources",
                "set-resources", "group-components", "set-threads", "local-cores", "config"}  # fmt: skip


# ---- helpers ------------------------------------------------------------------------------------------
def cli_args(*argv: str) -> dict:
    """Snakemake's parsed command line (profiles merged the way `snakemake ...` merges them)."""
    from snakemake.cli import parse_args

    _, args = parse_args(["-s", str(ROOT / "Snakefile"), *argv])
    return vars(args)


def comparable(value):
    """Parsed arguments as plain data (Snakemake's parsed resources and settings objects define no equality)."""
    from snakemake.resources import Resource

    if isinstance(value, Resource):
        return value.raw
    if hasattr(value, "items"):
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [comparable(v) for v in value]
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return {"type": type(value).__name__, **comparable(vars(value))}
    return value


def evaluated(resource, attempt: int, wildcards=None, input=None):
    """A rule's or a profile's resource as Snakemake evaluates it for a job's `attempt`-th try."""
    return resource.evaluate(
        wildcards=wildcards, input=input, attempt=attempt, threads=1, rulename="r", async_run=None
    ).value


def profile_keys(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def parse_workflow(config: Path = TEST_CONFIG, *, nodes: int | None = None, overrides: dict | None = None, **res):
    """The parsed workflow's global `gpu`, and per rule its resources, group and conda env."""
    require_dag_marker("parses the workflow with Snakemake")
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings

    with SnakemakeApi(OutputSettings(quiet=True)) as api:
        wf = api.workflow(
            resource_settings=ResourceSettings(cores=2, nodes=nodes, resources=res),
            config_settings=ConfigSettings(configfiles=[config], config=overrides or {}),
            storage_settings=StorageSettings(),
            snakefile=ROOT / "Snakefile",
        )._workflow
        gpu = wf.global_resources["gpu"].value if "gpu" in wf.global_resources else None
        rules = {
            r.name: {
                "resources": dict(r.resources.items()),  # name -> snakemake Resource
                "group": r._group,  # `r.group` is None in a local run: groups only apply to cluster jobs
                "env": r.conda_env,
            }
            for r in wf.rules
        }
    return gpu, rules


def gpu_tagged(rules: dict) -> dict[str, int]:
    return {
        n: r["resources"]["gpu"].value if "gpu" in r["resources"] else 0
        for n, r in rules.items()
        if n in GPU_RULES or n.startswith("spectra_jacobians_")
    }


# ---- profiles -----------------------------------------------------------------------------------------
def test_workflow_profile_holds_only_what_applies_everywhere():
    keys = profile_keys(WORKFLOW_PROFILE)
    assert not set(keys) & RUN_SETTINGS, f"profiles/default sets run settings: {set(keys) & RUN_SETTINGS}"
    local = cli_args("--cores", "2")
    assert local["printshellcmds"] and local["rerun_incomplete"] and local["show_failed_logs"]
    assert local["keep_going"] is False and local["retries"] == 0 and local["executor"] in (None, "local")
    assert sorted(str(t.item_to_choice()) for t in local["rerun_triggers"]) == sorted(keys["rerun-triggers"])


@pytest.mark.parametrize("profile", CLUSTER_PROFILES, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_cluster_profile_wins_over_the_workflow_profile(profile):
    """Every setting a --profile makes arrives as the profile says, with the workflow profile loaded too."""
    merged = comparable(cli_args("--profile", str(profile.parent)))
    alone = comparable(cli_args("--profile", str(profile.parent), "--workflow-profile", "none"))
    workflow_dests = {k.replace("-", "_") for k in profile_keys(WORKFLOW_PROFILE)}
    changed = {k for k in merged if merged[k] != alone[k] and k != "workflow_profile"}
    assert changed <= workflow_dests, f"the workflow profile overrides {changed - workflow_dests} of {profile}"
    for key in profile_keys(profile):
        assert merged[key.replace("-", "_")] == alone[key.replace("-", "_")], key
    assert merged["executor"] == "slurm" and merged["printshellcmds"]
    assert merged["group_components"] == {"tokenwise_fit_{model}_{checkpoint}": 1000}
    if profile.parent.name == "slurm":
        assert merged["keep_going"] is True and merged["retries"] == 1


@pytest.mark.parametrize("profile", CLUSTER_PROFILES, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_profile_memory_and_runtime_grow_with_the_attempt(profile):
    args = cli_args("--profile", str(profile.parent))
    sections = [("default-resources", args["default_resources"]), *args["set_resources"].items()]
    for where, resources in sections:
        checked = 0
        for name, res in resources.items():
            if name in ("mem", "mem_mb", "runtime"):
                one, two = evaluated(res, 1), evaluated(res, 2)
                assert isinstance(one, int) and two == 2 * one, (profile, where, name, one, two)
                checked += 1
        assert checked >= 1, f"{profile}: {where} sets neither memory nor runtime"


@pytest.mark.dag
def test_rule_memory_and_runtime_grow_with_the_attempt():
    from types import SimpleNamespace

    _, rules = parse_workflow()
    model = next(iter(yaml.safe_load(TEST_CONFIG.read_text())["models"]))
    from layergeom.spectral.settings import schur_chain_name, schur_chains

    chain = schur_chain_name(schur_chains([0.5], 0)[0])  # the fanned-out rules' wildcards: a Schur chain, a block,
    # a cumulative variant, a convergence subset
    wildcards = SimpleNamespace(model=model, checkpoint="init", block="0", chain=chain, variant="full", subset="0")
    job = {"wildcards": wildcards, "input": SimpleNamespace()}
    checked = 0
    for name, r in rules.items():
        for k, res in r["resources"].items():
            if k in ("mem", "mem_mb", "runtime") and res.is_evaluable():
                assert evaluated(res, 2, **job) == 2 * evaluated(res, 1, **job) > 0, (name, k)
                checked += 1
    assert checked >= 8, "the model rules' memory should scale with the attempt"
    assert rules["tokenwise_fit"]["resources"]["runtime"].is_evaluable()


@pytest.mark.dag
def test_profile_examples_name_real_rules_and_groups():
    """set-resources names rules of config/papers.yaml (the per-model Jacobian rules included); group-components
    names the fits' group as the rule declares it (one cluster job per model and checkpoint)."""
    _, rules = parse_workflow(PAPERS)
    slurm = profile_keys(CLUSTER_PROFILES[0])
    unknown = set(slurm["set-resources"]) - set(rules)
    assert not unknown, f"profiles/slurm set-resources names no rule of config/papers.yaml: {unknown}"
    assert any(r.startswith("spectra_jacobians_") for r in slurm["set-resources"])
    groups = {r["group"] for r in rules.values() if r["group"]}
    assert groups == {"tokenwise_fit_{model}_{checkpoint}"}
    for p in CLUSTER_PROFILES:
        assert set(profile_keys(p)["group-components"]) == groups, p
        n_layers = max(m["n_layers"] for m in yaml.safe_load(PAPERS.read_text())["models"].values())
        assert profile_keys(p)["group-components"]["tokenwise_fit_{model}_{checkpoint}"] > n_layers


# ---- GPU tags and limits -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cvd, device, nodes, want_global, want_tag",
    [
        ("0,1", "auto", None, 2, 1),  # two GPUs here: at most two GPU jobs at once
        ("", "auto", None, 0, 0),  # no GPU here: the jobs run on the CPU, side by side, none waits for a GPU
        ("-1", "cuda", None, 0, 0),  # cuda without a GPU: the job starts and says so (resolve_device)
        ("0", "cpu", None, 1, 0),  # device cpu: no job asks for the GPU
        ("", "auto", 100, 1, 1),  # a cluster (--jobs): each GPU job asks for one, whatever the login node has
        ("", "cpu", 100, 1, 0),
    ],
)
@pytest.mark.dag
def test_gpu_tags_and_the_local_gpu_limit(monkeypatch, cvd, device, nodes, want_global, want_tag):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
    gpu, rules = parse_workflow(nodes=nodes, overrides={"device": device})
    assert gpu == want_global
    tags = gpu_tagged(rules)
    assert len(tags) >= len(GPU_RULES) + 1 and set(tags.values()) == {want_tag}, tags
    assert all(t <= gpu for t in tags.values()), "a job would wait for a GPU that is not there"


@pytest.mark.dag
def test_gpu_limit_given_on_the_command_line_is_kept(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    gpu, rules = parse_workflow(overrides={"device": "auto"}, gpu=1)
    assert gpu == 1 and set(gpu_tagged(rules).values()) == {1}


def test_gpus_assigned_and_visible():
    assert gpus_assigned({"CUDA_VISIBLE_DEVICES": "0,1"}) == ["0", "1"]
    assert gpus_assigned({"CUDA_VISIBLE_DEVICES": "GPU-3f2a,MIG-77"}) == ["GPU-3f2a", "MIG-77"]
    assert gpus_assigned({"CUDA_VISIBLE_DEVICES": "2,-1,3"}) == ["2"]  # CUDA stops at the first invalid entry
    for hidden in ("", " ", "-1", "NoDevFiles"):
        assert gpus_assigned({"CUDA_VISIBLE_DEVICES": hidden}) == []
    assert gpus_assigned({}) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2"}) == 3
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) == 0


# ---- CUDA ---------------------------------------------------------------------------------------------
@pytest.fixture
def no_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal concerns a torch that sees no GPU")


def test_gpu_job_without_cuda_is_refused(monkeypatch, no_cuda):
    monkeypatch.delenv("LAYERGEOM_ALLOW_CPU_FALLBACK", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    for device in ("auto", "cuda"):
        with pytest.raises(LayergeomError, match=r"given GPU\(s\) 0 \(CUDA_VISIBLE_DEVICES\).*conda_torch: cuda"):
            resolve_device(device)
    assert resolve_device("cpu") == "cpu"  # a job that pinned the CPU runs
    monkeypatch.setenv("LAYERGEOM_ALLOW_CPU_FALLBACK", "1")  # fake GPUs of a test cluster
    assert resolve_device("auto") == "cpu"
    monkeypatch.delenv("LAYERGEOM_ALLOW_CPU_FALLBACK")
    for hidden in ("", "-1", "NoDevFiles"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert resolve_device("auto") == "cpu"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert resolve_device("auto") == "cpu"
    with pytest.raises(LayergeomError, match="no CUDA device is visible"):
        resolve_device("cuda")


@pytest.mark.dag
def test_workflow_gpu_job_without_cuda_stops_at_once(tmp_path, no_cuda):
    """End to end: a local run that sees GPU 0 tags the activations job with it; the job's CPU torch stops it
    at once with the message, in the job's log, and leaves no output."""
    env = {k: v for k, v in os.environ.items() if k != "LAYERGEOM_ALLOW_CPU_FALLBACK"}
    env.update(CUDA_VISIBLE_DEVICES="0", PYTHONPATH=str(ROOT / "src"))
    cfg = yaml.safe_load(TEST_CONFIG.read_text())
    cfg["models"] = {"tiny-gpt2": cfg["models"]["tiny-gpt2"]}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "snakemake", "results/tiny-gpt2/init/activations", "-s", str(ROOT / "Snakefile"),
           "-d", str(tmp_path), "--cores", "2", "--configfile", str(tmp_path / "config.yaml"), "--config", "device=auto"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert res.returncode != 0
    assert "gpu=1" in res.stdout + res.stderr  # the job asked for the one GPU this run sees
    log = (tmp_path / "logs" / "activations" / "tiny-gpt2" / "init.log").read_text()
    assert "cuda_visible_devices=0" in log and "torch" in log and "sees no CUDA device" in log
    assert not (tmp_path / "results" / "tiny-gpt2" / "init" / "activations").exists()


def test_torch_envs_differ_only_in_the_torch_build():
    cpu = yaml.safe_load((ROOT / "envs" / "torch.yaml").read_text())
    cuda = yaml.safe_load((ROOT / "envs" / "torch-cuda.yaml").read_text())

    def split(env):
        conda = [d for d in env["dependencies"] if isinstance(d, str)]
        pip = [line for d in env["dependencies"] if isinstance(d, dict) for line in d["pip"]]
        return env["channels"], conda, pip

    # torch and what only PyPI's CUDA torch needs (requirements/torch-pypi.txt) differ; the rest is equal
    torch_only = {ln.split("==")[0] for ln in (ROOT / "requirements" / "torch-pypi.txt").read_text().splitlines()}

    def common(pip):
        return [p for p in pip if not p.startswith("--") and p.split("==")[0] not in torch_only]

    (ch1, conda1, pip1), (ch2, conda2, pip2) = split(cpu), split(cuda)
    assert ch1 == ch2 and conda1 == conda2
    assert common(pip1) == common(pip2) and len(common(pip1)) > 10
    assert any("whl/cpu" in p for p in pip1) and not any("whl/cpu" in p for p in pip2)
    assert any(p.startswith("torch==2.13.0+cpu") for p in pip1) and not any("+cpu" in p for p in pip2)


@pytest.mark.dag
def test_conda_torch_selects_the_cuda_env_for_every_model_rule():
    _, cpu = parse_workflow()
    _, cuda = parse_workflow(overrides={"conda_torch": "cuda"})
    on_cpu = {n for n, r in cpu.items() if r["env"] == "../envs/torch.yaml"}
    assert GPU_RULES - {"train_model"} <= on_cpu
    assert {n for n, r in cuda.items() if r["env"] == "../envs/torch-cuda.yaml"} == on_cpu
    assert not any(r["env"] == "../envs/torch.yaml" for r in cuda.values())


# ---- the DAG without torch ---------------------------------------------------------------------------
# What the model code needs and snakemake does not. numpy and pandas are not blocked here because this venv's
# SLURM executor plugin imports pandas when snakemake starts; test_dag_modules_import_without_numpy covers them.
HEAVY = ["torch", "transformers", "tokenizers", "safetensors", "accelerate", "gguf", "datasets", "huggingface_hub",
         "scipy", "matplotlib", "igraph", "leidenalg", "statsmodels"]  # fmt: skip


def _blocker(path: Path, modules: list[str]) -> Path:
    for m in modules:
        (path / m).mkdir(parents=True, exist_ok=True)
        (path / m / "__init__.py").write_text(f"raise ImportError('{m} is blocked: the DAG must build without it')\n")
    return path


@pytest.mark.dag
@pytest.mark.parametrize("config", [TEST_CONFIG, PAPERS], ids=lambda p: p.name)
def test_dag_builds_and_lints_without_torch(tmp_path, config):
    """The DAG builds and lints with the model-side packages unimportable. The papers' config is only linted here:
    its dry run (~7,400 jobs, the suite's costliest) runs once, blocked the same way, for every test of
    tests/test_papers_config.py (test_papers_dag_builds_without_the_model_packages)."""
    env = {**os.environ, "PYTHONPATH": str(_blocker(tmp_path / "blocked", HEAVY))}
    base = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path / "wd"),
            "--configfile", str(config)]  # fmt: skip
    runs = [["--lint"]] if config == PAPERS else [["-n", "--cores", "2", "--quiet", "rules"], ["--lint"]]
    for extra in runs:
        res = subprocess.run(base + extra, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
        out = res.stdout + res.stderr
        assert res.returncode == 0 and "is blocked" not in out, f"{' '.join(extra)}:\n{out[-3000:]}"
    assert "good condition" in out


def test_dag_modules_import_without_numpy(tmp_path):
    """The layergeom modules that rules/*.smk import load with numpy, pandas and torch unimportable."""
    imported = set()
    for f in [ROOT / "Snakefile", *sorted((ROOT / "rules").glob("*.smk"))]:
        imported |= set(re.findall(r"^\s*(?:from|import) (layergeom[\w.]*)", f.read_text(), flags=re.M))
    assert {"layergeom.names", "layergeom.schedule", "layergeom.runtime", "layergeom"} <= imported
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in sorted(imported))
        + ("heavy = sorted({'torch', 'numpy', 'pandas', 'transformers'} & set(sys.modules))\nassert not heavy, heavy\n")
    )
    blocked = _blocker(tmp_path / "blocked", [*HEAVY, "numpy", "pandas"])
    env = {**os.environ, "PYTHONPATH": f"{blocked}{os.pathsep}{ROOT / 'src'}"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]


def test_family_kinds_match_the_adapters():
    """names.FAMILY_KINDS is the one declaration of each family's kinds: the adapters read theirs from it, an
    adapter cannot declare its own, and every entry belongs to an adapter."""
    from layergeom.adapters import ADAPTERS, Adapter, Boundary, boundaries_for

    assert set(ADAPTERS) == set(names.FAMILY_KINDS), "a FAMILY_KINDS entry without an adapter, or the reverse"
    for family, cls in ADAPTERS.items():
        assert cls.kinds is names.FAMILY_KINDS[family], family
        assert names.boundaries_for(family, 3) == boundaries_for(family, 3)
        for k in cls.kinds:
            assert Boundary.parse(f"L0.{k}").order == names.KIND_ORDER[k], k
    schema = yaml.safe_load((ROOT / "config" / "schema" / "config.schema.yaml").read_text())
    families = schema["$defs"]["model"]["properties"]["family"]["enum"]
    assert set(families) <= set(names.FAMILY_KINDS), "a family the config accepts has no boundary kinds"
    assert set(names.all_kinds()) == {k for ks in names.FAMILY_KINDS.values() for k in ks}
    with pytest.raises(ValueError, match="unknown model family"):
        names.boundaries_for("nope", 2)
    with pytest.raises(TypeError, match="no entry in names.FAMILY_KINDS"):
        type("NopeAdapter", (Adapter,), {"family": "nope", "model_types": ("nope",)})
    with pytest.raises(TypeError, match="declare the kinds"):
        type("OwnKindsAdapter", (Adapter,), {"family": "gpt2", "model_types": ("gpt2",), "kinds": ("attn",)})


def _numpy_log_spaced_steps(total: int, n: int) -> list[int]:
    """The former numpy recipe, as an independent reference."""
    steps = {0, total} | {int(round(x)) for x in np.geomspace(1, total, n - 1)}
    steps = sorted(steps)
    while len(steps) > n:
        gaps = [np.log((steps[i + 1] + 1) / (steps[i - 1] + 1)) for i in range(1, len(steps) - 1)]
        steps.pop(1 + int(np.argmin(gaps)))
    return steps


def test_log_spaced_steps_match_the_numpy_recipe():
    cases = [(t, n) for t in [*range(1, 400, 7), 1000, 4096, 143000, 10**6, 1413814] for n in range(2, 30, 3)]
    for total, n in cases:
        assert schedule.log_spaced_steps(total, n) == _numpy_log_spaced_steps(total, n), (total, n)
    with pytest.raises(LayergeomError):
        schedule.log_spaced_steps(10, 1)


# ---- downloads on the submitting host ------------------------------------------------------------------
def test_hub_patterns_pick_one_weight_format():
    both = ["config.json", "model-00001-of-00002.safetensors", "pytorch_model.bin", "tokenizer.json"]
    pats = fetch.hub_patterns(both)
    assert "*.safetensors" in pats and not any(p.endswith(".bin") for p in pats) and "*.py" not in pats
    assert "pytorch_model*.bin" in fetch.hub_patterns(["config.json", "pytorch_model.bin"])
    assert "*.py" in fetch.hub_patterns(both, trust_remote_code=True)
    with pytest.raises(LayergeomError, match="no safetensors"):
        fetch.hub_patterns(["config.json", "README.md"])


def test_download_offline_fails_at_once_and_names_the_default(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    t0 = time.monotonic()
    with pytest.raises(LayergeomError, match="embedded default"):
        fetch.download_hub("EleutherAI/pythia-14m", "step0", tmp_path / "hub" / "step0")
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "hub").exists() or os.listdir(tmp_path / "hub") == []


class _FakeHub:
    """huggingface_hub's model_info, hf_hub_download and snapshot_download over a local folder (the 'remote'
    revision), filling a cache laid out like huggingface_hub's (blobs, snapshots/<commit>, refs)."""

    def __init__(self, remote: Path, cache: Path, fail_after: int | None = None):
        self.remote, self.cache, self.fail_after, self.patterns = remote, cache, fail_after, None
        self.sha = "c0ffee" * 6 + "abcd"

    def model_info(self, repo_id, revision=None):
        files = sorted(str(p.relative_to(self.remote)) for p in self.remote.rglob("*") if p.is_file())
        return type("Info", (), {"sha": self.sha, "siblings": [type("S", (), {"rfilename": f}) for f in files]})

    def _put(self, repo_id, name) -> Path:
        snapshot = self.cache / f"models--{repo_id.replace('/', '--')}" / "snapshots" / self.sha
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        if not (snapshot / name).exists():
            blob = snapshot.parent.parent / "blobs" / name.replace("/", "_")
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes((self.remote / name).read_bytes())
            (snapshot / name).symlink_to(blob)
        (snapshot.parent.parent / "refs").mkdir(exist_ok=True)
        (snapshot.parent.parent / "refs" / "step0").write_text(self.sha)
        return snapshot

    def hf_hub_download(self, repo_id, filename, revision=None, **kw):
        return str(self._put(repo_id, filename) / filename)

    def snapshot_download(self, repo_id, revision=None, allow_patterns=None, **kw):
        import fnmatch

        self.patterns = allow_patterns
        wanted = [p for p in sorted(self.remote.rglob("*")) if p.is_file()]
        wanted = [p for p in wanted if any(fnmatch.fnmatch(str(p.relative_to(self.remote)), w) for w in allow_patterns)]
        for i, p in enumerate(wanted):
            if self.fail_after is not None and i >= self.fail_after:
                raise ConnectionError("connection reset")
            snapshot = self._put(repo_id, str(p.relative_to(self.remote)))
        return str(snapshot)


def _hf_dir(path: Path, family: str = "gpt_neox") -> Path:
    """A tiny model of `family` with a trained BPE, saved in the Hugging Face layout."""
    from conftest import tiny_model

    from layergeom import corpus

    tiny_model(family, seed=5).save_pretrained(path)
    corpus.train_bpe(corpus.load_documents({"source": "python-docs"})[:20], 512, path / "_tok")
    models.load_tokenizer(path / "_tok").save_pretrained(path)
    return path


def test_download_then_materialize_reads_only_local_files(tmp_path, monkeypatch):
    """The download rule's function fetches the revision's safetensors and tokenizer (not the .bin); materialize
    then builds the checkpoint from those files with the hub unreachable; without them it says what to run."""
    import huggingface_hub
    import huggingface_hub.constants

    remote = _hf_dir(tmp_path / "remote")
    (remote / "pytorch_model.bin").write_bytes(b"old format, must not be fetched")
    (remote / "README.md").write_text("not needed")
    hub = _FakeHub(remote, tmp_path / "hf-cache", fail_after=2)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, *a, **k: hub.model_info(*a, **k))
    monkeypatch.setattr(network, "hub_unreachable", lambda: None)  # the fake hub answers
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub.snapshot_download)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hub.hf_hub_download)
    out = tmp_path / "resources" / "hub" / "p" / "step0"
    with pytest.raises(LayergeomError, match="ConnectionError"):  # interrupted: nothing at out, the cache keeps
        fetch.download_hub("org/tiny", "step0", out)  # what came down (huggingface_hub resumes from it)
    assert not out.exists() and len(list((tmp_path / "hf-cache").rglob("blobs/*"))) >= 2
    hub.fail_after = None
    record = fetch.download_hub("org/tiny", "step0", out)
    assert "model.safetensors" in record["files"] and "tokenizer.json" in record["files"]
    assert not (out / "pytorch_model.bin").exists() and not (out / "README.md").exists()
    assert (out / "model.safetensors").is_symlink()  # a link into the cache, not a second copy
    assert json.loads((out / fetch.DOWNLOAD_JSON).read_text())["commit"] == record["commit"] == hub.sha

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # a compute node: no network
    mcfg = {"source": "hub", "family": "gpt_neox", "id": "org/tiny", "n_layers": 2,
            "checkpoints": {"step0": {"revision": "step0"}}}  # fmt: skip
    info = materialize.materialize("p", "step0", mcfg, tmp_path / "m" / "step0", hub_dir=out)
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(remote, local_files_only=True)
    assert info["weights_sha256"] == models.weights_sha256(ref.state_dict())
    assert info["revision"] == "step0" and (tmp_path / "m" / "step0" / "tokenizer.json").exists()
    with pytest.raises(LayergeomError, match="`download` rule"):
        materialize.materialize("p", "step0", mcfg, tmp_path / "m" / "again")
    assert not (tmp_path / "m" / "again").exists()


@pytest.mark.dag
def test_downloads_are_local_rules():
    sys.path.insert(0, str(ROOT / "tests" / "cluster"))
    from check_slurm_run import local_rules

    _, rules = parse_workflow(PAPERS)
    assert {"download", "download_gguf"} <= local_rules() and "materialize" not in local_rules()
    assert rules["download"]["env"] == "../envs/hub.yaml"


# ---- materialize's memory ------------------------------------------------------------------------------
def _sparse_safetensors(path: Path, n: int, dtype: str = "F32") -> Path:
    """A safetensors file declaring n elements, its data a hole (nothing on disk): only the header is read."""
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "w": {"dtype": dtype, "shape": [n], "data_offsets": [0, 4 * n]}}).encode()  # fmt: skip
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + 4 * n)
    return path


def test_safetensors_elements_are_counted_from_the_header(tmp_path):
    from safetensors.numpy import save_file

    from layergeom.resources.files import checkpoint_elements, safetensors_elements

    arrays = {"a": np.zeros((3, 5), np.float32), "b": np.zeros(7, np.float16), "c": np.zeros((2, 2, 2), np.int64)}
    save_file(arrays, tmp_path / "model.safetensors", metadata={"format": "pt"})
    assert safetensors_elements(tmp_path / "model.safetensors") == sum(a.size for a in arrays.values())
    _sparse_safetensors(tmp_path / "model-2.safetensors", 10**9)
    assert checkpoint_elements([tmp_path, tmp_path / "missing"]) == 10**9 + sum(a.size for a in arrays.values())


def test_pickle_weights_count_their_bytes_on_top(tmp_path):
    """A .bin-only hub revision (old Pythia steps) is read whole before the conversion: its bytes, plus at most
    bytes / 2 parameters in the target dtype."""
    from layergeom.resources.materialize import materialize_mem_mb, materialize_request_mb

    with open(tmp_path / "pytorch_model.bin", "wb") as f:
        f.truncate(2 * 10**9)  # sparse: 10^9 float16 parameters
    assert materialize_request_mb([tmp_path, None], "float32") == materialize_mem_mb(10**9, "float32", 2000)
    assert materialize_request_mb([tmp_path], "float32") == int(1.3 * 4e9 / 1e6 + 2500 + 2000)
    assert materialize_request_mb([tmp_path / "nothing"], "float32") == materialize_mem_mb(0)


def test_materialize_memory_covers_the_measured_peaks():
    """The request (1.3x the weights in the target dtype + 2.5 GB; 4 GB for GGUF sources, whose files have no
    safetensors header) is at least the peak resident set measured by bench/materialize_memory.py."""
    from layergeom.resources.materialize import MATERIALIZE_MIN_MB, materialize_mem_mb

    rows = json.loads((ROOT / "bench" / "results" / "materialize_memory.json").read_text())["rows"]
    assert {r["case"] for r in rows} >= {"local", "init", "smollm2", "gemma3"}
    for r in rows:
        asked = materialize_mem_mb(r["params"], r["dtype"]) if r["case"] in ("local", "init") else MATERIALIZE_MIN_MB
        assert asked >= r["peak_mb"], r
    assert materialize_mem_mb(8_030_261_248, "float32") < 45_000  # Llama-3.1-8B: was 72 GB in the profile


@pytest.mark.dag
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_materialize_asks_for_the_memory_of_its_weights(tmp_path, dtype):
    """A local checkpoint of 10^9 parameters (a sparse file): the materialize job of the DAG asks for
    1.3 x 10^9 x bytes(dtype) + 2.5 GB, its init sibling the same (the shape of its reference checkpoint)."""
    from layergeom.resources.materialize import materialize_mem_mb

    src = tmp_path / "big"
    src.mkdir()
    _sparse_safetensors(src / "model.safetensors", 10**9)
    (src / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (src / "tokenizer.json").write_text("{}")
    cfg = yaml.safe_load(TEST_CONFIG.read_text())
    cfg["models"] = {"big": {"source": "local", "family": "llama", "path": str(src), "n_layers": 2, "dtype": dtype,
                             "checkpoints": {"trained": {}, "init": {"init": True, "seed": 0}}}}  # fmt: skip
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "snakemake", "-n", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path / "wd"),
           "--configfile", str(tmp_path / "c.yaml"), "--until", "materialize"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    asked = re.findall(r"rule materialize:.*?wildcards: model=big, checkpoint=(\w+).*?mem_mb=(\d+)", res.stdout, re.S)
    want = materialize_mem_mb(10**9, dtype)
    assert dict(asked) == {"trained": str(want), "init": str(want)}, res.stdout[-3000:]
    assert want == int(1.3 * 10**9 * {"float32": 4, "bfloat16": 2}[dtype] / 1e6 + 2500)
