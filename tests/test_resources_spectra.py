"""mem_mb and runtime of the spectral table and topology jobs (layergeom.resources, rules/spectra.smk and
rules/topology.smk): the memory model against the state the code really holds, and config/papers.yaml's dry run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import yaml
from conftest import ROOT, load_script

sys.path.insert(0, str(ROOT / "src"))

from schema_defaults import SEED, SPECTRA, tol  # noqa: E402

from layergeom import config as lgconfig  # noqa: E402
from layergeom.resources import files, margins, rates, schur_jobs, spectral_jobs, topology_jobs  # noqa: E402

PAPERS = ROOT / "config" / "papers.yaml"


class Capture:
    """A stand-in for ``resume.snapshots.Snapshots``: no snapshot to resume from; every save records the state it is given."""

    def __init__(self):
        self.states = []

    def load(self):
        return None

    def save(self, done, state, force=False):
        self.states.append(state())
        return True


def array_bytes(tree) -> int:
    """Bytes of every numpy array in a state tree (dicts, lists, tuples)."""
    if isinstance(tree, np.ndarray):
        return tree.nbytes
    if isinstance(tree, dict):
        return sum(array_bytes(v) for v in tree.values())
    if isinstance(tree, list | tuple):
        return sum(array_bytes(v) for v in tree)
    return 0


def checkpoint(d: int, n: int, G: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    counts = np.full(G, 10)
    mats, devs = {}, {}
    for i in range(n):
        J = rng.standard_normal((d, d)) / np.sqrt(d)
        mats[f"L{i}.mlp"] = J
        devs[f"L{i}.mlp"] = (0.01 * rng.standard_normal((G, d, d))).astype(np.float32)
    return mats, devs, counts


def schur_final_state(full: dict, d: int = 10) -> dict:
    """The last snapshot state of ``schur_surgery`` on a two-boundary checkpoint of width d with settings `full`."""
    from schema_defaults import schur_surgery

    K = int(full["schur_ci_blocks"])
    mats, devs, _ = checkpoint(d, 2, max(K, 1))
    snap = Capture()
    schur_surgery(
        mats, alphas=full["alphas"], orders=full["schur_orders"], deviations=devs if K else None,
        weights=np.full(K, 1 / K) if K else None, ci_controls=full["schur_ci_controls"],
        order_alphas=full["schur_order_alphas"], snapshots=snap, seed=SEED, sr_k=SPECTRA["sr_k"], tol=tol(d),
        boundary_metrics=SPECTRA["schur_boundary_metrics"], ci_level=SPECTRA["ci_level"],
    )  # fmt: skip
    return snap.states[-1]


SCHUR_SETTINGS = [
    {},
    {"alphas": [0, 0.5, 1], "schur_orders": 2, "schur_ci_blocks": 3, "schur_ci_controls": ["none", "random"]},
    {"alphas": [0, 0.5, 0.75, 1], "schur_orders": 2, "schur_order_alphas": [0.75, 0, 0.5]},  # three order α
    {"alphas": [0.25, 1], "schur_orders": 0, "schur_ci_blocks": 0},
]


@pytest.mark.parametrize("settings", SCHUR_SETTINGS)
def test_schur_state_model_counts_what_schur_surgery_holds(settings):
    """The products and tangents ``schur_surgery`` carries from boundary to boundary (its snapshot state) are
    exactly the d² terms of ``schur_chains`` in ``spectra_bytes``."""
    full = SPECTRA | settings
    d = 10
    state = schur_final_state(full, d)
    held = array_bytes({k: state[k] for k in ("chains", "orders")})
    ch = schur_jobs.schur_settings_chains(full)
    model = 16 * ch["complex"] + 8 * ch["complex_tangents"] + 16 * ch["orders"]
    assert held == model * d * d
    assert spectral_jobs.spectra_bytes("spectra_schur", d, 16, full) > held  # the state is part of the peak


@pytest.mark.parametrize("settings", SCHUR_SETTINGS)
def test_each_schur_chain_jobs_state_is_its_share_of_the_single_jobs(settings):
    """A fanned-out chain job carries its own products only: the state ``schur_chain_steps`` counts for each
    chain of ``schur_chains`` is exactly what ``schur_surgery`` holds for it, the chains together hold the
    single job's state, and a chain job asks for less memory than the single job."""
    from layergeom.spectral.settings import SCHUR_VARIANTS, schur_chains, schur_order_alphas

    full = SPECTRA | settings
    d = 10
    state = schur_final_state(full, d)
    spread = schur_order_alphas(full["alphas"], full["schur_order_alphas"])
    total = 0
    for chain in schur_chains(full["alphas"], full["schur_orders"], order_alphas=full["schur_order_alphas"]):
        if chain[0] == "run":
            held = array_bytes(state["chains"][chain[1:]])
        else:  # one order: both variants at every α of the spread
            held = array_bytes([state["orders"][v, a, chain[1]] for v in SCHUR_VARIANTS for a in spread])
        assert held == schur_jobs.schur_chain_steps(full, chain)["state"] * d * d, chain
        assert schur_jobs.schur_chain_bytes(d, 16, full, chain) > held
        assert schur_jobs.schur_chain_bytes(4096, 16, full, chain) < spectral_jobs.spectra_bytes(
            "spectra_schur", 4096, 16, full
        )
        total += held
    assert total == array_bytes({k: state[k] for k in ("chains", "orders")}) > 0


