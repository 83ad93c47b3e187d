# Shared by all stages: config validation, wildcard constraints and named helpers (no rules here).
import os
import re
import sys
from pathlib import Path

# OpenMP threads that spin while waiting slow small torch ops 10-100x on a shared machine; jobs inherit this
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from snakemake.exceptions import WorkflowError

from layergeom import config as lgconfig
from layergeom.adapters import boundaries_for
from layergeom.runtime import LayergeomError

try:
    lgconfig.validate(config)
except LayergeomError as err:
    raise WorkflowError(str(err))

MODELS = list(config["models"])

# models trained here get their checkpoints (step{N}, log-spaced) from their train section
from layergeom.train import log_spaced_steps

for _m, _mc in config["models"].items():
    if _mc["source"] == "train":
        _t = lgconfig.model_section(config, _m, "train")
        _mc["checkpoints"] = {f"step{s}": {"step": s} for s in log_spaced_steps(_t["steps"], _t["n_checkpoints"])}


wildcard_constraints:
    model="|".join(map(re.escape, MODELS)) if MODELS else "$^",
    checkpoint="|".join(sorted({re.escape(c) for m in MODELS for c in config["models"][m]["checkpoints"]})),
    boundary=r"L\d+\.(attn|mlp|block)",
    layer=r"\d+",
    vocab=r"\d+",


# ---- models and checkpoints -------------------------------------------------------------------
def model_cfg(model):
    return config["models"][model]


def checkpoints(model):
    return list(model_cfg(model)["checkpoints"])


def is_init(model, checkpoint):
    ck = model_cfg(model)["checkpoints"][checkpoint] or {}
    return bool(ck.get("init")) or model_cfg(model)["source"] == "config"


def reference_checkpoint(model):
    """The first checkpoint with real weights: it provides the tokenizer and the config of `init`."""
    for c in checkpoints(model):
        if not is_init(model, c):
            return c
    if model_cfg(model)["source"] not in ("config", "train"):
        raise WorkflowError(f"models.{model}: an init checkpoint needs a sibling checkpoint with real weights")
    return None


def n_layers(model):
    m = model_cfg(model)
    if m.get("n_layers"):
        return int(m["n_layers"])
    if m["source"] in ("config", "train"):
        h = m["hf_config"]
        return int(h.get("num_hidden_layers") or h.get("n_layer"))
    raise WorkflowError(f"models.{model}: set n_layers (the number of blocks) to fan out per-layer jobs")


def boundaries(model):
    """Boundary names in depth order, known from the config alone."""
    return boundaries_for(model_cfg(model)["family"], n_layers(model))


def layers(model):
    return list(range(n_layers(model)))


def section(model, name):
    """One analysis section for one model: the global values with the model's overrides merged in."""
    return lgconfig.model_section(config, model, name)


def model_dir(model, checkpoint):
    return f"resources/models/{model}/{checkpoint}"


def tokenizer_dir(model):
    other = model_cfg(model)["tokenizer"].get("from_model")
    if other:
        if other not in MODELS or other == model:
            raise WorkflowError(f"models.{model}.tokenizer.from_model: '{other}' is not another model of this config")
        return tokenizer_dir(other)
    if model_cfg(model)["tokenizer"]["train_bpe"]:
        return f"resources/tokenizers/bpe{model_cfg(model)['hf_config']['vocab_size']}"
    ref = reference_checkpoint(model)
    if ref is None:
        raise WorkflowError(f"models.{model}: source config needs tokenizer: {{train_bpe: true}}")
    return model_dir(model, ref)


def materialize_cfg(model, checkpoint):
    """What one checkpoint's weights depend on: not its siblings, the overrides or the label (so editing
    those, or adding a checkpoint, reruns nothing that exists)."""
    cfg = {k: v for k, v in model_cfg(model).items() if k not in ("checkpoints", "overrides", "label")}
    return {**cfg, "checkpoints": {checkpoint: model_cfg(model)["checkpoints"][checkpoint]}}


