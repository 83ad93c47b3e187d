"""The workflow itself: the whole DAG on the tiny test config, in a scratch working directory."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, TEST_CONFIG

SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]
MANIFEST_KEYS = {"model", "checkpoint", "source", "revision", "weights_sha256", "n_layers", "d_model",
                 "boundaries", "corpus", "n_windows", "window_tokens", "seed"}  # fmt: skip


def snakemake(workdir, *args, config=ROOT / "config" / "test.yaml", check=True):
    cmd = [*SNAKEMAKE, "-d", str(workdir), "--configfile", str(config), "--cores", "2", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if check and res.returncode != 0:
        raise AssertionError(f"snakemake failed:\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}")
    return res


@pytest.fixture(scope="session")
def test_run(tmp_path_factory):
    """One full run of the test config (every stage), shared by the tests below."""
    wd = tmp_path_factory.mktemp("wd")
    snakemake(wd, "-q")
    return wd


def test_full_dag_outputs(test_run):
    for name, m in TEST_CONFIG["models"].items():
        for ck in m["checkpoints"]:
            man = json.loads((test_run / "results" / name / ck / "manifest.json").read_text())
            assert MANIFEST_KEYS <= set(man)
            assert man["window_tokens"] == TEST_CONFIG["corpus"]["window_tokens"]
            assert man["boundaries"][0] in ("L0.attn", "L0.block")
        rows = list(csv.DictReader(open(test_run / "results" / name / "checkpoints.tsv"), delimiter="\t"))
        assert [r["checkpoint"] for r in rows] == list(m["checkpoints"])
    # every rule left a log and a benchmark
    assert list((test_run / "logs").rglob("*.log")) and list((test_run / "benchmarks").rglob("*.tsv"))


def test_nothing_left_to_do(test_run):
    res = snakemake(test_run, "-n")
    assert "Nothing to be done" in res.stdout + res.stderr


def test_config_typo_stops_before_any_job(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "config" / "test.yaml").read_text().replace("window_tokens:", "window_tokns:"))
    res = snakemake(tmp_path / "wd", "-n", config=bad, check=False)
    assert res.returncode != 0
    assert "corpus" in res.stderr and "window_tokns" in res.stderr
    assert not (tmp_path / "wd" / "results").exists()


def test_default_config_dry_run(tmp_path):
    """The default DAG (embedded SmolLM2, trained + init) builds without touching the network."""
    res = subprocess.run([*SNAKEMAKE, "-d", str(tmp_path), "-n", "--cores", "2"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "materialize" in res.stdout


def test_corpus_too_short_fails_cleanly(tmp_path):
    cfg = (ROOT / "config" / "test.yaml").read_text().replace("n_windows: 24", "n_windows: 100000")
    (tmp_path / "c.yaml").write_text(cfg)
    wd = tmp_path / "wd"
    res = snakemake(wd, "results/tiny-llama/windows.npz", config=tmp_path / "c.yaml", check=False)
    assert res.returncode != 0
    log = (wd / "logs" / "windows" / "tiny-llama.log").read_text()
    assert "enough for only" in log
    assert not (wd / "results" / "tiny-llama" / "windows.npz").exists()
