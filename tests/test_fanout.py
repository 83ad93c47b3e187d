"""The spectra table fanned out over blocks of boundaries (spectra.boundaries_per_job): a part job per block
and a gather write the same bytes as the one job per checkpoint (layergeom.spectral.jobs.table; the Schur
surgery's jobs: .jobs.schur), a killed part resumes from its snapshot, and the DAG has the parts and the
gather only where the key asks for them."""

from __future__ import annotations

import json
import re
import signal

import forked
import numpy as np
import pytest
import yaml
from conftest import ROOT
from lg_runs import TEST_CONFIG_FILE, snakemake
from test_resume import KILL_AT_SNAPSHOT
from test_spectral import SCHUR_KW, SPECTRA_KW, nonnormal, write_boundary_files

from layergeom.resume import snapshots, work_folder
from layergeom.runtime import LayergeomError

KW = SPECTRA_KW | {"sr_k": 2}  # the defaults, as scripts/spectra_table*.py pass them; k capped for d = 6
NAMES = [f"L{i}.{k}" for i in range(4) for k in ("attn", "mlp")][:7]  # 7 boundaries: blocks of 3 leave one


def _mats(names=NAMES):
    return {b: nonnormal(6, seed=10 + i) / 3 for i, b in enumerate(names)}


def _files(folder, names):
    from layergeom.spectral.jobs.common import BoundaryFiles

    return BoundaryFiles(names, *([folder / f"{n}.{e}" for n in names] for e in ("npy", "groups.npy", "json")))


def _fanned(folder, out, n, **kw):
    """spectra.tsv and eigenvalues.tsv through the parts of n boundaries and the gather (as the rules do)."""
    from layergeom.spectral.jobs.table import gather_spectra, write_spectra_part

    blocks = [NAMES[i : i + n] for i in range(0, len(NAMES), n)]
    parts = [out.parent / "parts" / f"{k}.npz" for k in range(len(blocks))]
    for block, part in zip(blocks, parts):
        write_spectra_part(_files(folder, block), part, **KW | kw)
    gather_spectra(parts, NAMES, out / "spectra.tsv", out / "eigenvalues.tsv")
    return parts


def _single(folder, out, **kw):
    from layergeom.spectral.jobs.table import write_spectra

    write_spectra(_files(folder, NAMES), out / "spectra.tsv", out / "eigenvalues.tsv", **KW | kw)


def _bytes(out) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.tsv"))}


@pytest.fixture
def jac(tmp_path):
    folder = tmp_path / "jac"
    folder.mkdir()
    write_boundary_files(folder, _mats())
    return folder


# ---- (a) parts + gather == one job, byte for byte ---------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3, 7])
@pytest.mark.parametrize("ci_method", ["linear", "exact"])
def test_parts_and_gather_write_the_single_jobs_bytes(jac, tmp_path, n, ci_method):
    _single(jac, tmp_path / "one", ci_method=ci_method)
    _fanned(jac, tmp_path / "fan", n, ci_method=ci_method)
    one, fan = _bytes(tmp_path / "one"), _bytes(tmp_path / "fan")
    assert set(one) == {"spectra.tsv", "eigenvalues.tsv"}
    assert fan == one
    assert one["spectra.tsv"].count(b"\n") == len(NAMES) + 1  # a row per boundary: the comparison has content


def test_one_group_writes_nan_intervals_in_both_routes(tmp_path):
    """One sample group: no replicates (nan intervals, as in one job) in every part."""
    folder = tmp_path / "jac"
    folder.mkdir()
    write_boundary_files(folder, _mats(), counts=np.array([9]))
    _single(folder, tmp_path / "one")
    _fanned(folder, tmp_path / "fan", 3)
    assert _bytes(tmp_path / "fan") == _bytes(tmp_path / "one")
    assert b"\tnan" in _bytes(tmp_path / "one")["spectra.tsv"]


def test_parts_with_other_group_counts_are_refused_by_the_gather(tmp_path):
    """Each part checks the counts of its own boundaries; the gather checks that the parts agree (one job
    checks every boundary: both routes refuse the same Jacobian files)."""
    folder = tmp_path / "jac"
    folder.mkdir()
    mats = _mats()
    write_boundary_files(folder, dict(list(mats.items())[:3]), counts=np.full(8, 5))
    write_boundary_files(folder, dict(list(mats.items())[3:]), counts=np.array([4, 6] * 4))
    with pytest.raises(LayergeomError, match="group_counts"):
        _single(folder, tmp_path / "one")
    with pytest.raises(LayergeomError, match="group_counts .* differ from"):
        _fanned(folder, tmp_path / "fan", 3)
    assert not (tmp_path / "fan" / "spectra.tsv").exists()


def test_the_gather_refuses_parts_out_of_order_or_missing(jac, tmp_path):
    from layergeom.spectral.jobs.table import gather_spectra

    parts = _fanned(jac, tmp_path / "fan", 3)
    out = tmp_path / "bad"
    with pytest.raises(LayergeomError, match="in order"):
        gather_spectra([parts[1], parts[0], parts[2]], NAMES, out / "spectra.tsv", out / "eig.tsv")
    with pytest.raises(LayergeomError, match="in order"):
        gather_spectra(parts[:2], NAMES, out / "spectra.tsv", out / "eig.tsv")
    assert not out.exists() or not list(out.glob("*.tsv"))


# ---- (a') a job of several boundaries holds one at a time (its request counts one boundary's arrays) -----------
def _watch_boundary_arrays(monkeypatch) -> list[int]:
    """Per boundary a job reads (its J̄), how many earlier boundaries' J̄ and replicate deviations Δ were still
    alive: weak references to what BoundaryFiles hands out."""
    import gc
    import weakref

    from layergeom.spectral.jobs.common import BoundaryFiles

    alive, held = [], []
    get, dev = BoundaryFiles.__getitem__, BoundaryFiles.deviations

    def getitem(self, name):
        gc.collect()
        held.append(sum(r() is not None for r in alive))
        J = get(self, name)
        alive.append(weakref.ref(J))
        return J

    def deviations(self, *args, **kwargs):
        D = dev(self, *args, **kwargs)
        alive.append(weakref.ref(D))
        return D

    monkeypatch.setattr(BoundaryFiles, "__getitem__", getitem)
    monkeypatch.setattr(BoundaryFiles, "deviations", deviations)
    return held


@pytest.mark.parametrize("job", ["spectra_table_part", "spectra_schur_prep"])
def test_a_job_of_several_boundaries_holds_one_at_a_time(jac, tmp_path, monkeypatch, job):
    """The table part and the Schur prep release a boundary's J̄ and its Δ (K d² float32: 1 GB at d = 4096) before
    the next boundary's are read: a job's peak is one boundary's, as its mem_mb counts."""
    from layergeom.spectral.jobs.schur import write_schur_prep
    from layergeom.spectral.jobs.table import write_spectra_part

    held = _watch_boundary_arrays(monkeypatch)
    if job == "spectra_table_part":
        write_spectra_part(_files(jac, NAMES), tmp_path / "part.npz", **KW)
    else:
        kw = {k: SCHUR[k] for k in ("alphas", "seed", "sr_k", "dtype", "rank_tol", "boundary_metrics", "orders",
                                    "order_alphas", "ci_blocks", "ci_controls")}  # fmt: skip
        write_schur_prep(_files(jac, NAMES), tmp_path / "prep.npz", tmp_path / "prep.arrays.npz", first=0, **kw)
    assert len(held) >= len(NAMES) and not any(held), held


# ---- (b) a killed part resumes from its snapshot -----------------------------------------------------------
SETUP = (
    KILL_AT_SNAPSHOT
    + """
from pathlib import Path
from layergeom.spectral.jobs.table import write_spectra_part
from test_fanout import KW, _files
write_spectra_part(_files(Path({folder!r}), {block!r}), Path({part!r}), snapshot_s=0, **KW)
"""
)