def test_schur_prep_and_chain_runtimes_share_the_single_jobs():
    """At d = 4096 and 64 boundaries: a prep of 8 boundaries asks for at most an eighth of the single job's runtime
    (its share of a boundary), every chain job for less than the single job, and the chain steps are the single
    job's products, each once."""
    from layergeom.spectral.settings import schur_chains

    d, nb, G = 4096, 64, 16
    single = spectral_jobs.spectra_runtime_min("spectra_schur", d, nb, G, SPECTRA)
    assert spectral_jobs.spectra_runtime_min("spectra_schur_prep", d, 8, G, SPECTRA) <= -(-single // 8) + 1
    plan = schur_chains(SPECTRA["alphas"], SPECTRA["schur_orders"], order_alphas=SPECTRA["schur_order_alphas"])
    chains = [schur_jobs.schur_chain_runtime_min(d, nb, SPECTRA, c) for c in plan]
    assert max(chains) < single
    steps = sum(schur_jobs.schur_chain_steps(SPECTRA, c)["steps"] for c in plan)
    ch = schur_jobs.schur_settings_chains(SPECTRA)
    assert steps == ch["complex"] + ch["orders"]  # every product of the single job, once


def _long_jobs():
    """bench/bench_long_jobs.py's d = 4096 measurements and the settings it ran with (config/papers.yaml's)."""
    long = json.loads((ROOT / "bench" / "results" / "long_jobs.json").read_text())
    c = long["config"]
    keys = ("alphas", "schur_orders", "schur_order_alphas", "schur_ci_blocks", "schur_ci_controls", "convergence_sizes")
    chains = long["results"].get("spectra_schur_chains", {}).get(str(long["d"]), {})
    if any(k not in c for k in keys) or "step_s" not in chains or "order_s" not in chains:
        # measured before the Schur chains' cost classes (the fanned-out chain jobs of settings.schur_chains):
        # nothing to check them against until bench/bench_long_jobs.py runs again at d = 4096
        pytest.skip("bench/results/long_jobs.json predates the Schur chain classes: rerun bench/bench_long_jobs.py")
    return long, int(long["d"]), SPECTRA | {k: c[k] for k in keys}


def test_runtimes_at_d4096_cover_the_measured_jobs():
    """A job that asks for less time than it takes is killed at its limit: at d = 4096 every spectral job's runtime
    (64 boundaries, or a block of 4) is at least bench_long_jobs' measured time for it on this machine
    (bench/results/long_jobs.json): table, cumulative (one job, and each variant's), the Schur prep and each
    chain's cost class (whole, and as spectra.chain_segments 2, 3 and 4 split it: each segment's advance-only
    prefix and own steps), every convergence subset size, the single Schur and convergence jobs and the topology
    graph job."""
    from layergeom.spectral.settings import schur_chains

    long, d, s = _long_jobs()
    res, G, nb = long["results"], int(long["config"]["n_groups"]), 64
    minutes = {"spectra_table": res["spectra_table"][str(d)]["boundary_s"],
               "spectra_cumulative": res["spectra_cumulative"][str(d)]["boundary_s"],
               "spectra_schur": res["spectra_schur_chains"][str(d)]["boundary_s"]}  # fmt: skip
    for stage, sec in minutes.items():
        assert spectral_jobs.spectra_runtime_min(stage, d, nb, G, s) * 60 >= nb * sec, stage
    cum = res["spectra_cumulative"][str(d)]
    for v, sec in cum["variant_s"].items():
        assert spectral_jobs.cumulative_variant_runtime_min(d, nb, v) * 60 >= nb * sec, v
        assert spectral_jobs.cumulative_variant_runtime_min(d, nb) >= spectral_jobs.cumulative_variant_runtime_min(
            d, nb, v
        )
    sch = res["spectra_schur_chains"][str(d)]
    assert spectral_jobs.spectra_runtime_min("spectra_schur_prep", d, 4, G, s) * 60 >= 4 * sch["prep_s"]
    classes = set()
    for chain in schur_chains(s["alphas"], s["schur_orders"], order_alphas=s["schur_order_alphas"]):
        cls, base = schur_jobs.schur_chain_class(s, chain), schur_jobs.schur_chain_base(s, chain)
        classes.add(cls)
        assert schur_jobs.schur_chain_runtime_min(d, nb, s, chain) * 60 >= nb * sch["step_s"][cls], chain
        for S in (2, 3, 4):  # spectra.chain_segments: each segment's prefix (advance-only steps) and own steps
            seg_s = s | {"chain_segments": S}
            segments = schur_jobs.schur_chain_segments(nb, seg_s, chain)
            assert 1 <= len(segments) <= S and segments[0][0] == 0 and segments[-1][1] == nb
            for start, end in segments:
                took = start * sch["advance_s"][base] + (end - start) * sch["step_s"][cls]
                assert schur_jobs.schur_chain_runtime_min(d, nb, seg_s, chain, (start, end)) * 60 >= took, (
                    chain,
                    start,
                )
    assert classes == set(sch["step_s"]) and {c.split("_")[0] for c in classes} == set(sch["advance_s"])
    conv = res["spectra_convergence"][str(d)]
    n_edge = spectral_jobs.convergence_counts(G, nb, s)[1]
    total = 0.0
    for S in conv["sizes"]:
        plain, edge = conv["plain_s"][str(S)], conv["edge_s"][str(S)]
        took = (nb - n_edge) * plain + n_edge * edge + conv["final_extra_s"]
        assert spectral_jobs.convergence_size_seconds(d, S, nb, n_edge) >= took, S
        total += took
    assert spectral_jobs.spectra_runtime_min("spectra_convergence", d, nb, G, s) * 60 >= total
    topo = res["topology_graph"][str(d)]
    assert topology_jobs.topology_graph_runtime_min(d, topo["tokens"], nb) * 60 >= nb * topo["boundary_s"]


def test_schur_step_rates_are_the_benchs_classes():
    """RATES["schur_steps"] are bench_long_jobs' d = 4096 seconds per d³ (resources_rates.anchor_rates, rounded up
    to 3 digits): each run class's step and its base's advance-only step, an order's parts (J₀^π, each variant's
    step per α); a chain's modelled step (``schur_chain_seconds`` per boundary) is its class's measured step, an
    order's J₀^π plus both variants at each of its α."""
    from layergeom.spectral.settings import schur_chains

    long, d, s = _long_jobs()
    sch, rate = long["results"]["spectra_schur_chains"][str(d)], rates.RATES["schur_steps"]
    assert (rate["d"], rate["K"]) == (d, sch["K"])
    o = sch["order_s"]
    measured = {c: v for c, v in sch["step_s"].items() if c != "order"} | {"prep": sch["prep_s"]}
    measured |= {"order_basis": o["basis"], "order_update": o["update"], "order_full": o["full"]}
    measured |= {f"advance_{b}": v for b, v in sch["advance_s"].items() if b != "order"}
    for key, sec in measured.items():
        assert sec / d**3 <= rate[key] <= sec / d**3 * 1.01, key
    n = len(sch["order_alphas"])
    for chain in schur_chains(s["alphas"], s["schur_orders"], order_alphas=s["schur_order_alphas"]):
        got = schur_jobs.schur_chain_seconds(d, 1, s, chain)
        assert got == pytest.approx(sch["step_s"][schur_jobs.schur_chain_class(s, chain)], rel=0.01), chain
        if chain[0] == "order":
            assert got == pytest.approx(o["basis"] + n * (o["update"] + o["full"]), rel=0.01)


def test_chain_segments_follow_each_chains_cost(monkeypatch):
    """spectra.chain_segments S splits the costliest chains into S jobs and a cheaper one into
    ceil(S · its step / the costliest's) (at least 1; a share of exactly 1/2 at S = 2 is one job), whatever d: on
    made-up rates (orders 1, tangents 0.5, plain 0.2 per d³) S = 4 gives 4, 2, 1 segments and S = 2 gives 2, 1,
    1; the prefix fraction is the advance-only rate over the step's."""
    from layergeom.spectral.settings import schur_chains

    fake = dict(rates.RATES["schur_steps"], order_basis=0.2, order_update=0.4, order_full=0.4, tangents_update=0.5,
                tangents_full=0.5, plain_update=0.2, plain_full=0.2, advance_order=0.5,
                advance_tangents=0.25, advance_plain=0.1, K=4)  # fmt: skip
    monkeypatch.setitem(rates.RATES, "schur_steps", fake)
    s = SPECTRA | {"schur_ci_blocks": 4, "schur_ci_controls": ["none"], "schur_order_alphas": None}
    plan = schur_chains(s["alphas"], s["schur_orders"], order_alphas=s["schur_order_alphas"])
    want = {
        4: {"order": 4, "tangents": 2, "plain": 1},
        2: {"order": 2, "tangents": 1, "plain": 1},
    }
    for S, counts in want.items():
        seg_s = s | {"chain_segments": S}
        assert {schur_jobs.schur_chain_base(seg_s, c) for c in plan} == set(counts)
        for chain in plan:
            n = counts[schur_jobs.schur_chain_base(seg_s, chain)]
            assert schur_jobs.schur_segment_count(seg_s, chain) == n, (S, chain)
            segs = schur_jobs.schur_chain_segments(64, seg_s, chain)
            assert len(segs) == n and segs[0][0] == 0 and segs[-1][1] == 64
            assert all(a[1] == b[0] for a, b in zip(segs, segs[1:]))
        assert schur_jobs.schur_prefix_fraction(seg_s, ("order", 0)) == 0.5  # 0.5 / (0.2 + 0.8)
        assert schur_jobs.schur_prefix_fraction(seg_s, ("run", "full", 0.5, "none")) == 0.5
    assert schur_jobs.schur_segment_count(s | {"chain_segments": 1}, ("order", 0)) == 1


def test_cumulative_state_model_counts_what_cumulative_rows_holds():
    from layergeom.spectral.cumulative import cumulative_rows

    d, G = 9, 5
    mats, devs, _ = checkpoint(d, 3, G)
    snap = Capture()
    cumulative_rows(
        ((n, J, devs[n]) for n, J in mats.items()),
        weights=np.full(G, 1 / G),
        ci_level=SPECTRA["ci_level"],
        snapshots=snap,
    )
    held = array_bytes(snap.states[-1]["chains"])
    assert held == 2 * (8 + 4 * G) * d * d  # the term 2·(8 + 4K) of spectra_bytes("spectra_cumulative")


def test_schur_state_at_d4096():
    """At d = 4096 with the schema's defaults the Schur state alone is 768·d² bytes (12.9 GB): two variants' 8
    complex products (the own N at α < 1, the random control at α > 0; α = 1 with the own N is cumulative.tsv's),
    the own N's tangents, and 8 orders' products at α = 0 (schur_order_alphas null); the job asks for more than
    it, and every stage's request grows with d."""
    ch = schur_jobs.schur_settings_chains(SPECTRA)
    state = 16 * ch["complex"] + 8 * ch["complex_tangents"] + 16 * ch["orders"]
    assert state == 2 * 8 * 16 + 2 * 4 * 4 * 8 + 2 * 8 * 1 * 16  # counted by hand from schur_surgery
    assert spectral_jobs.spectra_mem_mb("spectra_schur", 4096, 16, SPECTRA, 64) > state * 4096**2 / 1e6 > 9600
    for stage in ("spectra_table", "spectra_cumulative", "spectra_schur", "spectra_convergence"):
        small, large = (spectral_jobs.spectra_mem_mb(stage, d, 16, SPECTRA, 64) for d in (576, 4096))
        assert margins.MIN_MB <= small < large
        assert spectral_jobs.spectra_runtime_min(stage, 576, 64, 16, SPECTRA) < spectral_jobs.spectra_runtime_min(
            stage, 4096, 64, 16, SPECTRA
        )
        # fewer boundaries per job (a later spectra.boundaries_per_job): less time, the same memory per boundary
        assert spectral_jobs.spectra_runtime_min(stage, 4096, 16, 16, SPECTRA) < spectral_jobs.spectra_runtime_min(
            stage, 4096, 64, 16, SPECTRA
        )
    assert spectral_jobs.spectra_mem_mb("spectra_schur", None, 16, SPECTRA) == margins.MIN_MB


def test_npy_shape_reads_the_header(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((3, 5), dtype=np.float32))
    assert files.npy_shape(tmp_path / "a.npy") == (3, 5)
    assert files.npy_shape(tmp_path / "missing.npy") is None


def test_rates_cite_the_bench():
    """RATES are the bench's measured rates (bench/resources_rates.py -> bench/results/resources_rates.json)."""
    measured = json.loads((ROOT / "bench" / "results" / "resources_rates.json").read_text())["rates"]
    assert {k: tuple(v) if isinstance(v, list) else v for k, v in measured.items()} == rates.RATES


# ---- config/papers.yaml's dry run ----------------------------------------------------------------------
SPECTRA_TOPOLOGY = re.compile(r"^(spectra_|topology_|coupling_)")


def dry_run_jobs(text: str) -> list[tuple[str, dict, dict]]:
    """(rule, wildcards, resources) of every job a non-quiet `snakemake -n` lists."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \S+:\n)", text):
        m = re.match(r"(?:local)?rule (\S+):\n", block)
        if not m:
            continue
        res = re.search(r"^\s+resources: (.*)$", block, flags=re.M)
        wc = re.search(r"^\s+wildcards: (.*)$", block, flags=re.M)
        pairs = lambda s: dict(kv.split("=", 1) for kv in s.split(", ")) if s else {}  # noqa: E731
        jobs.append((m.group(1), pairs(wc.group(1) if wc else ""), pairs(res.group(1) if res else "")))
    return jobs


LLAMA_CONFIG = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "vocab_size": 128256}


def papers_dry_run(wd, *args, configs=(("llama-3.1-8b", LLAMA_CONFIG),)) -> list[tuple[str, dict, dict]]:
    """`snakemake -n` on the papers' config offline in `wd`, with each (model, config.json) of `configs` where
    the download rule puts it (its width known at DAG time, as once downloaded); `dry_run_jobs` of its output.
    The config is the papers' without its fan-out (one job per table: the single jobs' requests) and without the
    models' d_model keys (a width is known only where a config.json is at hand; tests/test_papers_config.py
    reads the papers' own dry run)."""
    papers = yaml.safe_load(PAPERS.read_text())
    papers["spectra"]["boundaries_per_job"] = None
    for m in papers["models"].values():
        m.pop("d_model", None)
    (wd / "papers.yaml").write_text(yaml.safe_dump(papers))
    for model, cfg in configs:
        ref = wd / "resources" / "hub" / model / "trained"
        ref.mkdir(parents=True)
        (ref / "config.json").write_text(json.dumps(cfg))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}  # fmt: skip
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(wd),
           "--configfile", str(wd / "papers.yaml"), "-n", *args]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert res.returncode == 0, f"dry run failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return dry_run_jobs(res.stdout + res.stderr)


