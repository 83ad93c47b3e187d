"""One settings object per job: each job's params hold exactly the config keys it reads, so changing a key
reruns the jobs that read it and their dependants, and no others (layergeom.jobsettings).

The per-key test dry-runs a finished run of config/test.yaml (the shared ``reference_run``) once per key of
config/README.md's analysis and run settings, with that one key changed to another valid value.
"""

from __future__ import annotations

import copy
import re
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from lg_runs import TEST_CONFIG_FILE, snakemake, snakemake_many, workflow_rules

from layergeom import config as lgconfig
from layergeom import jobsettings
from layergeom.runtime import LayergeomError

pytest_plugins = ["lg_runs"]

SCHEMA_KEYWORDS = {
    "$schema", "$defs", "$ref", "type", "description", "default", "enum", "const", "properties",
    "additionalProperties", "propertyNames", "required", "items", "minItems", "uniqueItems", "minProperties",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern", "oneOf", "allOf", "if", "then", "else",
}  # fmt: skip

#: keys whose change reshapes the DAG (not a params change of existing jobs), with the reason
DAG_KEYS = {
    "activations.boundaries": "which boundaries each store keeps: the spectra and topology stages refuse a store "
    "without theirs before any job runs",
    "topology.figure_boundary": "which graph figure is a target: a new job, not a changed one",
    "spectra.boundaries_per_job": "which jobs write the spectra table, schur.tsv, cumulative.tsv and "
    "convergence.tsv (one each, or parts, Schur preps and chains, variants, subset sizes, and gathers) and the "
    "graphs (one job, or one per block): other jobs, not changed ones (tests/test_fanout.py, "
    "test_fanout_chains.py and test_fanout_graphs.py dry-run them)",
    "spectra.chain_segments": "with spectra.boundaries_per_job, which jobs step the Schur chains (one per chain, "
    "or one per segment of each): other jobs (tests/test_fanout.py dry-runs them); without it, nothing",
}

#: a valid other value where the schema alone does not give one (empty lists, nulls, free strings)
NEW_VALUES = {
    "corpus.split": "train",
    "corpus.paths": ["extra.txt"],
    "threads": 2,
    "spectra.samples": "last",
    "spectra.rank_tol": 1.0e-6,
    "spectra.ci_blocks": 2,
    "spectra.schur_control_seed": 1,
    "spectra.schur_order_alphas": [0, 0.5],  # α of the schema's default grid
    "spectra.convergence_sizes": [2],
    "spectra.eigen_boundaries": ["L0.mlp"],
    "topology.n_permutations": 100,
    "topology.resolution_sweep": [0.1],
    "topology.leiden.seed": 1,
}


# ---- the schemas ---------------------------------------------------------------------------------------
def _schema_files():
    return sorted((ROOT / "config" / "schema").glob("*.schema.yaml"))


def _junk(node, path):
    """Keys of a schema object that are no JSON-schema keyword (outside `properties`, `$defs` and values)."""
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            if path and path[-1] in ("properties", "$defs"):
                out += _junk(v, [*path, str(k)])
            elif k in ("default", "enum", "const"):
                continue  # values, not schemas
            elif k not in SCHEMA_KEYWORDS:
                out.append("/".join([*path, str(k)]))
            else:
                out += _junk(v, [*path, str(k)])
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _junk(v, [*path, str(i)])
    return out


@pytest.mark.parametrize("path", _schema_files(), ids=lambda p: p.name)
def test_schema_has_no_junk_keys(path):
    """A comma in an unquoted description inside a flow mapping `{...}` cuts it short and adds its rest as
    a key: every key of a schema is a JSON-schema keyword or a property name."""
    assert _junk(yaml.safe_load(path.read_text()), []) == []


def test_junk_key_check_catches_a_cut_description():
    cut = yaml.safe_load("properties:\n  revision: {type: string, description: Hub revision (branch, tag), e.g. x.}")
    assert cut["properties"]["revision"]["description"] == "Hub revision (branch"
    assert _junk(cut, []) == ["properties/revision/tag)", "properties/revision/e.g. x."]
    quoted = yaml.safe_load('properties:\n  revision: {type: string, description: "Hub revision (branch, tag)."}')
    assert _junk(quoted, []) == [] and quoted["properties"]["revision"]["description"].endswith("tag).")


