"""config/papers.yaml, the full reproduction of both papers: its DAG builds offline and fans out as the config says."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT

PAPERS = ROOT / "config" / "papers.yaml"
sys.path.insert(0, str(ROOT / "src"))


def job_stats(text: str) -> dict[str, int]:
    """The first `Job stats:` table of a snakemake dry run: rule -> count."""
    block = text.split("Job stats:", 1)[1]
    counts = {}
    for line in block.splitlines()[3:]:
        m = re.fullmatch(r"(\S+)\s+(\d+)", line.strip())
        if not m:
            break
        counts[m.group(1)] = int(m.group(2))
    return counts


@pytest.fixture(scope="module")
def papers():
    return yaml.safe_load(PAPERS.read_text())


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """`snakemake -n` on the papers' config with the network made unusable: hub, proxies and all."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "",
    }
    wd = tmp_path_factory.mktemp("papers")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(wd),
           "--configfile", str(PAPERS), "-n", "--cores", "2", "--quiet", "rules"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert res.returncode == 0, f"dry run failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    assert not (wd / "results").exists() and not (wd / "resources").exists(), "a dry run wrote outputs"
    return job_stats(res.stdout + res.stderr)


def test_papers_models_and_checkpoints(papers):
    models = papers["models"]
    paper_a = {"pythia-160m", "pythia-1.4b", "mamba-370m", "distilgpt2"}
    assert paper_a | {"llama-3.1-8b", "olmo-3-7b", "gemma-4-e4b"} <= set(models)
    assert models["gemma-4-e4b"]["id"] == "google/gemma-4-E4B" and models["gemma-4-e4b"]["family"] == "gemma4"
    assert papers["corpus"]["source"] == "wikitext-2-raw-v1" and papers["device"] == "auto"
    for name, m in models.items():
        assert m["source"] == "hub" and m["id"] and m["n_layers"] > 0, name
        cks = m["checkpoints"]
        assert any((c or {}).get("init") for c in cks.values()), f"{name}: no init (null model) checkpoint"
        assert all((c or {}).get("revision") or (c or {}).get("init") for c in cks.values()), name
    pythia = [int(c[4:]) for c in models["pythia-1.4b"]["checkpoints"] if c.startswith("step")]
    assert pythia == sorted(pythia) and pythia[0] == 0 and pythia[-1] == 143000
    olmo = models["olmo-3-7b"]["checkpoints"]
    assert all(c["revision"].startswith("stage1-step") for k, c in olmo.items() if k != "init")
    assert "stage1-step0" in olmo and len(olmo) == 4  # init and the three checkpoints of Paper B, step 0 included


@pytest.mark.dag
def test_papers_dag_fans_out_offline(papers, dry_run):
    """Per-checkpoint and per-layer job counts equal what the config implies."""
    models = papers["models"]
    n_ck = {m: len(c["checkpoints"]) for m, c in models.items()}
    per_checkpoint = sum(n_ck.values())
    per_layer = sum(n_ck[m] * c["n_layers"] for m, c in models.items())
    assert dry_run["materialize"] == dry_run["activations"] == dry_run["manifest"] == per_checkpoint
    assert dry_run["windows"] == len(models)
    # each hub revision is downloaded once, on the submitting host (`download` is a local rule)
    assert dry_run["download"] == sum(
        1 for m in models.values() for c in m["checkpoints"].values() if not (c or {}).get("init")
    )
    assert dry_run["tokenwise_fit"] == per_layer
    for rule in ("tokenwise_kl", "tokenwise_summary", "spectra_table", "topology_coupling"):
        assert dry_run[rule] == per_checkpoint, rule
    for stage in ("spectra_jacobians", "topology_graph"):  # one rule per model, with every boundary's file
        for m in models:
            assert dry_run[f"{stage}_{re.sub(r'[^A-Za-z0-9_]', '_', m)}"] == n_ck[m], (stage, m)
    assert dry_run["total"] == sum(v for k, v in dry_run.items() if k != "total")
    print(f"papers.yaml: {dry_run['total']} jobs ({per_checkpoint} model checkpoints)")
