"""config/papers.yaml, the full reproduction of both papers: its DAG builds offline, fans out as the config says, and
its dry run shows each heavy job's real request (mem_mb, runtime) before any download."""

from __future__ import annotations

import copy
import json
import math
import os
import re
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT
from test_cluster import HEAVY as HEAVY_MODULES
from test_cluster import _blocker

PAPERS = ROOT / "config" / "papers.yaml"
sys.path.insert(0, str(ROOT / "src"))

from layergeom import config as lgconfig  # noqa: E402
from layergeom.modelinfo import complete_model  # noqa: E402
from layergeom.names import boundaries_for  # noqa: E402
from layergeom.resources.margins import MIN_MB, UNKNOWN_MINUTES  # noqa: E402
from layergeom.resources.schur_jobs import schur_chain_segments  # noqa: E402
from layergeom.resources.spectral_jobs import convergence_subsets  # noqa: E402
from layergeom.runtime import LayergeomError  # noqa: E402
from layergeom.spectral.settings import schur_chains  # noqa: E402

#: the papers' 8B checkpoints (Paper B at d = 4096), whose spectral and topology work must fan out
PAPERS_8B = ("llama-3.1-8b", "olmo-3-7b")
#: the per-checkpoint jobs whose mem_mb and runtime follow the model's width d (rules/common.smk, "resources of
#: the spectral tables and the topology jobs"); the gathers, trends and figures ask for constants
HEAVY = re.compile(
    r"spectra_(table|cumulative|schur|convergence)(_part|_variant|_prep|_chain|_subset)?|topology_graph_\w+|topology_coupling"
)
#: the DAG build's line for a model whose width is unknown (rules/common.smk width_fallback_notice)
NOTICE = re.compile(r"models\.(\S+): width unknown")
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "",
}


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


def dry_run_jobs(text: str) -> list[dict]:
    """The jobs a (not quiet) snakemake dry run prints: rule, model and checkpoint (from the first output's path
    results/{model}/{checkpoint}/...; None for other outputs), and the resources as strings."""
    jobs, job = [], None
    for line in text.splitlines():
        m = re.fullmatch(r"(?:local)?rule (\S+):", line)
        if m:
            job = {"rule": m.group(1), "model": None, "checkpoint": None, "resources": {}}
            jobs.append(job)
        elif job is not None and line.startswith("    "):
            key, _, value = line.strip().partition(": ")
            if key == "output":
                path = re.match(r"results/([^/]+)/([^/]+)/", value)
                job["model"], job["checkpoint"] = path.groups() if path else (None, None)
            elif key == "resources":
                job["resources"] = dict(kv.split("=", 1) for kv in value.split(", ") if "=" in kv)
        else:
            job = None
    return jobs


def dry_run(configfile, wd, *targets, quiet=False, blocked=None) -> str:
    """`snakemake -n` on a config with the network made unusable (hub, proxies and all): its printed text.
    `blocked`: a folder of stand-in packages that fail on import (test_cluster._blocker), put first on the path."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(wd),
           "--configfile", str(configfile), "-n", "--cores", "2", *(["--quiet", "rules"] if quiet else []),
           *targets]  # fmt: skip
    env = {**os.environ, **OFFLINE, **({"PYTHONPATH": str(blocked)} if blocked else {})}
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert res.returncode == 0, f"dry run failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    assert not (wd / "results").exists() and not (wd / "resources").exists(), "a dry run wrote outputs"
    return res.stdout + res.stderr


@pytest.fixture(scope="module")
def papers():
    return yaml.safe_load(PAPERS.read_text())


@pytest.fixture(scope="module")
def papers_dry_run(tmp_path_factory):
    """The papers' whole DAG, printed job by job (one dry run for the tests below: ~7,400 jobs, 2-3 minutes), built
    with torch, transformers, scipy and the other model-side packages unimportable: the papers' share of
    test_cluster's test_dag_builds_and_lints_without_torch (which lints this config but leaves its dry run here,
    the suite's costliest)."""
    wd = tmp_path_factory.mktemp("papers")
    out = dry_run(PAPERS, wd / "wd", blocked=_blocker(wd / "blocked", HEAVY_MODULES))
    assert "is blocked" not in out, out[-3000:]
    return out


@pytest.mark.dag
def test_papers_dag_builds_without_the_model_packages(papers_dry_run):
    """The fixture's dry run imported none of them (a blocked import fails the build: the check can fail)."""
    assert "Job stats:" in papers_dry_run


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
    # every model's width is declared, so that a dry run sizes its jobs before any download
    assert all(isinstance(m.get("d_model"), int) and m["d_model"] > 0 for m in models.values())
    assert (papers["spectra"].get("boundaries_per_job") or 0) > 0, "the papers' config does not fan out"