def _leaf_keys(props: dict, prefix: str) -> dict[str, dict]:
    out = {}
    for k, sub in props.items():
        if sub.get("type") == "object" and "properties" in sub:
            out.update(_leaf_keys(sub["properties"], f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = sub
    return out


def settings_keys() -> dict[str, dict]:
    """Every run-settings and analysis-section key of config/README.md (dotted) with its schema."""
    main = lgconfig.load_schema("config")
    sections = lgconfig.section_names()
    keys = _leaf_keys({k: v for k, v in main["properties"].items() if k not in ("models", *sections)}, "")
    for s in sections:
        keys.update(_leaf_keys(lgconfig.load_schema(s)["properties"], f"{s}."))
    return keys


# ---- the settings module, without a run ----------------------------------------------------------------
def test_every_key_is_read_by_a_job_or_says_what_it_does():
    keys = settings_keys()
    for key in keys:
        assert jobsettings.readers(key) or key in jobsettings.OTHER_KEYS, f"{key}: no job reads it"
    for job, job_keys in jobsettings.JOB_KEYS.items():
        assert set(job_keys) <= set(keys), f"{job} reads keys the schemas do not have"
        assert len(set(job_keys)) == len(job_keys), f"{job} lists a key twice"
    assert set(jobsettings.OTHER_KEYS) <= set(keys)


def test_settings_hold_exactly_the_jobs_keys_with_per_model_overrides():
    cfg = lgconfig.load(TEST_CONFIG_FILE)
    cfg["models"]["tiny-gpt2"]["overrides"] = {"spectra": {"sr_k": 3}}
    lgconfig.validate(cfg)
    for job, job_keys in jobsettings.JOB_KEYS.items():
        assert set(_flatten(jobsettings.settings(cfg, job, "tiny-neox"))) == set(job_keys), job
    assert jobsettings.settings(cfg, "spectra_table", "tiny-gpt2")["spectra"]["sr_k"] == 3
    assert jobsettings.settings(cfg, "spectra_table", "tiny-neox")["spectra"]["sr_k"] == 64  # the schema's


def _flatten(tree: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in tree.items():
        if isinstance(v, dict):  # a section (no key's value is a mapping)
            out += _flatten(v, f"{prefix}{k}.")
        else:
            out.append(f"{prefix}{k}")
    return out


def test_settings_refuse_a_missing_key():
    """No silent default: a config without a key the job reads (not validated) is an error."""
    with pytest.raises(KeyError):
        jobsettings.settings({"models": {"m": {}}, "spectra": {}}, "spectra_table", "m")


def test_scripts_read_their_settings_not_the_config():
    """A key read from snakemake.config directly bypasses the params (only snapshot_minutes, which changes
    no result, may: layergeom.workflow.snapshot_seconds)."""
    for p in sorted((ROOT / "scripts").glob("*.py")):
        assert not re.search(r"\b(sm|snakemake)\.config\b", p.read_text()), p.name


@pytest.mark.dag
def test_every_job_with_settings_is_a_rule():
    rules = {jobsettings.job_of_rule(r.name) for r in workflow_rules()}
    assert set(jobsettings.JOB_KEYS) - {"train_model"} <= rules  # the test config trains no model


# ---- the per-key dry runs over a finished run ------------------------------------------------------------
def changed_value(key: str, sub: dict, current):
    """Another valid value of `key`: from NEW_VALUES, else derived from its schema."""
    if key in NEW_VALUES:
        return NEW_VALUES[key]
    enum = sub.get("enum") or next((o["enum"] for o in sub.get("oneOf", []) if "enum" in o), None)
    types = sub.get("type") if isinstance(sub.get("type"), list) else [sub.get("type")]
    if enum and not (isinstance(current, list)):
        return next(v for v in enum if v != current)
    if "boolean" in types:
        return not current
    if "integer" in types and isinstance(current, int):
        return current - 1 if "maximum" in sub and current + 1 > sub["maximum"] else current + 1
    if "number" in types and isinstance(current, (int, float)):
        return current * 0.9 if current else 0.5
    if "array" in types and current:
        items = sub.get("items", {})
        if items.get("enum"):
            return current[:-1] if len(current) > 1 else [next(v for v in items["enum"] if v not in current)]
        return current[:-1] if len(current) > 1 else [current[0] + 1]
    raise AssertionError(f"{key}: no other value derived from {sub} and {current!r}; add it to NEW_VALUES")


def _set(cfg: dict, key: str, value) -> None:
    *parents, last = key.split(".")
    for p in parents:
        cfg = cfg.setdefault(p, {})
    cfg[last] = value


JOB_BLOCK = re.compile(r"^rule (\S+):\n(.*?)(?:\n\n|\Z)", re.S | re.M)


def scheduled(workdir: Path, config: Path, *args, models: bool = False) -> list[tuple]:
    """(rule, reasons) of every job a dry run of `config` over `workdir` schedules; with `models`, (rule,
    reasons, model) (None for a job of no one model)."""
    return scheduled_jobs(snakemake(workdir, "-n", *args, config=config).stdout, models=models)


def scheduled_jobs(out: str, models: bool = False) -> list[tuple]:
    """`scheduled` from the output of a dry run."""
    jobs = []
    for rule, body in JOB_BLOCK.findall(out):
        reason = re.search(r"^\s*reason: (.*)$", body, re.M)
        reasons = [r.split(":")[0].strip() for r in reason.group(1).split("; ")] if reason else []
        if not models:
            jobs.append((rule, reasons))
            continue
        model = re.search(r"^\s*wildcards: .*?\bmodel=([^,\s]+)", body, re.M)
        generated = re.match(r"(spectra_jacobians|topology_graph)_(.+)", rule)
        jobs.append((rule, reasons, model.group(1) if model else generated and generated.group(2)))
    return jobs


PARAMS = "Params have changed since last execution"
UPSTREAM = {"Input files updated by another job", "Updated input files"}


def check_key(key, jobs, all_jobs) -> list[str]:
    """What is wrong with the jobs a change of `key` scheduled (empty: only its readers and dependants)."""
    readers = set(jobsettings.readers(key))
    problems = []
    for rule, reasons in jobs:
        job = jobsettings.job_of_rule(rule)
        if PARAMS in reasons and job not in readers:
            problems.append(f"{rule} reruns for its params but does not read {key}")
        if set(reasons) - UPSTREAM - {PARAMS}:
            problems.append(f"{rule} reruns for {sorted(set(reasons) - UPSTREAM - {PARAMS})}")
        if not reasons:
            problems.append(f"{rule} reruns without a reason")
    # every job of a reader is scheduled: for its params, or (Snakemake then names only that reason) for an
    # input that an upstream reader remakes
    want = {r: n for r, n in all_jobs.items() if jobsettings.job_of_rule(r) in readers}
    got = {r: sum(1 for rule, _ in jobs if rule == r) for r in want}
    if got != want:
        problems.append(f"scheduled jobs of the readers of {key}: {got}, all of them: {want}")
    return problems


@pytest.fixture(scope="module")
def base_config():
    return yaml.safe_load(TEST_CONFIG_FILE.read_text())


def test_each_key_reruns_only_its_readers_and_their_dependants(reference_run, base_config, tmp_path):
    """For every key of config/README.md's run settings and analysis sections, a config with that one key
    changed makes the dry run over the finished run schedule exactly the jobs that read it (their params
    changed) and jobs downstream of them (updated input); `snapshot_minutes` schedules nothing."""
    start = time.monotonic()
    all_jobs: dict[str, int] = {}
    for rule, _ in scheduled(reference_run, TEST_CONFIG_FILE, "--forceall"):
        all_jobs[rule] = all_jobs.get(rule, 0) + 1
    validated = lgconfig.validate(copy.deepcopy(base_config))
    cases = {}
    for key, sub in settings_keys().items():
        if key in DAG_KEYS:
            continue
        current = validated
        for p in key.split("."):
            current = current[p]
        cfg = copy.deepcopy(base_config)
        _set(cfg, key, changed_value(key, sub, current))
        try:
            lgconfig.validate(copy.deepcopy(cfg))
        except LayergeomError as err:
            raise AssertionError(f"{key}: the changed value is invalid: {err}") from None
        path = tmp_path / f"{key}.yaml"
        # in the config's order: materialize's params are the model's config, a dict in the file's order
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        cases[key] = path
    outs = snakemake_many([(reference_run, path, ("-n",)) for path in cases.values()])
    results = {key: scheduled_jobs(out) for key, out in zip(cases, outs)}
    problems = {k: p for k in cases if (p := check_key(k, results[k], all_jobs))}
    assert not problems, "\n".join(f"{k}: {'; '.join(p)}" for k, p in problems.items())
    assert results["snapshot_minutes"] == []
    assert any(results[k] for k in results)  # the dry runs do schedule jobs
    print(f"{len(cases)} keys dry-run in {time.monotonic() - start:.0f} s")


def test_a_models_override_reruns_only_that_models_readers(reference_run, base_config, tmp_path):
    """A key set for one model (`models.<name>.overrides`) reruns that model's readers and their dependants:
    `spectra.sr_k` its spectra tables, Schur and convergence; `activations.boundaries` (every boundary named
    instead of `all`, the same store) its activation dump and everything after it."""
    from layergeom.names import boundaries_for

    model, part = "tiny-gpt2", "tiny_gpt2"  # generated rules name the model with underscores
    n_layers = base_config["models"][model]["hf_config"]["n_layer"]
    cases = {
        "spectra.sr_k": {"spectra": {"sr_k": 3}},
        "activations.boundaries": {"activations": {"boundaries": boundaries_for("gpt2", n_layers)}},
    }
    present = {jobsettings.job_of_rule(rule) for rule, _ in scheduled(reference_run, TEST_CONFIG_FILE, "--forceall")}
    for key, over in cases.items():
        cfg = copy.deepcopy(base_config)
        cfg["models"][model]["overrides"] = over
        path = tmp_path / f"{key}.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        jobs = scheduled(reference_run, path, models=True)
        readers = set(jobsettings.readers(key)) & present  # (the fanned-out table's jobs are not in this DAG)
        rerun = {rule for rule, reasons, _ in jobs if PARAMS in reasons}
        assert {jobsettings.job_of_rule(r) for r in rerun} == readers, (key, rerun)
        for rule, reasons, m in jobs:
            assert set(reasons) <= UPSTREAM | {PARAMS}, (key, rule, reasons)
            if PARAMS in reasons:
                assert m in (model, part), (key, rule, m)
            elif m is not None:
                assert m in (model, part), f"{key}: {rule} of {m} reruns"
