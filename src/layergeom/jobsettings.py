"""Per job, exactly the configuration keys it reads: its settings object, built from the merged config.

Each rule's ``params`` are the fields of its job's settings (``settings(config, job, model)``), and each
script reads only those. Snakemake reruns a job whose params changed, so a key is a rerun trigger for the
jobs that read it (and, through their outputs, their dependants) and for no others. Keys are dotted paths
into the validated config (``seed``, ``corpus.n_windows``, ``spectra.sr_k``, ``topology.leiden.seed``); the
analysis sections' keys are read from the model's merged section (the global values with its
``models.<name>.overrides`` merged in). There are no defaults here: validation fills the schema's defaults
into the config before any settings are made (``layergeom.config.validate``).

Importable without torch or numpy: the workflow builds its DAG from it, and ``tools/config_reference.py``
lists, for each key of config/README.md, the jobs it reruns.
"""

from __future__ import annotations

from .config import model_section
from .spectral.settings import JACOBIAN_KEYS

#: the run keys of the jobs that run a model (torch): the seed, where tensors live and torch's threads
#: (summation orders, and with them the last bits of a result, can depend on the thread count)
_MODEL_RUN = ("seed", "device", "threads")
#: the run keys of Paper B's analysis jobs that compute on a GPU when the model is at least `gpu_min_width` wide
#: (rules/common.smk analysis_gpus, layergeom.workflow.job_device): CPU and GPU round differently
_ANALYSIS_RUN = ("device", "gpu_min_width")


def _keys(section: str, *names: str) -> tuple[str, ...]:
    return tuple(f"{section}.{n}" for n in names)


#: job -> the config keys it reads. A job is a rule, or the family of rules generated per model
#: (``spectra_jacobians_<model>``, ``topology_graph_<model>[_block<k>]``) or per figure (``spectra_figure_<figure>``).
JOB_KEYS: dict[str, tuple[str, ...]] = {
    # ---- sources (the model's own keys, models.<name>.*, are read by materialize and download) ----
    "corpus": ("corpus.source", "corpus.split", "corpus.paths"),
    "windows": ("seed", "corpus.source", "corpus.n_windows", "corpus.window_tokens"),
    "activations": (*_MODEL_RUN, "activations.batch_size", "activations.dtype", "activations.boundaries"),
    "manifest": ("seed",),
    # ---- Paper A ----
    "tokenwise_fit": (
        *_MODEL_RUN,
        *_keys(
            "tokenwise",
            "k",
            "leave_one_out",
            "n_anchors",
            "classes",
            "rank",
            "lowrank_form",
            "ridge",
            "mlp_width",
            "mlp_steps",
            "mlp_lr",
            "mlp_patience",
            "mlp_val_frac",
            "proj_k",
            "energy_ranks",
            "primary_convention",
        ),
    ),
    "tokenwise_kl": (*_MODEL_RUN, "tokenwise.kl_batch_rows"),
    "tokenwise_summary": ("seed", "tokenwise.bootstrap", "tokenwise.ci_level"),
    "tokenwise_convergence": ("seed", "tokenwise.bootstrap", "tokenwise.ci_level"),
    "tokenwise_figures": ("tokenwise.proj_k",),
    # ---- Paper B: spectra ----
    "spectra_jacobians": (*_MODEL_RUN, *_keys("spectra", *JACOBIAN_KEYS)),
    "spectra_table": (
        *_ANALYSIS_RUN,
        *_keys("spectra", "sr_k", "dtype", "rank_tol", "ci_level", "ci_method", "ci_blocks"),
    ),
    # spectra.boundaries_per_job below the model's boundaries fans the table out: a part job per block (the
    # key says which boundaries it computes) and a gather (no setting: it concatenates the parts); with one
    # block spectra_table runs, which does not read the key (a run without it does not rerun)
    "spectra_table_part": (
        *_ANALYSIS_RUN,
        *_keys("spectra", "sr_k", "dtype", "rank_tol", "ci_level", "ci_method", "ci_blocks", "boundaries_per_job"),
    ),
    "spectra_table_gather": (),
    "spectra_cumulative": (*_ANALYSIS_RUN, "spectra.ci_level", "spectra.ci_blocks"),
    # fanned out (spectra.boundaries_per_job, as the table): a job per variant's chain through every boundary
    # (the same keys: it reads no block) and a gather (no setting: it concatenates the variants' rows)
    "spectra_cumulative_variant": (*_ANALYSIS_RUN, "spectra.ci_level", "spectra.ci_blocks"),
    "spectra_cumulative_gather": (),
    "spectra_schur": (
        *_ANALYSIS_RUN,
        "seed",
        *_keys(
            "spectra",
            "schur_control_seed",
            "alphas",
            "sr_k",
            "dtype",
            "rank_tol",
            "schur_boundary_metrics",
            "schur_orders",
            "schur_order_alphas",
            "ci_level",
            "schur_ci_blocks",
            "schur_ci_controls",
        ),
    ),
    # the Schur surgery fanned out (spectra.boundaries_per_job, as the table): a prep job per block (the Schur
    # forms, tangents and b_* metrics), a job per product chain (every boundary; the key says which prep file
    # holds a boundary) or per segment of one (spectra.chain_segments: which depths it steps) and a gather (it
    # needs the chains' α and orders to lay out the rows, and their segments to check them)
    "spectra_schur_prep": (
        *_ANALYSIS_RUN,
        "seed",
        *_keys(
            "spectra",
            "schur_control_seed",
            "alphas",
            "sr_k",
            "dtype",
            "rank_tol",
            "schur_boundary_metrics",
            "schur_orders",
            "schur_order_alphas",
            "schur_ci_blocks",
            "schur_ci_controls",
            "boundaries_per_job",
        ),
    ),
    "spectra_schur_chain": (
        *_ANALYSIS_RUN,
        "seed",
        *_keys(
            "spectra",
            "schur_control_seed",
            "alphas",
            "dtype",
            "rank_tol",
            "schur_orders",
            "schur_order_alphas",
            "ci_level",
            "schur_ci_blocks",
            "schur_ci_controls",
            "boundaries_per_job",
            "chain_segments",
        ),
    ),
    "spectra_schur_gather": _keys("spectra", "alphas", "schur_orders", "schur_order_alphas", "chain_segments"),
    "spectra_convergence": (
        *_ANALYSIS_RUN,
        *_keys("spectra", "convergence_sizes", "convergence_boundaries", "sr_k", "dtype", "rank_tol", "ci_level"),
    ),
    # fanned out (spectra.boundaries_per_job): a job per subset size (its index: convergence_sizes picks the
    # sizes, the key says how many there can be) and a gather (no setting: the parts hold their sizes)
    "spectra_convergence_subset": (
        *_ANALYSIS_RUN,
        *_keys("spectra", "convergence_sizes", "convergence_boundaries", "sr_k", "dtype", "rank_tol", "ci_level"),
    ),
    "spectra_convergence_gather": (),
    "spectra_trends": ("seed", "spectra.ci_level"),
    "spectra_figure_eigenvalues": ("spectra.eigen_boundaries",),
    "spectra_figure_gradient": (),
    "spectra_figure_cumulative": ("spectra.cumulative_variant",),
    "spectra_figure_schur": ("spectra.cumulative_variant",),
    "spectra_figure_convergence": (),
    # ---- Paper B: topology (the graph job computes on the device the width gives it; coupling on the CPU) ----
    # topology_graph_<model>, and with spectra.boundaries_per_job below the model's boundaries its blocks'
    # rules topology_graph_<model>_block<k>: the same settings (a block's `boundaries` param names its
    # boundaries, so no block job needs the key itself; with one block the rule and its params are unchanged)
    "topology_graph": (
        *_ANALYSIS_RUN,
        "seed",
        "threads",
        *_keys(
            "topology",
            "top_k",
            "chunk_tokens",
            "resolution",
            "negative_resolution",
            "resolution_sweep",
            "boundary_percentile",
            "leiden.n_iterations",
            "leiden.seed",
        ),
    ),
    "topology_coupling": (
        "seed",
        "threads",
        *_keys("topology", "resolution", "amplification", "n_permutations", "fdr_q"),
    ),
    "topology_graph_figure": ("seed",),
    # ---- the papers' claims (per model, from the tables above; intervals of its own at those stages' levels) ----
    "claims": (
        "seed",
        "tokenwise.bootstrap",
        "tokenwise.ci_level",
        "spectra.ci_level",
        *_keys("claims", "rho_threshold", "residual_angle_deg", "complex_fraction"),
    ),
    # ---- training (source: train); its threads are train.threads, its seed train.seed ----
    "train_model": (
        "device",
        "corpus.window_tokens",
        *_keys(
            "train",
            "steps",
            "n_checkpoints",
            "batch_size",
            "lr",
            "weight_decay",
            "warmup_fraction",
            "grad_clip",
            "heldout_fraction",
            "seed",
            "threads",
        ),
    ),
}

