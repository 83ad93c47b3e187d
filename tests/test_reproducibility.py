"""Reproducibility at the workflow level, on the test config: a second whole run, killed once and resumed,
redoes no finished job and gives bit-identical tables; reruns are limited to the model whose settings changed.

Costs: one more whole run of the test config (killed and resumed), and a few dry
runs on the shared reference run (lg_runs.reference_run). Seeds and threads come from one place,
`layergeom.runtime.set_determinism` with the config's `seed` and `threads`.
"""

from __future__ import annotations

import base64
import copy
import csv
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

pytest.register_assert_rewrite("lg_runs")
from lg_runs import TEST_CONFIG_FILE, result_tables, snakemake, snakemake_cmd, workflow_rules  # noqa: E402

pytest_plugins = ["lg_runs"]
sys.path.insert(0, str(ROOT / "src"))
from layergeom import config as lgconfig  # noqa: E402

# columns / JSON keys that hold wall-clock measurements (none of the tables has one today)
TIMING_FIELDS = {"seconds", "elapsed_s", "wall_s", "time_s"}


# ---- comparing two runs -----------------------------------------------------------------------------
def _rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))
    return (rows[0], rows[1:]) if rows else ([], [])


def _num(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _tsv_diff(a: Path, b: Path) -> str | None:
    ha, ra = _rows(a)
    hb, rb = _rows(b)
    if ha != hb:
        return f"columns differ: {ha} vs {hb}"
    if len(ra) != len(rb):
        return f"{len(ra)} vs {len(rb)} rows"
    out = []
    for j, col in enumerate(ha):
        if col in TIMING_FIELDS:
            continue
        diff = [(i, x[j], y[j]) for i, (x, y) in enumerate(zip(ra, rb)) if x[j] != y[j]]
        if not diff:
            continue
        nums = [(_num(x), _num(y)) for _, x, y in diff]
        gap = max(
            (abs(x - y) for x, y in nums if x is not None and y is not None and not math.isnan(x - y)), default=None
        )
        i, x, y = diff[0]
        key = "/".join(ra[i][:2])
        out.append(f"column {col}: {len(diff)}/{len(ra)} rows differ (max |diff| {gap}; row {i} [{key}]: {x} vs {y})")
    return "; ".join(out) or None


def _json_diff(a, b, where="") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}/{k}: only in one run" for k in sorted(set(a) ^ set(b))]
        for k in sorted(set(a) & set(b)):
            if k not in TIMING_FIELDS:
                out += _json_diff(a[k], b[k], f"{where}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _json_diff(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {json.dumps(a)[:80]} vs {json.dumps(b)[:80]}"]


def table_differences(run_a: Path, run_b: Path, only: set[str] | None = None) -> list[str]:
    """Every table of run_a that is missing from run_b or differs from it, with which columns/keys and how."""
    ta, tb = result_tables(run_a), result_tables(run_b)
    names = set(ta) if only is None else set(only)
    problems = [f"{n}: missing from {run_b}" for n in sorted(names - set(tb))]
    if only is None:
        problems += [f"{n}: only in {run_b}" for n in sorted(set(tb) - set(ta))]
    for n in sorted(names & set(tb)):
        if ta[n].read_bytes() == tb[n].read_bytes():
            continue
        if n.endswith(".tsv"):
            why = _tsv_diff(ta[n], tb[n])
        else:
            why = "; ".join(_json_diff(json.loads(ta[n].read_text()), json.loads(tb[n].read_text()))[:5]) or None
        if why:
            problems.append(f"{n}: {why}")
    return problems


# ---- rerun only what changed ------------------------------------------------------------------------
# a job's block; the jobs of a group job (the grouped tokenwise fits) are listed indented under it
JOB = re.compile(r"^( *)(?:local)?rule (\S+):\n((?:\1    \S.*(?:\n|$))+)", flags=re.M)