def test_a_killed_part_resumes_from_its_snapshot(jac, tmp_path, monkeypatch):
    from layergeom.spectral.jobs.table import gather_spectra, write_spectra_part

    _single(jac, tmp_path / "one")
    n, k = 3, 2  # the middle block (L1.mlp, L2.attn, L2.mlp), killed before its 2nd snapshot is written
    parts = [tmp_path / "fan" / "parts" / f"{b}.npz" for b in range(3)]
    blocks = [NAMES[i : i + n] for i in range(0, len(NAMES), n)]
    for b in (0, 2):
        write_spectra_part(_files(jac, blocks[b]), parts[b], snapshot_s=0, **KW)
    script = SETUP.format(src=str(ROOT / "src"), tests=str(ROOT / "tests"), k=k, folder=str(jac), block=blocks[1],
                          part=str(parts[1]))  # fmt: skip
    res = forked.run(script)
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    partial = parts[1].parent / work_folder.PARTIAL
    assert not parts[1].exists() and [p.name for p in partial.glob("*.snapshot.npz")] == ["spectra_part_1.snapshot.npz"]
    calls, real = [], snapshots.Snapshots.save

    def save(self, done, state, force=False):
        calls.append(done)
        return real(self, done, state, force)

    monkeypatch.setattr(snapshots.Snapshots, "save", save)
    write_spectra_part(_files(jac, blocks[1]), parts[1], snapshot_s=0, **KW)
    assert calls == [2, 3]  # the saved first boundary was not computed again
    gather_spectra(parts, NAMES, tmp_path / "fan" / "spectra.tsv", tmp_path / "fan" / "eigenvalues.tsv")
    assert _bytes(tmp_path / "fan") == _bytes(tmp_path / "one")
    assert not partial.exists()  # the work folder is gone


# ---- (c) the DAG: parts and a gather only where the key asks -------------------------------------------------
JOB = re.compile(r"^rule (\S+):\n(.*?)(?:\n\n|\Z)", re.S | re.M)


def _jobs(tmp_path, over: dict | None, width: int | None = None, target: str | None = None) -> list[dict]:
    """The jobs of a dry run of config/test.yaml (written to tmp_path/config.yaml) in tmp_path/run (for
    `target`, default all), with `over` as tiny-gpt2's overrides (and `width` its d_model)."""
    cfg = yaml.safe_load(TEST_CONFIG_FILE.read_text())
    if over is not None:
        cfg["models"]["tiny-gpt2"]["overrides"] = over
    if width is not None:
        cfg["models"]["tiny-gpt2"]["hf_config"] |= {"n_embd": width, "model_type": "gpt2"}  # read at DAG time
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    out = snakemake(tmp_path / "run", "-n", *([target] if target else []), config=path).stdout
    jobs = []
    for rule, body in JOB.findall(out):
        fields = dict(re.findall(r"^\s*(\w+): (.*)$", body, re.M))
        wildcards = dict(w.split("=", 1) for w in fields.get("wildcards", "").split(", ") if "=" in w)
        resources = dict(r.split("=", 1) for r in fields.get("resources", "").split(", ") if "=" in r)
        jobs.append({"rule": rule, "wildcards": wildcards, "input": fields.get("input", "").split(", "),
                     "output": fields.get("output", "").split(", "), "resources": resources,
                     "priority": fields.get("priority", "0")})  # fmt: skip
    return jobs


def _table_jobs(jobs, model):
    return sorted((j["rule"], j["wildcards"].get("block")) for j in jobs
                  if j["rule"].startswith("spectra_table") and j["wildcards"].get("model") == model)  # fmt: skip


@pytest.mark.dag
def test_the_default_dag_has_one_table_job_per_checkpoint(tmp_path):
    jobs = _jobs(tmp_path, None)
    table = [j for j in jobs if j["rule"].startswith("spectra_table")]
    checkpoints = {
        (j["wildcards"]["model"], j["wildcards"]["checkpoint"]) for j in jobs if j["rule"] == "spectra_cumulative"
    }
    assert sorted((j["rule"], j["wildcards"]["model"], j["wildcards"]["checkpoint"]) for j in table) == sorted(
        ("spectra_table", m, c) for m, c in checkpoints
    )
    assert len(checkpoints) > 1 and not any("/parts/" in o for j in jobs for o in j["output"])


@pytest.mark.dag
@pytest.mark.parametrize("n", [1, 3, 4])
def test_boundaries_per_job_fans_out_one_models_table(tmp_path, n):
    from layergeom.names import boundaries_for

    names = boundaries_for("gpt2", 2)  # tiny-gpt2: 2 layers, its one checkpoint `init`
    jobs = _jobs(tmp_path, {"spectra": {"boundaries_per_job": n}})
    blocks = [names[i : i + n] for i in range(0, len(names), n)]
    if len(blocks) == 1:  # as many as its boundaries: today's one job
        assert _table_jobs(jobs, "tiny-gpt2") == [("spectra_table", None)]
        return
    assert _table_jobs(jobs, "tiny-gpt2") == sorted(
        [("spectra_table_gather", None)] + [("spectra_table_part", str(k)) for k in range(len(blocks))]
    )
    jac = "results/tiny-gpt2/init/jacobians"
    for j in jobs:
        if j["rule"] == "spectra_table_part":  # reads its block's Jacobian files, no other boundary's
            want = [
                f"{jac}/{b}.{e}" for e in ("npy", "groups.npy", "json") for b in blocks[int(j["wildcards"]["block"])]
            ]
            assert j["input"] == want
            assert j["output"] == [f"results/tiny-gpt2/init/parts/spectra/{j['wildcards']['block']}.npz"]
        if j["rule"] == "spectra_table_gather":  # its parts, and the Jacobian files they must be computed from
            every = [f"{jac}/{b}.{e}" for e in ("npy", "groups.npy", "json") for b in names]
            assert j["input"] == [f"results/tiny-gpt2/init/parts/spectra/{k}.npz" for k in range(len(blocks))] + every
            assert set(j["output"]) == {"results/tiny-gpt2/init/spectra.tsv", "results/tiny-gpt2/init/eigenvalues.tsv"}
    for other in ("tiny-neox", "tiny-llama"):  # the other models keep one job per checkpoint
        assert {r for r, _ in _table_jobs(jobs, other)} == {"spectra_table"}


@pytest.mark.dag
def test_a_parts_resources_count_its_boundaries_and_the_gather_is_small(tmp_path):
    """At d = 4096 (tiny-gpt2 made that wide: its width is read from its config) a part asks for the runtime
    and memory of its one boundary, the single job for its four (layergeom.resources); the gather asks for
    the fixed GATHER_MB and GATHER_MINUTES."""
    from schema_defaults import SPECTRA

    from layergeom.resources import margins, spectral_jobs

    d, n_boundaries = 4096, 4
    single = [j for j in _jobs(tmp_path / "one", None, d) if j["rule"] == "spectra_table"]
    fanned = _jobs(tmp_path / "fan", {"spectra": {"boundaries_per_job": 1}}, d)
    gpt2 = [j for j in single if j["wildcards"]["model"] == "tiny-gpt2"]
    parts = [j for j in fanned if j["rule"] == "spectra_table_part"]
    gather = [j for j in fanned if j["rule"] == "spectra_table_gather"]
    assert len(gpt2) == 1 and len(parts) == n_boundaries and len(gather) == 1
    G = SPECTRA["n_groups"]
    for job, nb in [(gpt2[0], n_boundaries)] + [(p, 1) for p in parts]:
        assert int(job["resources"]["runtime"]) == spectral_jobs.spectra_runtime_min("spectra_table", d, nb, G, SPECTRA)
        assert int(job["resources"]["mem_mb"]) == spectral_jobs.spectra_mem_mb("spectra_table", d, G, SPECTRA, nb)
    assert int(parts[0]["resources"]["runtime"]) < int(gpt2[0]["resources"]["runtime"])
    assert int(gather[0]["resources"]["mem_mb"]) == margins.GATHER_MB
    assert int(gather[0]["resources"]["runtime"]) == margins.GATHER_MINUTES