#: keys that no job reads as a setting, and what they do instead (config/README.md says so)
OTHER_KEYS: dict[str, str] = {
    "snapshot_minutes": "nothing: how often long jobs save their state changes no result",
    "conda_torch": "nothing it reruns: with `--sdm conda`, the env of the model rules (a new env reruns them)",
    "activations.keep": "nothing: whether stores are deleted once read (temporary outputs)",
    "topology.figure_boundary": "which graph the community figure draws (a new figure job)",
    "train.n_checkpoints": "also which checkpoints a `train` model has (the DAG's shape)",
    "train.steps": "also which checkpoints a `train` model has (the DAG's shape)",
}

#: sections whose keys are merged per model (``models.<name>.overrides.<section>``)
SECTIONS = ("activations", "tokenwise", "spectra", "topology", "train", "claims")


def _get(tree: dict, dotted: str):
    node = tree
    for part in dotted.split("."):
        node = node[part]
    return node


def _put(tree: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[last] = value


def settings(config: dict, job: str, model: str | None = None) -> dict:
    """The settings of one job: exactly its keys, nested as in the config (``{"seed": 0, "spectra":
    {"sr_k": 64, ...}}``), section keys from `model`'s merged section. A key missing from the (validated)
    config is an error, never a silent default."""
    out: dict = {}
    merged: dict[str, dict] = {}
    for key in JOB_KEYS[job]:
        head, _, rest = key.partition(".")
        if rest and head in SECTIONS and model is not None:
            if head not in merged:
                merged[head] = model_section(config, model, head)
            value = _get(merged[head], rest)
        else:
            value = _get(config, key)
        _put(out, key, value)
    return out


def job_of_rule(rule: str) -> str:
    """The job (a JOB_KEYS entry) of a rule name; rules generated per model or figure share their job's."""
    if rule in JOB_KEYS:
        return rule
    for job in ("spectra_jacobians", "topology_graph"):
        if rule.startswith(f"{job}_"):
            return job
    return rule


def readers(key: str) -> list[str]:
    """The jobs that read `key` (a dotted config key), in JOB_KEYS order."""
    return [job for job, keys in JOB_KEYS.items() if key in keys]
