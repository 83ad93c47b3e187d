"""A failing job's own log says why: every job's failure ends in its log file (logs/<rule>/...), the traceback
and then the one-line reason last, whether it fails in its body, on a bad input, while importing (a broken
environment) or by exiting; Snakemake's console still shows it. Progress written to stderr and log lines do not
overwrite each other in that file."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

SCRIPTS = sorted((ROOT / "scripts").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_script_imports_layergeom_before_any_other_package(script):
    """The first `layergeom` import sets up the job's failure log (runtime.log_script_failures): a package
    imported before it (torch, transformers) could fail where the log does not see it."""
    tree = ast.parse(script.read_text())
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    first = next(
        (n.module if isinstance(n, ast.ImportFrom) else n.names[0].name)
        for n in imports
        if (n.module if isinstance(n, ast.ImportFrom) else n.names[0].name).split(".")[0] not in sys.stdlib_module_names
    )
    assert first.split(".")[0] == "layergeom", f"{script.name} imports {first} before layergeom"
    assert "with job(" in script.read_text(), f"{script.name} does not run its body in workflow.job"


SNAKEFILE = """
rule all:
    input: expand("out/{name}.txt", name=["ok", "body", "bad_input", "import", "exits", "before_job"])

rule one:
    output: "out/{name}.txt"
    log: "logs/one/{name}.log"
    script: "job.py"
"""

JOB = """
import sys

from layergeom.workflow import job  # the first layergeom import: from here on a failure is in the log

sm = snakemake  # noqa: F821
name = sm.wildcards.name
if name == "import":
    import a_module_this_environment_lacks  # noqa: F401
if name == "before_job":
    {}["a key the params lack"]
with job(sm):
    import logging

    log = logging.getLogger("layergeom")
    log.info("started %s", name)
    sys.stderr.write("progress: 50% of the boundaries\\n")
    log.info("halfway")
    if name == "body":
        blocks = range(2.0)  # a float where the code wants an int (spectra.boundaries_per_job: 2.0, once)
    if name == "bad_input":
        from layergeom.runtime import LayergeomError

        raise LayergeomError("spectra.alphas: 'x' is not a number")
    if name == "exits":
        sys.exit("the corpus is empty")
    open(sm.output[0], "w").write("done\\n")
"""


@pytest.mark.dag
def test_each_failure_ends_in_its_jobs_own_log_with_the_reason_last(tmp_path):
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", "--keep-going", "-d", str(tmp_path)]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode != 0
    logs = {p.stem: p.read_text() for p in (tmp_path / "logs" / "one").glob("*.log")}
    last = {k: v.rstrip("\n").splitlines()[-1] for k, v in logs.items()}

    assert (tmp_path / "out" / "ok.txt").exists() and "failed" not in logs["ok"]
    for name in ("ok", "body", "bad_input", "exits"):  # log lines and stderr both kept, in order
        text = logs[name]
        assert text.index("started") < text.index("progress: 50%") < text.index("halfway"), text

    assert last["body"] == "layergeom: rule one failed: TypeError: 'float' object cannot be interpreted as an integer"
    assert "Traceback (most recent call last)" in logs["body"] and "blocks = range(2.0)" in logs["body"]
    assert last["bad_input"].endswith("ERROR spectra.alphas: 'x' is not a number")
    assert "Traceback" not in logs["bad_input"]  # a user's error is its line alone
    assert (
        last["import"]
        == "layergeom: rule one failed: ModuleNotFoundError: No module named 'a_module_this_environment_lacks'"
    )
    assert last["before_job"] == "layergeom: rule one failed: KeyError: 'a key the params lack'"
    assert last["exits"] == "layergeom: exited: the corpus is empty"
    for name in ("body", "import", "before_job"):  # written once, and still on the console
        assert logs[name].count(last[name]) == 1
    assert "a_module_this_environment_lacks" in res.stderr + res.stdout
    assert not any((tmp_path / "out" / f"{n}.txt").exists() for n in ("body", "bad_input", "import", "exits"))


def test_a_job_outside_snakemake_sets_up_nothing():
    """Importing layergeom in a test, a notebook or the workflow's DAG installs no hook."""
    code = "import sys, layergeom; from layergeom import runtime; print(getattr(sys.excepthook, '_layergeom', False))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