# ---- (d) a real run of one model's table, both routes --------------------------------------------------------
@pytest.mark.dag
def test_a_fanned_run_writes_the_one_jobs_bytes_and_reruns_nothing_upstream(tmp_path):
    """tiny-gpt2's spectra.tsv through the one job, then (the tables moved aside) through a part per boundary
    and the gather in the same folder: only the parts and the gather run (the key reruns nothing upstream),
    and both tables are the same bytes (~45 s: the model, its store and Jacobians are made once)."""
    target = "results/tiny-gpt2/init/spectra.tsv"
    run, one = tmp_path / "run", tmp_path / "one"  # run: _jobs' folder
    _jobs(tmp_path, None)  # writes tmp_path/config.yaml, the default
    snakemake(run, target, config=tmp_path / "config.yaml")
    out = run / "results" / "tiny-gpt2" / "init"
    one.mkdir()
    for name in ("spectra.tsv", "eigenvalues.tsv"):
        (out / name).rename(one / name)
    fanned = _jobs(tmp_path, {"spectra": {"boundaries_per_job": 1}}, target=target)  # now tmp_path/config.yaml
    assert sorted(j["rule"] for j in fanned) == ["spectra_table_gather"] + ["spectra_table_part"] * 4
    res = snakemake(run, target, config=tmp_path / "config.yaml")
    assert len(re.findall(r"Rule: spectra_table_(?:part|gather)\b", res.stdout + res.stderr)) == 5
    assert _bytes(out) == _bytes(one) and len(_bytes(one)) == 2
    assert sorted(p.name for p in (out / "parts" / "spectra").iterdir()) == [f"{k}.npz" for k in range(4)]


# ---- the Schur surgery fanned out: prep per block, a job per chain, a gather (spectra_schur_*) -----------------
SCHUR = SCHUR_KW | {"sr_k": 2, "alphas": [0, 0.5, 1], "orders": 2, "ci_controls": ["none", "random"]}


def _schur_cumulative(folder, out):
    """The checkpoint's cumulative.tsv (the Schur table's α = 1 rows), made once per folder."""
    from test_spectral import CUMULATIVE_KW

    from layergeom.spectral.jobs.cumulative import write_cumulative

    path = out / "cumulative.tsv"
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        write_cumulative(_files(folder, NAMES), path, **CUMULATIVE_KW)
    return path


def _schur_single(folder, out, **kw):
    from layergeom.spectral.jobs.schur import write_schur

    write_schur(_files(folder, NAMES), out / "schur.tsv", _schur_cumulative(folder, out), **SCHUR | kw)


def _schur_blocks(out, n):
    """(blocks of n boundaries, their prep records, their prep arrays, the chain parts' folder)."""
    blocks = [NAMES[i : i + n] for i in range(0, len(NAMES), n)]
    parts = out / "parts" / "schur"
    prep = [parts / "prep" / f"{k}.npz" for k in range(len(blocks))]
    return blocks, prep, [p.with_suffix(".arrays.npz") for p in prep], parts / "chains"


def _schur_chain_job(folder, out, n, name, snapshot_s=None, segment=None, job=None, siblings=None, **kw):
    """One chain job (as scripts/spectra_schur_chain.py calls it) over the preps of blocks of n boundaries: the
    chain `name`, or its `segment` (start, end) written as parts/schur/chains/{job}.npz."""
    from layergeom.spectral.jobs.schur import write_schur_chain

    s = SCHUR | kw
    blocks, _, arrays, chains = _schur_blocks(out, n)
    chain_kw = {k: s[k] for k in ("alphas", "seed", "orders", "order_alphas", "dtype", "rank_tol", "ci_level",
                                  "ci_blocks", "ci_controls")}  # fmt: skip
    write_schur_chain(_files(folder, NAMES), arrays, blocks, chains / f"{job or name}.npz", chain=name,
                      segment=segment, snapshot_s=snapshot_s, siblings=siblings, **chain_kw)  # fmt: skip


#: the prefix fraction the segment tests split their chains with (the rules take each class's from RATES)
PREFIX_FRACTION = 0.4


def _schur_segment_jobs(name, segments):
    """(job name, segment) of a chain's jobs with spectra.chain_segments = `segments` (None: one job)."""
    from layergeom.spectral.settings import chain_segment_bounds, schur_chain_segment_name

    if segments <= 1:
        return [(name, None)]
    bounds = chain_segment_bounds(len(NAMES), segments, PREFIX_FRACTION)
    return [(schur_chain_segment_name(name, k, segments), seg) for k, seg in enumerate(bounds)]


def _schur_fanned(folder, out, n, skip=(), segments=1, **kw):
    """schur.tsv through the prep of blocks of n boundaries, a job per chain or (`segments` > 1) per segment of
    one (but those in `skip`, done already) and the gather (as the rules do); returns the chain parts by job."""
    from layergeom.spectral.jobs.schur import gather_schur, write_schur_prep
    from layergeom.spectral.settings import schur_chain_name, schur_chains

    s = SCHUR | kw
    blocks, preps, arrays, folder_chains = _schur_blocks(out, n)
    prep_kw = {k: s[k] for k in ("alphas", "seed", "sr_k", "dtype", "rank_tol", "boundary_metrics", "orders",
                                 "order_alphas", "ci_blocks", "ci_controls")}  # fmt: skip
    for k, block in enumerate(blocks):
        if not arrays[k].exists():
            write_schur_prep(_files(folder, block), preps[k], arrays[k], first=k * n, **prep_kw)
    chains = {}
    for name in (schur_chain_name(c) for c in schur_chains(s["alphas"], s["orders"], order_alphas=s["order_alphas"])):
        for job, segment in _schur_segment_jobs(name, segments):
            if job not in skip:
                _schur_chain_job(folder, out, n, name, segment=segment, job=job, **kw)
            chains[job] = folder_chains / f"{job}.npz"
    gather_schur(preps, list(chains.values()), NAMES, out / "schur.tsv", _schur_cumulative(folder, out),
                 alphas=s["alphas"], orders=s["orders"], order_alphas=s["order_alphas"],
                 segments=segments)  # fmt: skip
    return chains


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize(
    "over",
    [
        {},
        {"ci_blocks": 0},
        {"ci_controls": ["none"], "boundary_metrics": "all", "alphas": [0.25, 0, 1, 0.75], "order_alphas": [0.75, 0]},
    ],  # fmt: skip
    ids=["intervals", "no-intervals", "own-intervals"],
)
def test_schur_prep_chains_and_gather_write_the_single_jobs_bytes(jac, tmp_path, n, over):
    _schur_single(jac, tmp_path / "one", **over)
    chains = _schur_fanned(jac, tmp_path / "fan", n, **over)
    one, fan = (tmp_path / d / "schur.tsv" for d in ("one", "fan"))
    assert fan.read_bytes() == one.read_bytes()
    text = one.read_text()
    assert text.count("\n") > len(NAMES) * 10 and "nan\tnan" in text  # rows of every chain; nan where no interval
    if over.get("ci_blocks", 1):  # intervals: finite bounds in the table
        import pandas as pd

        t = pd.read_csv(one, sep="\t")
        assert t["erank_ci_low"].notna().any() and t["erank_order_min"].notna().any()
    assert any("order" in c for c in chains) and any("random" in c for c in chains)