@pytest.fixture(scope="module")
def papers_jobs(tmp_path_factory):
    """`snakemake -n` on the papers' config offline, with Llama-3.1-8B's config.json where the download rule
    puts it (d = 4096: its width known at DAG time, as once downloaded)."""
    return papers_dry_run(tmp_path_factory.mktemp("papers"), "--cores", "2")


@pytest.mark.dag
def test_every_spectra_and_topology_job_declares_memory_and_runtime(papers_jobs):
    jobs = [(r, w, res) for r, w, res in papers_jobs if SPECTRA_TOPOLOGY.match(r)]
    rules = {r for r, _, _ in jobs}
    assert {"spectra_table", "spectra_cumulative", "spectra_schur", "spectra_convergence", "spectra_trends",
            "topology_coupling", "coupling_significant_layers"} <= rules  # fmt: skip
    assert any(r.startswith("topology_graph_llama") for r in rules)
    assert any(r.startswith("spectra_figure") for r in rules)
    for rule, wc, res in jobs:
        assert int(res.get("mem_mb", 0)) > 0, (rule, wc, res)
        if not rule.startswith("spectra_jacobians_"):  # the Jacobian job: mem_mb only (a GPU job, not sized here)
            assert int(res.get("runtime", 0)) > 0, (rule, wc, res)