def test_d_model_contradicting_config_is_refused():
    """A declared d_model is checked against the model's config where that is readable: one line naming both."""
    hf = {"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4, "intermediate_size": 64}  # fmt: skip
    model = {"source": "config", "family": "llama", "hf_config": hf, "checkpoints": {"init": {"init": True}}}
    complete_model("m", {**copy.deepcopy(model), "d_model": 32})
    with pytest.raises(LayergeomError) as err:
        complete_model("m", {**copy.deepcopy(model), "d_model": 64})
    assert "models.m: d_model 64 contradicts" in str(err.value) and "d_model: 32" in str(err.value)
    assert "\n" not in str(err.value)


def _counts(papers: dict) -> dict:
    """What the papers' fan-out implies per model: checkpoints, boundaries, blocks, convergence subsets and Schur
    chain jobs (each chain's segments: spectra.chain_segments for the costliest, fewer for cheaper ones)."""
    cfg = lgconfig.validate(copy.deepcopy(papers))
    n = cfg["spectra"]["boundaries_per_job"]
    out = {}
    for m, mc in cfg["models"].items():
        spectra = lgconfig.model_section(cfg, m, "spectra")
        B = len(boundaries_for(mc["family"], mc["n_layers"]))
        subsets = convergence_subsets(spectra["n_groups"], B, spectra)
        plan = schur_chains(spectra["alphas"], spectra["schur_orders"], order_alphas=spectra["schur_order_alphas"])
        chains = sum(len(schur_chain_segments(B, spectra, c)) for c in plan)
        out[m] = {"ck": len(mc["checkpoints"]), "B": B, "blocks": math.ceil(B / n), "subsets": subsets,
                  "chains": chains, "plan": len(plan)}  # fmt: skip
    return out


@pytest.mark.dag
def test_papers_dag_fans_out_offline(papers, papers_dry_run):
    """Per-checkpoint, per-layer and per-block job counts equal what the config implies."""
    stats = job_stats(papers_dry_run)
    models, counts = papers["models"], _counts(papers)
    n_ck = {m: c["ck"] for m, c in counts.items()}
    per_checkpoint = sum(n_ck.values())
    per_layer = sum(n_ck[m] * c["n_layers"] for m, c in models.items())
    assert stats["materialize"] == stats["activations"] == stats["manifest"] == per_checkpoint
    assert stats["windows"] == len(models)
    # each hub revision is downloaded once, on the submitting host (`download` is a local rule)
    assert stats["download"] == sum(
        1 for m in models.values() for c in m["checkpoints"].values() if not (c or {}).get("init")
    )
    assert stats["tokenwise_fit"] == per_layer
    for rule in ("tokenwise_kl", "tokenwise_summary", "topology_coupling", "spectra_table_gather",
                 "spectra_schur_gather", "spectra_cumulative_gather", "spectra_convergence_gather"):  # fmt: skip
        assert stats[rule] == per_checkpoint, rule
    # every model fans out: no single-job tables
    assert not {"spectra_table", "spectra_schur", "spectra_cumulative", "spectra_convergence"} & set(stats)
    blocks = sum(n_ck[m] * c["blocks"] for m, c in counts.items())
    assert stats["spectra_table_part"] == stats["spectra_schur_prep"] == blocks
    assert stats["spectra_cumulative_variant"] == 2 * per_checkpoint  # update, full
    assert stats["spectra_convergence_subset"] == sum(n_ck[m] * c["subsets"] for m, c in counts.items())
    # each checkpoint's chains, each as its segment jobs: more jobs than chains where the config splits them
    assert stats["spectra_schur_chain"] == sum(n_ck[m] * c["chains"] for m, c in counts.items())
    if papers["spectra"]["chain_segments"] > 1:
        assert all(c["chains"] > c["plan"] for c in counts.values())
    for m, c in counts.items():
        rule = re.sub(r"[^A-Za-z0-9_]", "_", m)
        assert stats[f"spectra_jacobians_{rule}"] == n_ck[m], m  # one rule per model, every boundary's file
        for k in range(c["blocks"]):  # a graph rule per block of boundaries
            assert stats[f"topology_graph_{rule}_block{k}"] == n_ck[m], (m, k)
        assert f"topology_graph_{rule}_block{c['blocks']}" not in stats
    assert stats["total"] == sum(v for k, v in stats.items() if k != "total")
    print(f"papers.yaml: {stats['total']} jobs ({per_checkpoint} model checkpoints)")


@pytest.mark.dag
def test_papers_8b_requests_are_real(papers, papers_dry_run):
    """Each 8B checkpoint plans at least 16 spectral/topology jobs, and none of them asks for the fallback request
    of a width not known yet (mem_mb=MIN_MB with runtime=UNKNOWN_MINUTES): the dry run sizes them from d_model."""
    assert not NOTICE.findall(papers_dry_run), "a model of the papers' config has no known width"
    heavy = [j for j in dry_run_jobs(papers_dry_run) if HEAVY.fullmatch(j["rule"]) and j["model"] in PAPERS_8B]
    for m in PAPERS_8B:
        for c in papers["models"][m]["checkpoints"]:
            jobs = [j for j in heavy if (j["model"], j["checkpoint"]) == (m, c)]
            assert len(jobs) >= 16, f"{m}/{c}: {len(jobs)} spectral/topology jobs, fewer than 16"
            for j in jobs:
                r = j["resources"]
                assert "mem_mb" in r and "runtime" in r, (m, c, j["rule"], r)
                fallback = (int(r["mem_mb"]), int(r["runtime"])) == (MIN_MB, UNKNOWN_MINUTES)
                assert not fallback, f"{m}/{c} {j['rule']}: the fallback request {r}"


@pytest.mark.dag
def test_width_unknown_is_named_and_d_model_sizes_the_jobs(tmp_path):
    """A hub model whose config.json is not at hand: the DAG build names it and its heavy jobs ask for the fallback;
    with d_model set, no notice and real requests (a one-model, two-boundary dry run)."""
    model = {"source": "hub", "id": "layergeom-test/not-cached", "family": "gpt_neox", "n_layers": 2,
             "checkpoints": {"init": {"init": True}, "trained": {"revision": "main"}}}  # fmt: skip
    targets = ["results/m/trained/spectra.tsv", "results/m/trained/coupling.tsv"]
    requests = {}
    for d_model in (None, 2048):
        cfg = {
            "corpus": {"source": "python-docs"},
            "models": {"m": {**model, **({"d_model": d_model} if d_model else {})}},
        }
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
        text = dry_run(tmp_path / "c.yaml", tmp_path / f"wd{d_model}", *targets)
        assert NOTICE.findall(text) == ([] if d_model else ["m"]), text[-2000:]
        if not d_model:
            assert "models.m.d_model" in text
        jobs = [j for j in dry_run_jobs(text) if HEAVY.fullmatch(j["rule"])]
        assert {j["rule"] for j in jobs} >= {"spectra_table", "topology_coupling", "topology_graph_m"}
        requests[d_model] = {j["rule"]: (int(j["resources"]["mem_mb"]), int(j["resources"]["runtime"])) for j in jobs}
    assert set(requests[None].values()) == {(MIN_MB, UNKNOWN_MINUTES)}
    assert (MIN_MB, UNKNOWN_MINUTES) not in requests[2048].values()


def test_papers_shape_report_flags_a_job_over_its_request(tmp_path):
    """bench/papers_shape.py: a job's request comes from the run's log (matched by its benchmark path), its peak is
    the larger of the sampled max_rss and the monitor's VmHWM, and a job over its runtime or mem_mb is flagged."""
    from conftest import load_script

    ps = load_script(ROOT / "bench" / "papers_shape.py")
    bench = tmp_path / "benchmarks"
    head = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    rows = {"spectra_table_part/m/init/0": (100.0, 900.0), "spectra_table_part/m/init/1": (700.0, 500.0),
            "topology_graph_m_block0/init/0": (50.0, 400.0), "windows/m": (5.0, 100.0)}  # fmt: skip
    for name, (s, rss) in rows.items():
        (bench / name).parent.mkdir(parents=True, exist_ok=True)
        (bench / f"{name}.tsv").write_text(head + f"{s}\t0:00:00\t{rss}\t0\t0\t0\t0\t0\t0\t{s}\n")
    log = tmp_path / ".snakemake" / "log"
    log.mkdir(parents=True)
    jobs = [(f"rule {n.split('/')[0]}:", f"benchmarks/{n}.tsv") for n in rows if not n.startswith("windows")]
    (log / "x.snakemake.log").write_text("".join(
        f"{r}\n    benchmark: {b}\n    resources: tmpdir=/tmp, runtime=10, mem_mb=1000, mem_mib=954\n\n"
        for r, b in jobs))  # fmt: skip
    end = (bench / "topology_graph_m_block0/init/0.tsv").stat().st_mtime
    os.utime(bench / "spectra_table_part/m/init/1.tsv", (end - 3000, end - 3000))  # ran before part 0
    peaks = [  # a graph process over the request by its own arrays, part 0's by the files it maps
        {"pid": 1, "script": "topology_graph", "start": end - 40, "hwm_mib": 2000.0, "anon_mib": 1500.0},
        {"pid": 2, "script": "spectra_table_part", "start": end - 90, "hwm_mib": 1200.0, "anon_mib": 800.0},
    ]
    (tmp_path / "peaks.jsonl").write_text("".join(json.dumps(p) + "\n" for p in peaks))
    out = tmp_path / "report.md"
    assert ps.report(tmp_path, out) == 1
    text = out.read_text()
    assert "**3 exceed it**" in text and "4 jobs" in text and "3 jobs carry a request" in text
    over = {ln.split("|")[1].strip(" `"): ln.split("|")[-2].strip(" *") for ln in text.splitlines() if "| `" in ln}
    assert over == {"spectra_table_part/m/init/0": "mem_mb (mapped files)", "spectra_table_part/m/init/1": "runtime",
                    "topology_graph_m_block0/init/0": "mem_mb", "windows/m": ""}  # fmt: skip


# ---- the model jobs' requests (activations, Jacobians, tokenwise fits and KL: layergeom.resources) -------------
#: the per-checkpoint (and per-layer) jobs that load the model or its states, sized from its shapes
MODEL_JOBS = re.compile(r"activations|spectra_jacobians_\w+|tokenwise_fit|tokenwise_kl")


def _model_job_requests(papers: dict, model: str) -> dict[str, int]:
    """What layergeom.resources asks (mem_mb) for each model job of an 8B checkpoint, computed here from the config
    alone (d_model, n_layers, the corpus and the sections: no config.json before the download)."""
    from layergeom.resources import files, model_jobs

    cfg = lgconfig.validate(copy.deepcopy(papers))
    mc = cfg["models"][model]
    sec = {s: lgconfig.model_section(cfg, model, s) for s in ("activations", "tokenwise", "spectra")}
    dims = model_jobs.model_dims(None, mc["d_model"], mc["n_layers"])
    n, T = cfg["corpus"]["n_windows"], cfg["corpus"]["window_tokens"]
    b, sb = files.DTYPE_BYTES[mc["dtype"]], files.DTYPE_BYTES[sec["activations"]["dtype"]]
    wb = dims["params"] * b
    names = boundaries_for(mc["family"], mc["n_layers"])
    act = dict(n_windows=n, window_tokens=T, batch_size=sec["activations"]["batch_size"], n_names=len(names) + 1,
               model_bytes=b, store_bytes=sb, weight_bytes=wb)  # fmt: skip
    tw = sec["tokenwise"]
    fit = dict(n_tokens=n * T, n_pool=n * (T - 1), n_anchors=tw["n_anchors"], k=tw["k"], classes=tw["classes"],
               store_bytes=sb)  # fmt: skip
    kl = dict(n_windows=n, window_tokens=T, n_anchors=tw["n_anchors"], n_classes=len(tw["classes"]),
              batch_rows=tw["kl_batch_rows"], model_bytes=b, weight_bytes=wb)  # fmt: skip
    ns, wins = model_jobs.jacobian_sample_count(n, T, sec["spectra"])
    kinds = [b_.split(".")[1] for b_ in names]
    jac = dict(n_samples=ns, n_tokens=n * T, window_tokens=T, n_groups=min(sec["spectra"]["n_groups"], wins),
               spectra=sec["spectra"], store_bytes=sb, model_bytes=b)  # fmt: skip
    return {
        "activations": model_jobs.activations_mem_mb(dims, **act),
        "tokenwise_fit": model_jobs.tokenwise_fit_mem_mb(dims["d"], **fit),
        "tokenwise_kl": model_jobs.tokenwise_kl_mem_mb(dims, **kl),
        "spectra_jacobians": model_jobs.jacobians_mem_mb(dims, kinds, weight_bytes=wb, **jac),
    }


@pytest.mark.dag
def test_papers_8b_model_job_requests_are_real(papers, papers_dry_run):
    """Each 8B checkpoint's activation dump, Jacobian job, and where planned every layer's fits and the KL ask for the memory
    layergeom.resources counts from the config (d_model, n_layers, the corpus and the sections), not a flat default
    or the fallback; the dump and the Jacobians of d = 4096 ask for more than the 4 GB they had. (Their runtimes
    are the cluster profile's: not modelled yet.)"""
    jobs = [j for j in dry_run_jobs(papers_dry_run) if MODEL_JOBS.fullmatch(j["rule"]) and j["model"] in PAPERS_8B]
    for m in PAPERS_8B:
        want = _model_job_requests(papers, m)
        for c in papers["models"][m]["checkpoints"]:
            mine = [j for j in jobs if (j["model"], j["checkpoint"]) == (m, c)]
            rules = ["spectra_jacobians" if j["rule"].startswith("spectra_jacobians_") else j["rule"] for j in mine]
            assert {"activations", "spectra_jacobians"} <= set(rules) <= set(want), (m, c, rules)
            for rule, j in zip(rules, mine):
                got = int(j["resources"]["mem_mb"])
                assert got == want[rule], f"{m}/{c} {j['rule']}: {j['resources']}, expected mem_mb {want[rule]}"
                assert got != MIN_MB, f"{m}/{c} {j['rule']}: the fallback request"
        assert want["activations"] > 4000 and want["spectra_jacobians"] > 4000, want