def test_the_schur_gather_refuses_a_missing_chain_or_prep(jac, tmp_path):
    from layergeom.spectral.jobs.schur import gather_schur

    chains = _schur_fanned(jac, tmp_path / "fan", 4)
    preps = sorted((tmp_path / "fan" / "parts" / "schur" / "prep").glob("[0-9].npz"))
    out = tmp_path / "bad" / "schur.tsv"
    kw = {"alphas": SCHUR["alphas"], "orders": SCHUR["orders"], "order_alphas": SCHUR["order_alphas"],
          "cumulative": tmp_path / "fan" / "cumulative.tsv"}  # fmt: skip
    with pytest.raises(LayergeomError, match="not the chains"):
        gather_schur(preps, list(chains.values())[1:], NAMES, out, **kw)
    with pytest.raises(LayergeomError, match="in order"):
        gather_schur(preps[1:], list(chains.values()), NAMES, out, **kw)
    assert not out.exists()


# ---- a Schur chain split into depth segments (spectra.chain_segments) ------------------------------------------
@pytest.mark.parametrize("segments", [2, 3, 9])  # 9 > the 7 boundaries: 7 segments of one depth each
@pytest.mark.parametrize(
    "over", [{}, {"ci_controls": ["none"], "alphas": [0.25, 0, 1, 0.75]}], ids=["intervals", "own-intervals"]
)
def test_schur_chain_segments_write_the_single_jobs_bytes(jac, tmp_path, segments, over):
    """Each chain as `segments` jobs over consecutive depths (the products advanced without SVDs through the
    depths before each), gathered: the single job's schur.tsv byte for byte, with intervals and orders."""
    from layergeom.parts import read_part

    _schur_single(jac, tmp_path / "one", **over)
    chains = _schur_fanned(jac, tmp_path / "fan", 3, segments=segments, **over)
    assert (tmp_path / "fan" / "schur.tsv").read_bytes() == (tmp_path / "one" / "schur.tsv").read_bytes()
    S = min(segments, len(NAMES))
    assert len(chains) == S * len({job.rsplit(".s", 1)[0] for job in chains})
    name = next(iter(chains)).rsplit(".s", 1)[0]
    parts = [read_part(chains[f"{name}.s{k}"], "schur_chain").data for k in range(S)]
    assert [(p["start"], p["end"]) for p in parts] == [seg for _, seg in _schur_segment_jobs(name, segments)]
    assert [len(p["results"]) for p in parts] == [p["end"] - p["start"] for p in parts]


def test_the_schur_gather_refuses_a_missing_or_overlapping_segment(jac, tmp_path):
    from layergeom.parts import read_part, write_part
    from layergeom.spectral.jobs.schur import gather_schur

    chains = _schur_fanned(jac, tmp_path / "fan", 4, segments=3)
    preps = sorted((tmp_path / "fan" / "parts" / "schur" / "prep").glob("[0-9].npz"))
    out = tmp_path / "bad" / "schur.tsv"
    kw = {"alphas": SCHUR["alphas"], "orders": SCHUR["orders"], "order_alphas": SCHUR["order_alphas"], "segments": 3,
          "cumulative": tmp_path / "fan" / "cumulative.tsv"}  # fmt: skip
    jobs = list(chains)
    name = jobs[0].rsplit(".s", 1)[0]
    missing = [chains[j] for j in jobs if j != f"{name}.s1"]  # a gap between s0 and s2
    with pytest.raises(LayergeomError, match="gap") as err:
        gather_schur(preps, missing, NAMES, out, **kw)
    assert "\n" not in str(err.value)
    last = [chains[j] for j in jobs if j != f"{name}.s2"]  # the last depths missing
    with pytest.raises(LayergeomError, match="covering depths"):
        gather_schur(preps, last, NAMES, out, **kw)
    s1 = read_part(chains[f"{name}.s1"], "schur_chain")  # s1 starting a depth early: an overlap with s0
    part = s1.data
    part["start"] -= 1
    part["results"] = part["results"][:1] + part["results"]
    wide = tmp_path / "wide.npz"
    write_part(wide, "schur_chain", part, job=s1.job, inputs=[i["path"] for i in s1.inputs], settings=s1.settings)
    with pytest.raises(LayergeomError, match="overlap"):
        gather_schur(preps, [wide if p == chains[f"{name}.s1"] else p for p in chains.values()], NAMES,
                     out, **kw)  # fmt: skip
    with pytest.raises(LayergeomError, match="overlap"):  # a segment twice
        gather_schur(preps, [*chains.values(), chains[f"{name}.s0"]], NAMES, out, **kw)
    with pytest.raises(LayergeomError, match="not 2 covering"):  # the config asks for another split
        gather_schur(preps, list(chains.values()), NAMES, out, **kw | {"segments": 2})
    assert not out.exists()


@pytest.mark.parametrize("f", [0.0, 0.25, 0.4, 0.7, 1.0])
def test_chain_segment_bounds_cover_the_depths_in_balanced_segments(f):
    """Every split covers 0..n−1 in order with non-empty segments (at most n), and its largest cost
    f·start + (end − start) is the least any split into as many segments reaches (brute force), so no
    segment costs more than the best possible largest cost plus one step; later segments are no longer."""
    from itertools import combinations

    from layergeom.spectral.settings import chain_segment_bounds

    def cost(seg):
        return f * seg[0] + seg[1] - seg[0]

    for n in range(1, 13):
        for S in range(1, n + 3):
            b = chain_segment_bounds(n, S, f)
            assert len(b) == min(S, n) and b[0][0] == 0 and b[-1][1] == n
            assert all(s < e for s, e in b) and all(b[i][1] == b[i + 1][0] for i in range(len(b) - 1))
            k = len(b)
            best = min(max(cost(seg) for seg in zip((0, *cuts), (*cuts, n)))
                       for cuts in combinations(range(1, n), k - 1))  # fmt: skip
            assert max(cost(seg) for seg in b) <= best + 1e-9, (n, S, f, b)
            assert max(cost(seg) for seg in b) <= best + 1  # the task's bound, implied by the above
            if f < 1:
                assert all(b[i][1] - b[i][0] >= b[i + 1][1] - b[i + 1][0] for i in range(len(b) - 1)), (n, S, b)
    assert chain_segment_bounds(64, 2, 0.3) == [(0, 38), (38, 64)]  # 38 and 0.3·38 + 26 = 37.4 steps
    with pytest.raises(ValueError):
        chain_segment_bounds(4, 2, 1.5)


def test_the_schur_gather_checks_each_chains_own_segment_count(jac, tmp_path):
    """spectra.chain_segments splits the chains by their cost (resources.schur_jobs.schur_chain_segments), so the
    gather is given each chain's count by name: the random orders as 3 segment jobs and the other chains as one job each
    give the single job's bytes; a chain whose parts are not its own count is refused, in one line."""
    from layergeom.spectral.jobs.schur import gather_schur

    one, out = tmp_path / "one", tmp_path / "fan"
    _schur_single(jac, one)
    chains = _schur_fanned(jac, out, 3)  # the preps and one job per chain
    _, preps, _, folder = _schur_blocks(out, 3)
    counts = {name: 3 if name.startswith("order") else 1 for name in chains}
    parts = [p for name, p in chains.items() if counts[name] == 1]
    for name in (n for n in chains if counts[n] == 3):
        for job, segment in _schur_segment_jobs(name, 3):
            _schur_chain_job(jac, out, 3, name, segment=segment, job=job)
            parts.append(folder / f"{job}.npz")
    kw = {"alphas": SCHUR["alphas"], "orders": SCHUR["orders"], "order_alphas": SCHUR["order_alphas"],
          "cumulative": out / "cumulative.tsv"}  # fmt: skip
    gather_schur(preps, parts, NAMES, tmp_path / "mixed.tsv", segments=counts, **kw)
    assert (tmp_path / "mixed.tsv").read_bytes() == (one / "schur.tsv").read_bytes()
    run = next(n for n in counts if counts[n] == 1)
    for wrong, match in ((counts | {run: 2}, "not 2 covering"), (1, "not 1 covering"), (3, "not 3 covering")):
        with pytest.raises(LayergeomError, match=match) as err:
            gather_schur(preps, parts, NAMES, tmp_path / "bad.tsv", segments=wrong, **kw)
        assert "\n" not in str(err.value)
    assert not (tmp_path / "bad.tsv").exists()