@dataclass
class Job:
    rule: str
    fields: dict[str, str] = field(default_factory=dict)

    def paths(self, key: str) -> list[str]:
        return [p.strip() for p in self.fields.get(key, "").split(",") if p.strip()]


def dry_run_jobs(workdir: Path, config: Path) -> list[Job]:
    """The jobs a dry run schedules (the rule `all` aside), parsed from snakemake's job listing."""
    res = snakemake(workdir, "-n", config=config)
    text = res.stdout + res.stderr
    jobs = []
    for m in JOB.finditer(text):
        pairs = (re.match(r"\s+([\w ]+?): (.*)", line) for line in m.group(3).splitlines())
        fields = dict(p.groups() for p in pairs if p)
        if m.group(2) != "all":
            jobs.append(Job(m.group(2), fields))
    if not jobs:
        assert "Nothing to be done" in text, text[-3000:]
    return jobs


def subject(job: Job, models: dict[str, list[str]]) -> tuple[str | None, str | None]:
    """(model, checkpoint) a job is about, from its log path (logs/<rule>/<model>/<checkpoint>...), else its
    outputs (results/figures/<what>_<model>_<checkpoint>_...); None where it spans several."""
    for p in job.paths("log"):
        parts = [q.removesuffix(".log") for q in Path(p).parts]
        for i, part in enumerate(parts[1:], start=1):
            if part in models:
                ck = parts[i + 1] if i + 1 < len(parts) and parts[i + 1] in models[part] else None
                return part, ck
    for p in job.paths("output"):
        for m in models:
            if re.search(rf"(^|[/_]){re.escape(m)}([/_.]|$)", p):
                ck = next((c for c in models[m] if re.search(rf"{re.escape(m)}[/_]{re.escape(c)}([/_.]|$)", p)), None)
                return m, ck
    return None, None


def _models(cfg: dict) -> dict[str, list[str]]:
    return {m: list(c["checkpoints"]) for m, c in cfg["models"].items()}


def _mentions(paths: list[str], model: str, checkpoint: str | None = None) -> bool:
    pat = re.escape(model) + (rf"[/_]{re.escape(checkpoint)}" if checkpoint else "")
    return any(re.search(rf"(^|[/_]){pat}([/_.]|$)", p) for p in paths)


def _test_config() -> dict:
    return yaml.safe_load(TEST_CONFIG_FILE.read_text())


@pytest.mark.parametrize(
    ("model", "section", "key"),
    [("tiny-gpt2", "tokenwise", "k"), ("tiny-llama", "spectra", "sr_k"), ("tiny-mamba", "topology", "top_k")],
)
def test_changed_model_setting_reruns_only_that_model(reference_run, tmp_path, model, section, key):
    cfg = _test_config()
    current = lgconfig.model_section(lgconfig.validate(copy.deepcopy(cfg)), model, section)[key]
    new = max(2, current // 2) if current > 2 else current + 1
    cfg["models"][model].setdefault("overrides", {}).setdefault(section, {})[key] = new
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg, sort_keys=False))

    jobs = dry_run_jobs(reference_run, changed)
    models = _models(cfg)
    assert jobs, f"changing models.{model}.overrides.{section}.{key} ({current} -> {new}) reruns nothing"
    wrong = []
    for j in jobs:
        m, _ = subject(j, models)
        if m is None and not _mentions(j.paths("input"), model):
            wrong.append(f"{j.rule} ({j.fields.get('output', '')[:80]}): reason {j.fields.get('reason')}")
        elif m is not None and m != model:
            wrong.append(f"{j.rule} for {m}: reason {j.fields.get('reason')}")
    assert not wrong, f"models.{model}.overrides.{section}.{key} changed, yet other jobs are scheduled:\n" + "\n".join(
        wrong
    )
    by_params = {j.rule for j in jobs if "Params have changed" in j.fields.get("reason", "")}
    assert by_params, "no job was scheduled because its params changed (rerun-triggers params?)"
    # only the section's own stage reads it: a job of another stage (sources, ...) whose params changed
    # passes more of the model's config than it needs, and drags everything downstream along
    stage = {r.name: r.snakefile.stem for r in workflow_rules()}
    foreign = sorted(r for r in by_params if stage.get(r) != section)
    assert not foreign, (
        f"models.{model}.overrides.{section}.{key} changed the params of rules outside rules/{section}.smk: "
        f"{foreign} (pass section(model, ...) or the few keys a job needs, not the whole model config)"
    )
    # every job of that model whose params include the section is rescheduled: all its checkpoints
    for rule in by_params:
        cks = {subject(j, models)[1] for j in jobs if j.rule == rule}
        if None not in cks:
            assert cks == set(models[model]), f"{rule}: only checkpoints {cks} rescheduled"