@pytest.mark.dag
def test_d4096_schur_job_asks_for_more_than_its_state(papers_jobs):
    schur = [res for r, w, res in papers_jobs if r == "spectra_schur" and w.get("model") == "llama-3.1-8b"]
    assert schur
    ch = schur_jobs.schur_settings_chains(SPECTRA)
    state_mb = (16 * ch["complex"] + 8 * ch["complex_tangents"] + 16 * ch["orders"]) * 4096**2 / 1e6
    for res in schur:
        assert int(res["mem_mb"]) > state_mb > 9600
        assert int(res["runtime"]) > 60  # hours of products at d = 4096
    # a model whose width the dry run cannot read (not cached, not downloaded): the floor
    olmo = [res for r, w, res in papers_jobs if r == "spectra_schur" and w.get("model") == "olmo-3-7b"]
    assert olmo and all(
        int(res["mem_mb"]) == margins.MIN_MB and int(res["runtime"]) == margins.UNKNOWN_MINUTES for res in olmo
    )


# the spectral table rules (the model a wildcard) among Paper B's analysis jobs, which compute on a GPU for a wide
# model (config gpu_min_width, rules/common.smk analysis_gpus); the graph rules are per model
ANALYSIS = re.compile(r"^(spectra_table|spectra_table_part|spectra_cumulative|spectra_schur|spectra_convergence)$")