def _schur_jobs(jobs, model):
    return sorted((j["rule"], j["wildcards"].get("block") or j["wildcards"].get("chain")) for j in jobs
                  if j["rule"].startswith("spectra_schur") and j["wildcards"].get("model") == model)  # fmt: skip


@pytest.mark.dag
@pytest.mark.parametrize("n", [3, 4])
def test_boundaries_per_job_fans_out_one_models_schur(tmp_path, n):
    """tiny-gpt2 (4 boundaries, checkpoint `init`) with the key below its boundaries: a prep per block, a chain
    job per chain of settings.schur_chains (the schema's alphas and orders) and a gather; the other models and
    n = 4 (one block) keep one spectra_schur job."""
    from schema_defaults import SPECTRA

    from layergeom.names import boundaries_for
    from layergeom.spectral.settings import schur_chain_name, schur_chains

    names = boundaries_for("gpt2", 2)
    jobs = _jobs(tmp_path, {"spectra": {"boundaries_per_job": n}})
    blocks = [names[i : i + n] for i in range(0, len(names), n)]
    if len(blocks) == 1:
        assert _schur_jobs(jobs, "tiny-gpt2") == [("spectra_schur", None)]
        return
    chains = [schur_chain_name(c) for c in schur_chains(SPECTRA["alphas"], SPECTRA["schur_orders"])]
    # per variant: the own N at α < 1 and the random N' at α > 0 (α = 1 with the own N is cumulative.tsv's); one
    # job per random order (both variants)
    assert len(chains) == 2 * (2 * len(SPECTRA["alphas"]) - 2) + SPECTRA["schur_orders"]
    assert _schur_jobs(jobs, "tiny-gpt2") == sorted(
        [("spectra_schur_gather", None)]
        + [("spectra_schur_prep", str(k)) for k in range(len(blocks))]
        + [("spectra_schur_chain", c) for c in chains]
    )
    out, jac = "results/tiny-gpt2/init", "results/tiny-gpt2/init/jacobians"
    arrays = [f"{out}/parts/schur/prep/{k}.arrays.npz" for k in range(len(blocks))]
    for j in jobs:
        if j["rule"] == "spectra_schur_prep":
            k = int(j["wildcards"]["block"])
            assert j["input"] == [f"{jac}/{b}.{e}" for e in ("npy", "groups.npy", "json") for b in blocks[k]]
            assert sorted(j["output"]) == [f"{out}/parts/schur/prep/{k}.arrays.npz", f"{out}/parts/schur/prep/{k}.npz"]
        if j["rule"] == "spectra_schur_chain":  # every boundary's Jacobian files and every block's arrays
            assert j["input"] == [f"{jac}/{b}.{e}" for e in ("npy", "groups.npy", "json") for b in names] + arrays
            assert j["output"] == [f"{out}/parts/schur/chains/{j['wildcards']['chain']}.npz"]
        if j["rule"] == "spectra_schur_gather":
            assert j["input"] == [f"{out}/parts/schur/prep/{k}.npz" for k in range(len(blocks))] + [
                f"{out}/parts/schur/chains/{c}.npz" for c in chains
            ] + [f"{out}/cumulative.tsv"] + [f"{jac}/{b}.{e}" for e in ("npy", "groups.npy", "json") for b in names]
            assert j["output"] == [f"{out}/schur.tsv"]
    for other in ("tiny-neox", "tiny-llama"):
        assert {r for r, _ in _schur_jobs(jobs, other)} == {"spectra_schur"}


@pytest.mark.dag
def test_schur_prep_and_chain_resources_count_their_share(tmp_path):
    """At d = 4096 a prep asks for its block's boundaries (spectra_schur_prep), a chain job for its chain
    through every boundary (schur_chain_*), both less memory and time than the one job; the gather the fixed
    GATHER_MB and GATHER_MINUTES."""
    from schema_defaults import SPECTRA

    from layergeom.resources import margins, schur_jobs, spectral_jobs
    from layergeom.spectral.settings import schur_chain_name, schur_chains

    d, nb, G = 4096, 4, SPECTRA["n_groups"]
    jobs = _jobs(tmp_path, {"spectra": {"boundaries_per_job": 1}}, d)
    gpt2 = [j for j in jobs if j["wildcards"].get("model") == "tiny-gpt2"]
    single_mb = spectral_jobs.spectra_mem_mb("spectra_schur", d, G, SPECTRA, nb)
    single_min = spectral_jobs.spectra_runtime_min("spectra_schur", d, nb, G, SPECTRA)
    by_name = {schur_chain_name(c): c for c in schur_chains(SPECTRA["alphas"], SPECTRA["schur_orders"])}
    seen = set()
    for j in (j for j in gpt2 if j["rule"].startswith("spectra_schur_")):
        res = {k: int(j["resources"][k]) for k in ("mem_mb", "runtime")}
        if j["rule"] == "spectra_schur_prep":
            assert res == {
                "mem_mb": spectral_jobs.spectra_mem_mb("spectra_schur_prep", d, G, SPECTRA, 1),
                "runtime": spectral_jobs.spectra_runtime_min("spectra_schur_prep", d, 1, G, SPECTRA),
            }
        elif j["rule"] == "spectra_schur_chain":
            chain = by_name[j["wildcards"]["chain"]]
            assert res == {"mem_mb": schur_jobs.schur_chain_mem_mb(d, G, SPECTRA, chain),
                           "runtime": schur_jobs.schur_chain_runtime_min(d, nb, SPECTRA, chain)}  # fmt: skip
        elif j["rule"] == "spectra_schur_gather":
            assert res == {"mem_mb": margins.GATHER_MB, "runtime": margins.GATHER_MINUTES}
        seen.add(j["rule"])
        assert res["mem_mb"] < single_mb and res["runtime"] < single_min
    assert seen == {"spectra_schur_prep", "spectra_schur_chain", "spectra_schur_gather"}