def test_added_checkpoint_runs_only_its_jobs(reference_run, tmp_path):
    cfg = _test_config()
    model, new = "tiny-gpt2", "init-c"
    assert new not in cfg["models"][model]["checkpoints"]
    cfg["models"][model]["checkpoints"][new] = {"init": True, "seed": 7}
    added = tmp_path / "added.yaml"
    added.write_text(yaml.safe_dump(cfg, sort_keys=False))

    jobs = dry_run_jobs(reference_run, added)
    models = _models(cfg)
    # the per-model files the rerun rewrites (the model's jobs' outputs that read the new checkpoint)
    per_model = {p for j in jobs if subject(j, models) == (model, None) and _mentions(j.paths("input"), model, new)
                 for p in j.paths("output")}  # fmt: skip
    wrong, new_logs = [], set()
    for j in jobs:
        m, ck = subject(j, models)
        if m is None:  # across models: must read something of the new checkpoint, or a per-model file it changes
            ok = _mentions(j.paths("input"), model, new) or bool(per_model & set(j.paths("input")))
        elif m != model:
            ok = False
        elif ck is not None:
            ok = ck == new
        else:  # per model (checkpoint table, per-model figures): must read the new checkpoint
            ok = _mentions(j.paths("input"), model, new)
        if not ok:
            wrong.append(f"{j.rule} ({m}/{ck}): {j.fields.get('output', '')[:80]}; reason {j.fields.get('reason')}")
        if m == model and ck == new:
            new_logs |= {re.sub(rf"/{re.escape(new)}(/|\.log$)", r"/init\1", p) for p in j.paths("log")}
    assert not wrong, f"adding {model}/{new} schedules jobs it should not:\n" + "\n".join(wrong)
    # the new checkpoint gets every job that the existing checkpoint `init` of that model had (their logs)
    ref_logs = {
        p.relative_to(reference_run).as_posix()
        for p in (reference_run / "logs").rglob("*.log")
        if re.search(rf"/{re.escape(model)}/init(/|\.log$)", p.relative_to(reference_run).as_posix())
    }
    assert new_logs == ref_logs, (
        f"{model}/{new} gets jobs {sorted(new_logs - ref_logs)} that {model}/init has not, "
        f"and lacks {sorted(ref_logs - new_logs)}"
    )


# ---- resume after a kill ----------------------------------------------------------------------------
# The second whole run of the test config is killed and resumed: every job in it runs from scratch once (the
# one being written at the kill twice), so comparing it with the reference run checks determinism and resume
# together, for the price of one run.
KILL_AFTER_JOBS = 5  # finished jobs before the kill; the kill waits for a job in flight too


def _marked(workdir: Path, kind: str) -> set[str]:
    """The paths of .snakemake/<kind>/<base64 of the path>."""
    d = workdir / ".snakemake" / kind
    names = [f.name for f in d.iterdir() if f.is_file()] if d.is_dir() else []
    return {base64.urlsafe_b64decode(n + "=" * (-len(n) % 4)).decode() for n in names}


def _incomplete(workdir: Path) -> set[str]:
    """Outputs Snakemake has marked as being written."""
    return _marked(workdir, "incomplete")