@pytest.mark.dag
def test_wide_models_analysis_jobs_ask_for_a_gpu_on_a_cluster(tmp_path):
    """As a cluster run (`--jobs`, as the SLURM profile sets): Llama-3.1-8B's (d = 4096 ≥ gpu_min_width) table,
    cumulative, Schur, convergence and graph jobs ask for one GPU, DistilGPT2's (d = 768) none; a model whose width
    is not known yet (OLMo-3-7B, not downloaded) waits for its inputs (<TBD>: evaluated once they exist)."""
    distil = {"model_type": "gpt2", "n_layer": 6, "n_embd": 768, "vocab_size": 50257}
    jobs = papers_dry_run(tmp_path, "--jobs", "100", configs=(("llama-3.1-8b", LLAMA_CONFIG), ("distilgpt2", distil)))
    graph = {f"topology_graph_{lgconfig.rule_name_part(m)}": m for m in ("llama-3.1-8b", "distilgpt2", "olmo-3-7b")}
    gpu = {}  # (model, rule) -> the gpu values of its jobs
    for rule, wc, res in jobs:
        model = wc.get("model") if ANALYSIS.match(rule) else graph.get(rule)
        if model:
            gpu.setdefault((model, "topology_graph" if rule in graph else rule), set()).add(res.get("gpu"))
    stages = {"spectra_table", "spectra_cumulative", "spectra_schur", "spectra_convergence", "topology_graph"}
    for model, want in (("llama-3.1-8b", "1"), ("distilgpt2", "0"), ("olmo-3-7b", "<TBD>")):
        assert {r for m, r in gpu if m == model} == stages, (model, gpu)
        assert all(gpu[model, r] == {want} for r in stages), (model, {r: gpu[model, r] for r in stages})
    # the model jobs ask for their GPU whatever the width
    assert all(res.get("gpu") == "1" for rule, _, res in jobs if rule.startswith("spectra_jacobians_distilgpt2"))