@pytest.mark.dag
def test_chain_segments_schedule_each_chain_as_segment_jobs_with_their_resources(tmp_path):
    """tiny-gpt2 fanned out (spectra.boundaries_per_job 1, d = 4096) with spectra.chain_segments 2: each chain of
    settings.schur_chains runs as resources.schur_jobs.schur_chain_segments of its 4 boundaries says (2 jobs {chain}.s0,
    {chain}.s1 for the costliest class, one {chain} job for a chain of at most half its cost), each asking for
    its prefix and own steps (schur_chain_runtime_min with its segment, at most the whole chain's) and the
    chain's memory; the gather reads every chain's jobs, in order, and checks each chain against its count."""
    from schema_defaults import SPECTRA

    from layergeom.resources import schur_jobs
    from layergeom.spectral.settings import schur_chain_name, schur_chains

    d, nb, G = 4096, 4, SPECTRA["n_groups"]
    spectra = SPECTRA | {"boundaries_per_job": 1, "chain_segments": 2}
    jobs = _jobs(tmp_path, {"spectra": {"boundaries_per_job": 1, "chain_segments": 2}}, d)
    gpt2 = [j for j in jobs if j["wildcards"].get("model") == "tiny-gpt2"]
    plan = schur_chains(SPECTRA["alphas"], SPECTRA["schur_orders"], order_alphas=SPECTRA["schur_order_alphas"])
    want, names = {}, []
    longest = max(schur_jobs.schur_chain_seconds(d, nb, spectra, c) for c in plan)
    for c in plan:
        segs = schur_jobs.schur_chain_segments(nb, spectra, c)
        one = schur_jobs.schur_chain_seconds(d, nb, spectra, c)
        assert len(segs) == (2 if one > longest / 2 else 1), (c, one, longest)
        assert segs[0][0] == 0 and segs[-1][1] == nb and all(a[1] == b[0] for a, b in zip(segs, segs[1:]))
        for k, seg in enumerate(segs):
            name = f"{schur_chain_name(c)}.s{k}" if len(segs) > 1 else schur_chain_name(c)
            want[name] = (c, seg if len(segs) > 1 else None)
            names.append(name)
    assert {len(schur_jobs.schur_chain_segments(nb, spectra, c)) for c in plan} == {1, 2}  # both kinds at RATES
    got = {j["wildcards"]["chain"]: j for j in gpt2 if j["rule"] == "spectra_schur_chain"}
    assert sorted(got) == sorted(want)
    out = "results/tiny-gpt2/init"
    for name, j in got.items():
        chain, seg = want[name]
        res = {k: int(j["resources"][k]) for k in ("mem_mb", "runtime")}
        assert res == {"mem_mb": schur_jobs.schur_chain_mem_mb(d, G, spectra, chain),
                       "runtime": schur_jobs.schur_chain_runtime_min(d, nb, spectra, chain, seg)}  # fmt: skip
        assert res["runtime"] <= schur_jobs.schur_chain_runtime_min(
            d, nb, spectra, chain
        )  # (both at least MIN_MINUTES)
        assert j["output"] == [f"{out}/parts/schur/chains/{name}.npz"]
    (gather,) = [j for j in gpt2 if j["rule"] == "spectra_schur_gather"]
    assert gather["input"][nb : nb + len(names)] == [f"{out}/parts/schur/chains/{n}.npz" for n in names]  # nb preps
    for other in ("tiny-neox", "tiny-llama"):  # not fanned out: the key does nothing
        assert {r for r, _ in _schur_jobs(jobs, other)} == {"spectra_schur"}
    # priorities: a chain job's is its seconds as bench/long_jobs_plan.py's critical path counts them from the
    # d = 4096 measurements (its base's advance-only step × its prefix + its class's step × its own depths; this d,
    # K and order α are those measured), so the longest start first; every prep outranks every chain job
    bench = json.loads((ROOT / "bench" / "results" / "long_jobs.json").read_text())
    m = bench["results"]["spectra_schur_chains"][str(d)]
    if "order_alphas" not in m or "step_s" not in m:  # the rest of the test checks the priorities against it
        pytest.skip("bench/results/long_jobs.json predates the Schur chain classes: rerun bench/bench_long_jobs.py")
    assert m["K"] == SPECTRA["schur_ci_blocks"] and m["order_alphas"] == [0.0] and SPECTRA["schur_order_alphas"] is None
    prio, seconds = {name: float(j["priority"]) for name, j in got.items()}, {}
    for name, (chain, seg) in want.items():
        start, end = seg or (0, nb)
        cls, base = schur_jobs.schur_chain_class(spectra, chain), schur_jobs.schur_chain_base(spectra, chain)
        adv = m["advance_s"][base]
        if base == "order":  # an order's advance forms J₀^π too: at least its timed basis (per measured α)
            adv = m["order_s"]["basis"] + max(0.0, adv - m["order_s"]["basis"]) / len(m["order_alphas"])
        seconds[name] = start * adv + (end - start) * m["step_s"][cls]
        assert prio[name] == pytest.approx(seconds[name], rel=0.01), (name, prio[name], seconds[name])
    # a prep's: its block's (one boundary) measured seconds + the longest chain job's, above every chain job
    preps = [float(j["priority"]) for j in gpt2 if j["rule"] == "spectra_schur_prep"]
    assert preps == pytest.approx([m["prep_s"] + max(seconds.values())] * nb, rel=0.01)


@pytest.mark.dag
def test_a_fanned_run_writes_the_one_jobs_schur_bytes_with_chain_segments(tmp_path):
    """tiny-gpt2's schur.tsv through the one job, then (moved aside) through its preps, every chain as its
    segment jobs (spectra.chain_segments 2: 2 for the costliest chains, one for those of at most half their cost)
    and the gather, the scripts as the rules call them, in the same folder: only those run, and the table is the
    same bytes. Two α below 1 and one random order keep it to 11 chains."""
    from schema_defaults import SPECTRA

    from layergeom.resources import schur_jobs
    from layergeom.spectral.settings import schur_chain_name, schur_chains

    target = "results/tiny-gpt2/init/schur.tsv"
    small = {"alphas": [0, 0.5, 1], "schur_orders": 1}
    spectra = SPECTRA | small | {"chain_segments": 2}
    want = []
    for c in schur_chains(small["alphas"], small["schur_orders"], order_alphas=None):
        n = len(schur_jobs.schur_chain_segments(4, spectra, c))
        want += [f"{schur_chain_name(c)}.s{k}" for k in range(n)] if n > 1 else [schur_chain_name(c)]
    run, one = tmp_path / "run", tmp_path / "one"  # run: _jobs' folder
    _jobs(tmp_path, {"spectra": small}, target=target)  # writes tmp_path/config.yaml
    snakemake(run, target, config=tmp_path / "config.yaml")
    out = run / "results" / "tiny-gpt2" / "init"
    one.mkdir()
    (out / "schur.tsv").rename(one / "schur.tsv")
    fanned = _jobs(tmp_path, {"spectra": small | {"boundaries_per_job": 1, "chain_segments": 2}}, target=target)
    chains = sorted(j["wildcards"]["chain"] for j in fanned if j["rule"] == "spectra_schur_chain")
    assert chains == sorted(want) and len(want) > 11 and any(re.search(r"\.s1$", c) for c in chains), chains
    res = snakemake(run, target, config=tmp_path / "config.yaml")
    ran = re.findall(r"Rule: (spectra_schur\w*)", res.stdout + res.stderr)
    assert sorted(ran) == sorted(
        ["spectra_schur_gather"] + ["spectra_schur_prep"] * 4 + ["spectra_schur_chain"] * len(want)
    )
    assert (out / "schur.tsv").read_bytes() == (one / "schur.tsv").read_bytes()


SCHUR_SETUP = (
    KILL_AT_SNAPSHOT
    + """
from pathlib import Path
from test_fanout import _schur_chain_job
_schur_chain_job(Path({folder!r}), Path({out!r}), {n}, {chain!r}, snapshot_s=0)
"""
)


@pytest.mark.parametrize("chain", ["update_random_a0.5", "order1"])
def test_a_killed_schur_chain_resumes_from_its_snapshot(jac, tmp_path, monkeypatch, chain):
    """A chain job (the random control with intervals, or a random order) killed with SIGKILL before its 3rd
    snapshot resumes after its 2nd boundary, and the gather writes the single job's bytes."""
    from layergeom.spectral.jobs.schur import write_schur_prep

    _schur_single(jac, tmp_path / "one")
    n, out = 3, tmp_path / "fan"
    blocks, preps, arrays, chains = _schur_blocks(out, n)
    for k, block in enumerate(blocks):  # the preps, as _schur_fanned makes them
        kw = {k: SCHUR[k] for k in ("alphas", "seed", "sr_k", "dtype", "rank_tol", "boundary_metrics", "orders",
                                    "order_alphas", "ci_blocks", "ci_controls")}  # fmt: skip
        write_schur_prep(_files(jac, block), preps[k], arrays[k], first=k * n, **kw)
    script = SCHUR_SETUP.format(src=str(ROOT / "src"), tests=str(ROOT / "tests"), k=3, folder=str(jac), out=str(out),
                                n=n, chain=chain)  # fmt: skip
    res = forked.run(script)
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    part, partial = chains / f"{chain}.npz", chains / work_folder.PARTIAL
    assert not part.exists()
    assert [p.name for p in partial.glob("*.snapshot.npz")] == [f"schur_chain_{chain}.snapshot.npz"]
    calls, real = [], snapshots.Snapshots.save

    def save(self, done, state, force=False):
        calls.append(done)
        return real(self, done, state, force)

    monkeypatch.setattr(snapshots.Snapshots, "save", save)
    _schur_chain_job(jac, out, n, chain, snapshot_s=0)
    assert calls == list(range(3, len(NAMES) + 1))  # the first two boundaries were not stepped again
    _schur_fanned(jac, out, n, skip=(chain,))
    assert (out / "schur.tsv").read_bytes() == (tmp_path / "one" / "schur.tsv").read_bytes()
    assert not partial.exists()


