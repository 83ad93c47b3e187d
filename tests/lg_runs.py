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
from conftest import ROOT

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


@dataclass(frozen=True)
class RuleInfo:
    name: str
    snakefile: Path  # the rule file that defines it (rules/<stage>.smk)
    env: Path | None  # its conda env file
    script: Path | None
    local: bool


@cache
def workflow_rules(config: Path = TEST_CONFIG_FILE) -> tuple[RuleInfo, ...]:
    """Every rule of the workflow as Snakemake parses it for `config` (paths resolved to absolute)."""
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