def _finished(workdir: Path) -> set[str]:
    """Outputs of finished jobs (Snakemake keeps their metadata; a job's undeclared side files have none)."""
    return _marked(workdir, "metadata") - _incomplete(workdir)


def _files(workdir: Path) -> dict[str, int]:
    out = {}
    for top in ("results", "resources"):
        for p in (workdir / top).rglob("*"):
            rel = p.relative_to(workdir).as_posix()
            if p.is_file() and not any(part.startswith(".") for part in Path(rel).parts):
                out[rel] = p.stat().st_mtime_ns
    return out


@dataclass
class Resumed:
    workdir: Path
    done_at_kill: int
    incomplete_at_kill: set[str]
    files_at_kill: dict[str, int]  # the finished jobs' outputs (an interrupted job's side files may be rewritten)
    rerun_log: str


# temp() outputs (rules/tokenwise.smk) -> the output of the same job that is kept
TEMP_OUTPUTS = {".patches.npz": ".tsv"}


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory) -> Resumed:
    """A run killed with SIGKILL (process group: snakemake and its jobs, as on a lost node) once some jobs
    have finished and one is being written, then unlocked and rerun with --rerun-incomplete."""
    wd = tmp_path_factory.mktemp("resumed_run")
    log = open(wd.parent / f"{wd.name}.first.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(snakemake_cmd(wd), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 1800
    try:
        while True:
            done = len(list((wd / "benchmarks").rglob("*.tsv")))
            writing = _incomplete(wd)
            if done >= KILL_AFTER_JOBS and writing:
                os.killpg(proc.pid, signal.SIGKILL)
                break
            if proc.poll() is not None:
                pytest.fail(f"the run ended (exit {proc.returncode}) before it could be killed; see {log.name}")
            if time.time() > deadline:
                pytest.fail("no job finished in 30 minutes")
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
    time.sleep(1)  # let the killed jobs' processes go
    incomplete, finished = _incomplete(wd), _finished(wd)
    dirs = tuple(f.rstrip("/") + "/" for f in finished)
    files = {f: t for f, t in _files(wd).items() if f in finished or f.startswith(dirs)}  # the finished outputs
    snakemake(wd, "--unlock")
    res = snakemake(wd, "--rerun-incomplete", "-q")
    return Resumed(wd, done, incomplete, files, res.stdout + res.stderr)


@pytest.mark.dag
def test_killed_run_resumes_without_redoing_finished_jobs(resumed_run):
    r = resumed_run
    assert r.incomplete_at_kill, "the kill interrupted no job"
    now = _files(r.workdir)  # (temp() outputs finished before the kill are gone now: consumed, then removed)
    redone = [f for f, t in r.files_at_kill.items() if f in now and now[f] != t and f not in r.incomplete_at_kill]
    redone = [f for f in redone if not any(f.startswith(i.rstrip("/") + "/") for i in r.incomplete_at_kill)]
    assert not redone, f"outputs finished before the kill were recomputed: {redone}"
    for out in r.incomplete_at_kill:
        for suffix, kept in TEMP_OUTPUTS.items():  # consumed and removed again: the job's kept output shows it ran
            out = out[: -len(suffix)] + kept if out.endswith(suffix) else out
        assert (r.workdir / out).exists(), f"{out} (being written at the kill) is missing after the rerun"
    assert "Nothing to be done" in snakemake(r.workdir, "-n").stdout
    assert not _incomplete(r.workdir)


def test_a_second_run_killed_and_resumed_gives_bit_identical_tables(reference_run, resumed_run):
    """Two runs of config/test.yaml, the second killed once and resumed, give the same bytes in every table
    (the manifests compared key by key)."""
    tables = result_tables(reference_run)
    assert len(tables) > 20, f"too few tables to compare: {sorted(tables)}"
    problems = table_differences(reference_run, resumed_run.workdir)
    assert not problems, "the second run (killed and resumed) differs from the first:\n" + "\n".join(problems)