def _schur_preps(jac, out, n):
    """The prep jobs of blocks of n boundaries, as _schur_fanned makes them; returns _schur_blocks(out, n)."""
    from layergeom.spectral.jobs.schur import write_schur_prep

    blocks, preps, arrays, chains = _schur_blocks(out, n)
    kw = {k: SCHUR[k] for k in ("alphas", "seed", "sr_k", "dtype", "rank_tol", "boundary_metrics", "orders",
                                "order_alphas", "ci_blocks", "ci_controls")}  # fmt: skip
    for k, block in enumerate(blocks):
        write_schur_prep(_files(jac, block), preps[k], arrays[k], first=k * n, **kw)
    return blocks, preps, arrays, chains


def test_a_killed_schur_chains_work_goes_when_the_settings_no_longer_have_it(jac, tmp_path):
    """A chain job (the random control at α = 0.5) killed after its 2nd snapshot leaves its snapshot and lock in
    parts/schur/chains/.partial/; with settings that no longer have that chain (its siblings: the chains of the
    new settings), the next chain job removes them, and a chain job of the current settings leaves the work of
    another current chain in place."""
    n, out = 3, tmp_path / "fan"
    *_, chains = _schur_preps(jac, out, n)
    chain = "update_random_a0.5"
    script = SCHUR_SETUP.format(src=str(ROOT / "src"), tests=str(ROOT / "tests"), k=3, folder=str(jac), out=str(out),
                                n=n, chain=chain)  # fmt: skip
    assert forked.run(script).returncode == -signal.SIGKILL
    partial = chains / work_folder.PARTIAL
    killed = sorted(p.name for p in partial.iterdir())
    assert killed == [f"schur_chain_{chain}.lock", f"schur_chain_{chain}.snapshot.npz"]
    current = [chains / f"{c}.npz" for c in ("update_none_a0.0", chain, "order0")]  # the killed chain's settings
    _schur_chain_job(jac, out, n, "update_none_a0.0", siblings=current)
    assert sorted(p.name for p in partial.iterdir()) == killed  # a current chain's work: kept for its rerun
    other = [chains / f"{c}.npz" for c in ("update_none_a0.0", "order0")]  # settings without it (other α)
    _schur_chain_job(jac, out, n, "update_none_a0.0", snapshot_s=0, siblings=other)
    assert not partial.exists()  # the killed chain's files removed, the job's own work cleared


def test_the_schur_gather_refuses_a_pickled_or_stale_part(jac, tmp_path):
    """A pickle where a Schur part belongs is refused unread, naming the file; a chain part computed with other
    settings than its siblings' (another seed) is stale; one computed from other Jacobian files is refused when
    the gather is given the checkpoint's (`inputs`)."""
    import pickle

    from layergeom.parts import read_part, write_part
    from layergeom.spectral.jobs.schur import gather_schur

    chains = _schur_fanned(jac, tmp_path / "fan", 4)
    preps = sorted((tmp_path / "fan" / "parts" / "schur" / "prep").glob("[0-9].npz"))
    out = tmp_path / "bad" / "schur.tsv"
    kw = {"alphas": SCHUR["alphas"], "orders": SCHUR["orders"], "order_alphas": SCHUR["order_alphas"],
          "cumulative": tmp_path / "fan" / "cumulative.tsv"}  # fmt: skip
    paths = list(chains.values())
    bad = tmp_path / "bad.npz"
    bad.write_bytes(pickle.dumps({"chain": ["order", 0]}))
    with pytest.raises(LayergeomError, match="a pickle") as err:
        gather_schur(preps, [bad, *paths[1:]], NAMES, out, **kw)
    assert str(bad) in str(err.value) and "\n" not in str(err.value)
    first = read_part(paths[0], "schur_chain")
    write_part(bad, "schur_chain", first.data, job=first.job, inputs=[i["path"] for i in first.inputs],
               settings=first.settings | {"seed": first.settings["seed"] + 1})  # fmt: skip
    with pytest.raises(LayergeomError, match="stale"):
        gather_schur(preps, [bad, *paths[1:]], NAMES, out, **kw)
    with pytest.raises(LayergeomError, match="not an input of this table"):
        gather_schur(preps, paths, NAMES, out, **kw, inputs=[tmp_path / "elsewhere.npy"])
    gather_schur(preps, paths, NAMES, out, **kw, inputs=_files(jac, NAMES).paths())
    assert out.exists()


SEGMENT_SETUP = (
    KILL_AT_SNAPSHOT
    + """
from pathlib import Path
from test_fanout import _schur_chain_job
_schur_chain_job(Path({folder!r}), Path({out!r}), {n}, {chain!r}, snapshot_s=0, segment={segment!r}, job={job!r})
"""
)


@pytest.mark.parametrize("kill", [2, 6], ids=["in-prefix", "in-own-steps"])
def test_a_killed_schur_chain_segment_resumes_from_its_snapshot(jac, tmp_path, monkeypatch, kill):
    """A segment job over depths [4, 6) (the random control with intervals) killed with SIGKILL before its
    `kill`-th snapshot (in its prefix: after 1 advance; in its own steps: after 4 advances and a step) resumes
    after the last saved depth, and the gather of every chain's 3 segments writes the single job's bytes."""
    from layergeom.spectral.jobs.schur import write_schur_prep

    _schur_single(jac, tmp_path / "one")
    n, out, chain, segments = 3, tmp_path / "fan", "update_random_a0.5", 3
    blocks, preps, arrays, chains = _schur_blocks(out, n)
    for k, block in enumerate(blocks):
        kw = {k: SCHUR[k] for k in ("alphas", "seed", "sr_k", "dtype", "rank_tol", "boundary_metrics", "orders",
                                    "order_alphas", "ci_blocks", "ci_controls")}  # fmt: skip
        write_schur_prep(_files(jac, block), preps[k], arrays[k], first=k * n, **kw)
    jobs = _schur_segment_jobs(chain, segments)
    job, segment = jobs[1]
    assert segment == (4, 6)  # (0, 4), (4, 6), (6, 7) at PREFIX_FRACTION: a prefix of 4 depths, 2 own
    script = SEGMENT_SETUP.format(src=str(ROOT / "src"), tests=str(ROOT / "tests"), k=kill, folder=str(jac),
                                  out=str(out), n=n, chain=chain, segment=segment, job=job)  # fmt: skip
    res = forked.run(script)
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    partial = chains / work_folder.PARTIAL
    assert not (chains / f"{job}.npz").exists()
    assert [p.name for p in partial.glob("*.snapshot.npz")] == [f"schur_chain_{job}.snapshot.npz"]
    calls, real = [], snapshots.Snapshots.save

    def save(self, done, state, force=False):
        calls.append(done)
        return real(self, done, state, force)

    monkeypatch.setattr(snapshots.Snapshots, "save", save)
    _schur_chain_job(jac, out, n, chain, snapshot_s=0, segment=segment, job=job)
    assert calls == list(range(kill, segment[1] + 1))  # the depths saved before the kill were not redone
    _schur_fanned(jac, out, n, skip=(job,), segments=segments)
    assert (out / "schur.tsv").read_bytes() == (tmp_path / "one" / "schur.tsv").read_bytes()
    assert not partial.exists()