def materialize_inputs(wildcards):
    """An init checkpoint needs its trained sibling (config, tokenizer); a BPE model its tokenizer."""
    m, c = wildcards.model, wildcards.checkpoint
    inputs = {}
    if model_cfg(m)["source"] == "train":
        return {"trained": f"resources/train/{m}"}
    if model_cfg(m)["tokenizer"]["train_bpe"]:
        inputs["tokenizer"] = f"{tokenizer_dir(m)}/tokenizer.json"
    if is_init(m, c) and model_cfg(m)["source"] != "config":
        inputs["reference"] = f"{model_dir(m, reference_checkpoint(m))}/config.json"
    return inputs


def windows_tokenizer(wildcards):
    """A file in the tokenizer's directory that some rule declares (the trained BPE, or a checkpoint)."""
    d = tokenizer_dir(wildcards.model)
    return f"{d}/tokenizer.json" if d.startswith("resources/tokenizers/") else f"{d}/source.json"


def device():
    return config["device"]


def gpu_jobs():
    """Tag heavy rules with a GPU unless the config pins the CPU."""
    return 0 if config["device"] == "cpu" else 1


def job_threads():
    return config["threads"] or 2


def run_settings():
    return {"seed": config["seed"], "device": config["device"], "threads": config["threads"]}


# ---- tokenwise stage ---------------------------------------------------------------------------------
def tokenwise_layer_files(wildcards, suffix):
    return [f"results/{wildcards.model}/{wildcards.checkpoint}/tokenwise/L{l}.{suffix}" for l in layers(wildcards.model)]


def tokenwise_runs():
    return [f"{m}/{c}" for m in MODELS for c in checkpoints(m)]


# ---- spectra stage -----------------------------------------------------------------------------------
def per_model_rule(stage, model):
    """Name of a stage's rule generated for one model (one job per checkpoint writing every boundary's file)."""
    return f"{stage}_{re.sub(r'[^A-Za-z0-9_]', '_', model)}"


def boundary_files(model, checkpoint, folder, ext):
    return [f"results/{model}/{checkpoint}/{folder}/{b}.{ext}" for b in boundaries(model)]


def spectra_jacobians(model, checkpoint, ext):
    return boundary_files(model, checkpoint, "jacobians", ext)


def topology_graphs(model, checkpoint, ext):
    return boundary_files(model, checkpoint, "graphs", ext)


def spectra_inputs(wildcards):
    """The Jacobian job's files the spectral tables read: J̄_b, the group means and their counts."""
    m, c = wildcards.model, wildcards.checkpoint
    return {
        "npy": spectra_jacobians(m, c, "npy"),
        "groups": spectra_jacobians(m, c, "groups.npy"),
        "meta": spectra_jacobians(m, c, "json"),
    }


def spectra_seed(model):
    s = section(model, "spectra")["schur_control_seed"]
    return config["seed"] if s is None else s


def spectra_figure_settings(model):
    return {
        "model": model,
        "label": model_cfg(model).get("label", model),
        "checkpoints": checkpoints(model),
        "boundaries": boundaries(model),
        "n_layers": n_layers(model),
        "spectra": section(model, "spectra"),
    }


# ---- train stage -------------------------------------------------------------------------------------
def trained_models():
    return [m for m in MODELS if model_cfg(m)["source"] == "train"]


def train_tokenizer_input(wildcards):
    return windows_tokenizer(wildcards)


def training_tables(model):
    """The per-checkpoint tables (OUTPUTS.md) that the dynamics figure follows along the training steps."""
    tables = ("tokenwise.tsv", "spectra.tsv", "cumulative.tsv", "coupling.tsv")
    return [f"results/{model}/{c}/{t}" for c in checkpoints(model) for t in tables]


# ---- final outputs -----------------------------------------------------------------------------
FINAL_OUTPUTS = []


def register_outputs(fn):
    """Each stage registers a function returning its final files; `rule all` collects them"""
    FINAL_OUTPUTS.append(fn)


def per_checkpoint(pattern):
    return [pattern.format(model=m, checkpoint=c) for m in MODELS for c in checkpoints(m)]


def get_final_output(wildcards=None):
    out = []
    for fn in FINAL_OUTPUTS:
        out += fn()
    return out