def test_convergence_sizes_are_numpys_geometric_sizes():
    """settings.convergence_sizes (pure Python: the workflow sizes the jobs with it) equals numpy's
    round(geomspace(2, G, n)) (linspace where rounding merges two) for every G up to 4096, and caps given sizes."""
    from layergeom.spectral.settings import convergence_sizes

    def numpy_sizes(G):
        n = min(4, G - 1)
        out = sorted({int(round(v)) for v in np.geomspace(2, G, n)}) if n > 0 else []
        if len(out) < n:
            out = sorted({int(round(v)) for v in np.linspace(2, G, n)})
        return out

    assert all(convergence_sizes(G, None) == numpy_sizes(G) for G in range(0, 4097))
    assert convergence_sizes(16, None) == [2, 4, 8, 16]
    assert convergence_sizes(8, [1, 4, 32, 4]) == [4, 8]


def test_the_schedule_starts_the_preps_then_the_longest_chains_first():
    """bench/long_jobs_plan.py's list schedule of a fanned-out checkpoint (the workflow's priorities) on hand-worked cases:
    chain jobs 3, 1, 1, 1 on 2 slots end at 3 longest first (3 on one slot, the 1s on the other) and at 4
    shortest first (the 3 starts at t = 1 after two 1s); with a prep of 5 and a job of 7 beside it, the chains
    wait for the prep: the 3 runs 5–8, the 1s 7–8, 8–9 and 8–9; a job of priority 0 still waiting when the prep
    ends waits for the chains (a 1 after them: 9–10); a prep waits for a slot, and the chains for it."""
    bench = load_script(ROOT / "bench" / "long_jobs_plan.py")
    assert bench.schedule_s([], [], [1, 3, 1, 1], 2) == (3, 3)
    assert bench.schedule_s([], [], [1, 3, 1, 1], 2, longest_first=False) == (4, 4)
    assert bench.schedule_s([5.0], [7.0], [1, 3, 1, 1], 2) == (9, 9)
    assert bench.schedule_s([5.0], [7.0, 1.0], [1, 3, 1, 1], 2) == (10, 9)
    assert bench.schedule_s([2.0, 2.0, 2.0], [], [1.0], 2) == (5, 5)
    # the smallest block whose first wave fits: 64 boundaries, 6 jobs through depth, 64 slots: n = 4 (16 blocks)
    assert bench.first_wave_n(64, 6, 64) == 4 and bench.first_wave_n(64, 6, 200) == 1