def test_the_chain_names_are_the_surgerys_variants_and_controls():
    """settings.schur_chains (torch- and numpy-free: the DAG reads it) names the variants and controls the
    surgery composes, and every chain has its own name that the rule's wildcard constraint accepts."""
    from layergeom.spectral import cumulative, schur
    from layergeom.spectral.settings import (
        SCHUR_CONTROLS,
        SCHUR_VARIANTS,
        schur_chain_name,
        schur_chain_segment_name,
        schur_chains,
    )

    assert SCHUR_VARIANTS == cumulative.VARIANTS and SCHUR_CONTROLS == schur.CONTROLS
    pattern = re.search(r'chain=r"([^"]+)"', (ROOT / "rules" / "spectra.smk").read_text()).group(1)
    for alphas, orders in [([0, 0.25, 0.5, 0.75, 1], 8), ([1.0, 0.5, 0.5], 0), ([0.125, 1e-3], 3)]:
        names = [schur_chain_name(c) for c in schur_chains(alphas, orders)]
        assert len(set(names)) == len(names) and all(re.fullmatch(pattern, n) for n in names), names
        segs = [schur_chain_segment_name(n, k, 3) for n in names for k in range(3)]
        assert len(set(segs)) == len(segs) and all(re.fullmatch(pattern, n) for n in segs), segs
        assert all(schur_chain_segment_name(n, 0, 1) == n for n in names)
    assert not re.fullmatch(pattern, "update_none_a0.5.s") and not re.fullmatch(pattern, "update_none_a0.5s1")


SCHUR_PREP_SETUP = (
    KILL_AT_SNAPSHOT
    + """
from pathlib import Path
from test_fanout import _schur_prep_job
_schur_prep_job(Path({folder!r}), Path({out!r}), {n}, {k_block}, snapshot_s=0)
"""
)


def _schur_prep_job(folder, out, n, k, snapshot_s=None, **kw):
    """Block k's prep job (as scripts/spectra_schur_prep.py calls it)."""
    from layergeom.spectral.jobs.schur import write_schur_prep

    s = SCHUR | kw
    blocks, preps, arrays, _ = _schur_blocks(out, n)
    prep_kw = {k: s[k] for k in ("alphas", "seed", "sr_k", "dtype", "rank_tol", "boundary_metrics", "orders",
                                 "order_alphas", "ci_blocks", "ci_controls")}  # fmt: skip
    write_schur_prep(_files(folder, blocks[k]), preps[k], arrays[k], first=k * n, snapshot_s=snapshot_s,
                     **prep_kw)  # fmt: skip


def test_a_killed_schur_prep_resumes_from_its_snapshot(jac, tmp_path, monkeypatch):
    """A prep job of 4 boundaries killed before its 3rd snapshot resumes after its 2nd boundary (their arrays
    wait in the work folder), and the gather writes the single job's bytes."""
    _schur_single(jac, tmp_path / "one")
    n, out = 4, tmp_path / "fan"
    script = SCHUR_PREP_SETUP.format(src=str(ROOT / "src"), tests=str(ROOT / "tests"), k=3, folder=str(jac),
                                     out=str(out), n=n, k_block=0)  # fmt: skip
    res = forked.run(script)
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]
    _, preps, arrays, _ = _schur_blocks(out, n)
    partial = preps[0].parent / work_folder.PARTIAL
    assert not preps[0].exists() and not arrays[0].exists()
    # the arrays of 3 boundaries (the 3rd's written before the kill, its record not saved: it is redone)
    names = [f"schur_prep_0.b{i}.npz" for i in range(3)] + ["schur_prep_0.snapshot.npz"]
    assert sorted(p.name for p in partial.glob("*.npz")) == names
    calls, real = [], snapshots.Snapshots.save

    def save(self, done, state, force=False):
        calls.append(done)
        return real(self, done, state, force)

    monkeypatch.setattr(snapshots.Snapshots, "save", save)
    _schur_prep_job(jac, out, n, 0, snapshot_s=0)
    assert calls == [3, 4]  # the first two boundaries were not prepared again
    assert not partial.exists()
    _schur_fanned(jac, out, n)  # block 1's prep and the chains
    assert (out / "schur.tsv").read_bytes() == (tmp_path / "one" / "schur.tsv").read_bytes()


# ---- the certified low-rank route of the `update` products, fanned out ------------------------------------------
def _low_rank_files(folder, d=24, r=4, G=8, n=5, seed=5):
    """Boundary files whose attention J̄ (and every group mean) has rank r, like a grouped-query attention
    boundary's, and whose MLP J̄ are full rank: the `update` products are of rank ≤ r after the first."""
    g = np.random.default_rng(seed)
    counts = np.full(G, n)
    for i, b in enumerate(NAMES):
        if b.endswith("attn"):
            A = g.standard_normal((d, r)) / np.sqrt(d)
            groups = np.stack([A @ (g.standard_normal((r, d)) + 0.1 * g.standard_normal((r, d))) for _ in range(G)])
        else:
            M = nonnormal(d, seed=30 + i) / 3
            groups = M[None] + 0.05 * g.standard_normal((G, d, d)) / np.sqrt(d)
        groups = groups.astype(np.float32)
        np.save(folder / f"{b}.npy", np.tensordot(counts / counts.sum(), groups.astype(np.float64), axes=1))
        np.save(folder / f"{b}.groups.npy", groups)
        (folder / f"{b}.json").write_text(json.dumps({"boundary": b, "n_samples": int(counts.sum()),
                                                      "group_counts": list(map(int, counts))}))  # fmt: skip


def test_the_certified_low_rank_route_fans_out_to_the_single_jobs_bytes(tmp_path, monkeypatch):
    """Attention boundaries of rank 4 (d = 24): the `update` chains take the certified low-rank singular values
    (counted), the fanned-out surgery (blocks of 3, every chain in 2 segments) writes the single job's bytes, and
    the erank agrees with the full SVD's to within the certificate's tolerance."""
    import pandas as pd

    from layergeom import linalg
    from layergeom.spectral import cumulative

    folder = tmp_path / "jac"
    folder.mkdir()
    _low_rank_files(folder)
    taken, real = [], linalg.certified_svd

    def counting(C, vectors, **kw):
        out = real(C, vectors, **kw)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(cumulative, "certified_svd", counting)
    _schur_single(folder, tmp_path / "one")
    assert sum(taken) > len(NAMES) and not all(taken)  # low rank after an attention boundary; not the full variant
    _schur_fanned(folder, tmp_path / "fan", 3, segments=2)
    one = (tmp_path / "one" / "schur.tsv").read_bytes()
    assert (tmp_path / "fan" / "schur.tsv").read_bytes() == one
    monkeypatch.setattr(cumulative, "certified_svd", lambda C, vectors, **kw: None)  # the full SVD everywhere
    _schur_single(folder, tmp_path / "full")
    a, b = (pd.read_csv(tmp_path / x / "schur.tsv", sep="\t") for x in ("one", "full"))
    for col in ("erank", "erank_ci_low", "erank_ci_high", "erank_order_min", "erank_order_max"):
        x, y = np.log(a[col].to_numpy()), np.log(b[col].to_numpy())
        ok = np.isfinite(y)
        assert (np.isfinite(x) == ok).all()
        assert np.abs(x[ok] - y[ok]).max() <= 2 * linalg.LOWRANK_TOL, col  # |Δ log erank| within the bound
    assert (tmp_path / "full" / "schur.tsv").read_bytes() != one  # the route changed something: the test can fail
