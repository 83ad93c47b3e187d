"""Whole-workflow runs of the test config, shared by the test modules that need one (a pytest plugin).

A module that needs the run says ``pytest_plugins = ["lg_runs"]`` and asks for the ``reference_run`` fixture:
the whole DAG of config/test.yaml, run once per session in a scratch working directory (~140 jobs, each
~4 s of Python start-up: minutes on 2 cores, so every test that can reads this one run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from conftest import ROOT, require_dag_marker

TEST_CONFIG_FILE = ROOT / "config" / "test.yaml"
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]


def snakemake_cmd(workdir: Path, *args, config: Path = TEST_CONFIG_FILE) -> list[str]:
    """The command line of a run in `workdir` (the workflow's profiles/default applies, as for users)."""
    return [*SNAKEMAKE, "-d", str(workdir), "--configfile", str(config), "--cores", "2", *map(str, args)]


def snakemake(workdir: Path, *args, config: Path = TEST_CONFIG_FILE, check: bool = True, timeout: float = 3600):
    res = subprocess.run(
        snakemake_cmd(workdir, *args, config=config), capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )
    if check and res.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(map(str, args))} failed:\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
        )
    return res


def snakemake_many(runs: list[tuple[Path, Path, tuple]], jobs: int = 2, timeout: float = 1800) -> list[str]:
    """The stdout of `snakemake -d WORKDIR --configfile CONFIG ARGS...` for each
    (WORKDIR, CONFIG, ARGS) of `runs`, `jobs` at a time, each forked from one Python that imported Snakemake
    once (tests/snakemake_forks.py): for many dry runs. A failed command fails the test."""
    import json
    import tempfile

    require_dag_marker("runs Snakemake")
    commands = [snakemake_cmd(wd, *args, config=cfg)[len(SNAKEMAKE) - 2 :] for wd, cfg, args in runs]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, str(ROOT / "tests" / "snakemake_forks.py"), str(jobs), tmp],
            input=json.dumps([list(map(str, c)) for c in commands]), text=True, cwd=ROOT, check=True,
            timeout=timeout,
        )  # fmt: skip
        outs = []
        for i, c in enumerate(commands):
            out, rc = Path(tmp, f"{i}.out").read_text(), int(Path(tmp, f"{i}.rc").read_text())
            if rc != 0:
                err = Path(tmp, f"{i}.err").read_text()
                raise AssertionError(f"snakemake {' '.join(map(str, c))} failed:\n{out[-3000:]}\n{err[-6000:]}")
            outs.append(out)
    return outs


@dataclass(frozen=True)
class RuleInfo:
    name: str
    snakefile: Path  # the rule file that defines it (rules/<stage>.smk)
    env: Path | None  # its conda env file
    script: Path | None
    local: bool


def workflow_rules(config: Path = TEST_CONFIG_FILE) -> tuple[RuleInfo, ...]:
    """Every rule of the workflow as Snakemake parses it for `config` (paths resolved to absolute; parsed
    once per session)."""
    require_dag_marker("parses the workflow with Snakemake")
    return _workflow_rules(config)


@cache
def _workflow_rules(config: Path) -> tuple[RuleInfo, ...]:
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings

    with SnakemakeApi(OutputSettings(quiet=True)) as api:
        wf = api.workflow(
            resource_settings=ResourceSettings(),
            config_settings=ConfigSettings(configfiles=[config]),
            storage_settings=StorageSettings(),
            snakefile=ROOT / "Snakefile",
        )._workflow  # the parsed workflow: the public API lists no rules
        out = []
        for r in wf.rules:
            base = Path(r.snakefile).parent
            out.append(
                RuleInfo(
                    r.name,
                    Path(r.snakefile).resolve(),
                    (base / r.conda_env).resolve() if r.conda_env else None,
                    (base / r.script).resolve() if r.script else None,
                    wf.is_local(r),
                )
            )
    assert out, "the workflow has no rules"
    return tuple(out)


def result_tables(workdir: Path) -> dict[str, Path]:
    """Every table under results/ (TSV and JSON), by path relative to the working directory; hidden paths
    (temporaries of an interrupted atomic write) are not results."""
    out = {}
    for p in sorted((workdir / "results").rglob("*")):
        rel = p.relative_to(workdir)
        if p.is_file() and p.suffix in (".tsv", ".json") and not any(part.startswith(".") for part in rel.parts):
            out[rel.as_posix()] = p
    return out


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory) -> Path:
    """One uninterrupted run of the whole test config; tests read it and must not change it (the report
    test adds results/report.html). LAYERGEOM_TEST_RUN=<dir> reuses a finished run of config/test.yaml
    (brought up to date first) instead, when working on these tests."""
    reuse = os.environ.get("LAYERGEOM_TEST_RUN")
    wd = Path(reuse) if reuse else tmp_path_factory.mktemp("reference_run")
    snakemake(wd, "-q")
    return wd
