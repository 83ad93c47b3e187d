"""cumulative.tsv and convergence.tsv fanned out (spectra.boundaries_per_job, as the table): a job per variant's
chain and a job per subset size, each with a gather, write the same bytes as the one job per checkpoint
(layergeom.spectral.jobs.cumulative and .convergence); a killed variant or subset job resumes from its snapshot;
the DAG has the jobs only where the key asks for them, with their own resources (layergeom.resources)."""

from __future__ import annotations

import os
import pickle
import re
import signal

import forked
import numpy as np
import pytest
from conftest import ROOT
from lg_runs import snakemake
from test_fanout import NAMES, _files, _jobs, _mats, jac  # noqa: F401 (jac: the fixture)
from test_resume import KILL_AT_SNAPSHOT
from test_spectral import CONVERGENCE_KW, CUMULATIVE_KW, write_boundary_files

from layergeom.resume import snapshots, work_folder
from layergeom.runtime import LayergeomError

CONV = CONVERGENCE_KW | {"sr_k": 2, "n_edge": 2}  # as scripts/spectra_convergence*.py pass them; k capped for d = 6


def _bytes(path) -> bytes:
    return path.read_bytes()


# ---- cumulative: a job per variant and a gather -----------------------------------------------------------
def _cum_single(folder, out, **kw):
    from layergeom.spectral.jobs.cumulative import write_cumulative

    write_cumulative(_files(folder, NAMES), out / "cumulative.tsv", **CUMULATIVE_KW | kw)


def _cum_variant(folder, out, variant, snapshot_s=None, **kw):
    """One variant's job (as scripts/spectra_cumulative_variant.py calls it)."""
    from layergeom.spectral.jobs.cumulative import write_cumulative_variant

    write_cumulative_variant(_files(folder, NAMES), out / "parts" / "cumulative" / f"{variant}.npz",
                             variant=variant, snapshot_s=snapshot_s, **CUMULATIVE_KW | kw)  # fmt: skip


def _cum_fanned(folder, out, skip=(), **kw):
    from layergeom.spectral.cumulative import VARIANTS
    from layergeom.spectral.jobs.cumulative import gather_cumulative

    for v in VARIANTS:
        if v not in skip:
            _cum_variant(folder, out, v, **kw)
    parts = [out / "parts" / "cumulative" / f"{v}.npz" for v in VARIANTS]
    gather_cumulative(parts, NAMES, out / "cumulative.tsv")
    return parts


def _with_counts(tmp_path, counts):
    folder = tmp_path / "jac1"
    folder.mkdir()
    write_boundary_files(folder, _mats(), counts=counts)
    return folder


@pytest.mark.parametrize("over", [{}, {"ci_blocks": 3}, "one-group"], ids=["groups", "blocks", "one-group"])
def test_variant_jobs_and_gather_write_the_single_jobs_cumulative_bytes(jac, tmp_path, over):  # noqa: F811
    folder = jac
    if over == "one-group":  # no replicates: nan interval columns, in each part as in one job
        folder, over = _with_counts(tmp_path, np.array([9])), {}
    _cum_single(folder, tmp_path / "one", **over)
    _cum_fanned(folder, tmp_path / "fan", **over)
    one = _bytes(tmp_path / "one" / "cumulative.tsv")
    assert _bytes(tmp_path / "fan" / "cumulative.tsv") == one
    text = one.decode()
    assert text.count("\n") == 2 * len(NAMES) + 1 and "\nupdate\t" in text and "\nfull\t" in text
    assert ("\tnan\tnan\t" in text) == (folder is not jac)  # intervals only with more than one group


def test_the_cumulative_gather_refuses_a_missing_or_reordered_variant(jac, tmp_path):  # noqa: F811
    from layergeom.spectral.jobs.cumulative import gather_cumulative

    parts = _cum_fanned(jac, tmp_path / "fan")
    out = tmp_path / "bad" / "cumulative.tsv"
    with pytest.raises(LayergeomError, match="in order"):
        gather_cumulative(parts[::-1], NAMES, out)
    with pytest.raises(LayergeomError, match="in order"):
        gather_cumulative(parts[:1], NAMES, out)
    with pytest.raises(LayergeomError, match="not the checkpoint's"):
        gather_cumulative(parts, NAMES[:-1], out)
    old = tmp_path / "old.pkl"  # a part of another version (or kind)
    old.write_bytes(pickle.dumps({"kind": "cumulative", "format": 0}))
    with pytest.raises(LayergeomError, match="not a cumulative part"):
        gather_cumulative([parts[0], old], NAMES, out)
    with pytest.raises(ValueError, match="unknown cumulative variant"):
        _cum_variant(jac, tmp_path / "x", "residual")
    assert not out.exists()


def test_cumulative_parts_with_other_group_counts_are_refused(jac, tmp_path):  # noqa: F811
    from layergeom.spectral.jobs.cumulative import gather_cumulative

    other = _with_counts(tmp_path, np.array([4, 6] * 4))
    _cum_variant(jac, tmp_path / "fan", "update")
    _cum_variant(other, tmp_path / "fan", "full")
    parts = [tmp_path / "fan" / "parts" / "cumulative" / f"{v}.npz" for v in ("update", "full")]
    with pytest.raises(LayergeomError, match="group_counts .* differ from"):
        gather_cumulative(parts, NAMES, tmp_path / "fan" / "cumulative.tsv")


# ---- convergence: a job per subset size and a gather ----------------------------------------------------
def _conv_single(folder, out, **kw):
    from layergeom.spectral.jobs.convergence import write_convergence

    write_convergence(_files(folder, NAMES), out / "convergence.tsv", **CONV | kw)


def _conv_part(out, k):
    return out / "parts" / "convergence" / f"{k}.npz"


def _conv_subset(folder, out, k, snapshot_s=None, **kw):
    """Subset k's job (as scripts/spectra_convergence_subset.py calls it)."""
    from layergeom.spectral.jobs.convergence import write_convergence_subset

    write_convergence_subset(_files(folder, NAMES), _conv_part(out, k), subset=k, snapshot_s=snapshot_s,
                             **CONV | kw)  # fmt: skip


def _conv_fanned(folder, out, n, skip=(), **kw):
    from layergeom.spectral.jobs.convergence import gather_convergence

    for k in range(n):
        if k not in skip:
            _conv_subset(folder, out, k, **kw)
    parts = [_conv_part(out, k) for k in range(n)]
    gather_convergence(parts, NAMES, out / "convergence.tsv")
    return parts


@pytest.mark.parametrize(
    "over, n",
    [({}, 4), ({}, 6), ({"sizes": [8, 3]}, 2), ({"sizes": [2, 5, 20], "n_edge": 1}, 3), ("one-group", 1)],
    ids=["default", "more-jobs-than-sizes", "given", "capped", "one-group"],
)
def test_subset_jobs_and_gather_write_the_single_jobs_convergence_bytes(jac, tmp_path, over, n):  # noqa: F811
    """The 8 groups of the Jacobian files give the default sizes 2, 3, 5, 8: a job each (the rows of a size
    are its own arithmetic); an index past the sizes (the config's n_groups allows more than the Jacobian
    job's G gives) writes no rows; one group: no sizes, the single job's empty table."""
    from layergeom.spectral.settings import convergence_sizes

    folder = jac
    if over == "one-group":
        folder, over = _with_counts(tmp_path, np.array([9])), {}
    _conv_single(folder, tmp_path / "one", **over)
    _conv_fanned(folder, tmp_path / "fan", n, **over)
    one = _bytes(tmp_path / "one" / "convergence.tsv")
    assert _bytes(tmp_path / "fan" / "convergence.tsv") == one
    sizes = convergence_sizes(1 if folder is not jac else 8, CONV["sizes"] if "sizes" not in over else over["sizes"])
    assert one.count(b"\n") == 1 + 9 * len(sizes) and len(sizes) <= n  # 9 metrics per size: content compared
    if folder is jac:
        assert len(sizes) >= 2


def test_the_convergence_gather_refuses_missing_or_reordered_subsets(jac, tmp_path):  # noqa: F811
    from layergeom.spectral.jobs.convergence import gather_convergence

    parts = _conv_fanned(jac, tmp_path / "fan", 4)
    out = tmp_path / "bad" / "convergence.tsv"
    with pytest.raises(LayergeomError, match="not subset 0"):
        gather_convergence(parts[1:] + parts[:1], NAMES, out)
    with pytest.raises(LayergeomError, match="3 convergence parts for the sizes"):
        gather_convergence(parts[:3], NAMES, out)
    with pytest.raises(LayergeomError, match="not subset 0"):
        gather_convergence(parts, NAMES[1:], out)
    other = _with_counts(tmp_path, np.array([4, 6] * 4))
    _conv_subset(other, tmp_path / "other", 1)
    with pytest.raises(LayergeomError, match="group_counts .* differ from"):
        gather_convergence([parts[0], _conv_part(tmp_path / "other", 1), *parts[2:]], NAMES, out)
    assert not out.exists()


def test_both_tables_are_the_same_bytes_at_a_width_where_blas_blocks(tmp_path):
    """d = 96 (BLAS's blocked kernels, not the small-matrix paths of d = 6), 12 groups of unequal sizes: a
    variant's and a size's arithmetic is the one job's there too (a size reads only its first S groups)."""
    from layergeom.spectral.cumulative import VARIANTS

    folder = tmp_path / "jac"
    folder.mkdir()
    rng = np.random.default_rng(3)
    write_boundary_files(folder, {b: rng.standard_normal((96, 96)) / 12 for b in NAMES},
                         counts=np.arange(3, 15))  # fmt: skip
    _cum_single(folder, tmp_path / "one")
    _cum_fanned(folder, tmp_path / "fan")
    _conv_single(folder, tmp_path / "one")
    _conv_fanned(folder, tmp_path / "fan", 4)
    for name in ("cumulative.tsv", "convergence.tsv"):
        assert _bytes(tmp_path / "fan" / name) == _bytes(tmp_path / "one" / name), name
    assert _bytes(tmp_path / "one" / "convergence.tsv").count(b"\n") == 1 + 9 * 4
    assert _bytes(tmp_path / "one" / "cumulative.tsv").count(b"\n") == 1 + len(VARIANTS) * len(NAMES)


# ---- a killed variant or subset job resumes from its snapshot -----------------------------------------------
SETUP = (
    KILL_AT_SNAPSHOT
    + """
from pathlib import Path
from test_fanout_chains import {fn}
{fn}(Path({folder!r}), Path({out!r}), {which!r}, snapshot_s=0)
"""
)


def _kill(fn, folder, out, which, k):
    script = SETUP.format(src=str(ROOT / "src"), tests=str(ROOT / "tests"), k=k, fn=fn, folder=str(folder),
                          out=str(out), which=which)  # fmt: skip
    res = forked.run(script)
    assert res.returncode == -signal.SIGKILL, res.stderr[-3000:]


def _saves(monkeypatch) -> list[int]:
    calls, real = [], snapshots.Snapshots.save

    def save(self, done, state, force=False):
        calls.append(done)
        return real(self, done, state, force)

    monkeypatch.setattr(snapshots.Snapshots, "save", save)
    return calls


@pytest.mark.parametrize("variant", ["update", "full"])
def test_a_killed_variant_job_resumes_from_its_snapshot(jac, tmp_path, monkeypatch, variant):  # noqa: F811
    """A variant's job killed with SIGKILL before its 4th snapshot resumes after its 3rd boundary, and the
    gather writes the single job's bytes."""
    _cum_single(jac, tmp_path / "one")
    out = tmp_path / "fan"
    _kill("_cum_variant", jac, out, variant, 4)
    part = out / "parts" / "cumulative" / f"{variant}.npz"
    partial = part.parent / work_folder.PARTIAL
    assert not part.exists()
    assert [p.name for p in partial.glob("*.snapshot.npz")] == [f"cumulative_{variant}.snapshot.npz"]
    calls = _saves(monkeypatch)
    _cum_variant(jac, out, variant, snapshot_s=0)
    assert calls == list(range(4, len(NAMES) + 1))  # the first three boundaries were not stepped again
    _cum_fanned(jac, out, skip=(variant,))
    assert _bytes(out / "cumulative.tsv") == _bytes(tmp_path / "one" / "cumulative.tsv")
    assert not partial.exists()


def test_a_killed_subset_job_resumes_from_its_snapshot(jac, tmp_path, monkeypatch):  # noqa: F811
    """Subset 2's job (5 of the 8 groups) killed before its 3rd snapshot resumes after its 2nd boundary, and
    the gather writes the single job's bytes."""
    _conv_single(jac, tmp_path / "one")
    out, k = tmp_path / "fan", 2
    _kill("_conv_subset", jac, out, k, 3)
    partial = _conv_part(out, k).parent / work_folder.PARTIAL
    assert not _conv_part(out, k).exists()
    assert [p.name for p in partial.glob("*.snapshot.npz")] == [f"convergence_{k}.snapshot.npz"]
    calls = _saves(monkeypatch)
    _conv_subset(jac, out, k, snapshot_s=0)
    assert calls == list(range(3, len(NAMES) + 1))  # one step per boundary at one size: two not redone
    _conv_fanned(jac, out, 4, skip=(k,))
    assert _bytes(out / "convergence.tsv") == _bytes(tmp_path / "one" / "convergence.tsv")
    assert not partial.exists()


# ---- the DAG ---------------------------------------------------------------------------------------------
def _chain_jobs(jobs, model):
    return sorted((j["rule"], j["wildcards"].get("variant") or j["wildcards"].get("subset")) for j in jobs
                  if re.match(r"spectra_(cumulative|convergence)", j["rule"])
                  and j["wildcards"].get("model") == model)  # fmt: skip


def test_the_variant_constraint_is_the_cumulative_variants():
    from layergeom.spectral.cumulative import VARIANTS

    text = (ROOT / "rules" / "spectra.smk").read_text()
    assert 'variant="|".join(CUMULATIVE_VARIANTS)' in text
    assert re.search(r"^CUMULATIVE_VARIANTS = SCHUR_VARIANTS$", (ROOT / "rules" / "common.smk").read_text(), re.M)
    from layergeom.spectral.settings import SCHUR_VARIANTS

    assert SCHUR_VARIANTS == VARIANTS


@pytest.mark.dag
@pytest.mark.parametrize("n", [1, 4])
def test_boundaries_per_job_fans_out_cumulative_and_convergence(tmp_path, n):
    """tiny-gpt2 (4 boundaries, checkpoint `init`) with the key below its boundaries: a cumulative job per
    variant, a convergence job per subset size (the schema's n_groups 16 and null sizes: 4) and their gathers;
    the other models and n = 4 (one block) keep one job each."""
    from schema_defaults import SPECTRA

    from layergeom.names import boundaries_for
    from layergeom.spectral.cumulative import VARIANTS
    from layergeom.spectral.settings import convergence_sizes

    names = boundaries_for("gpt2", 2)
    jobs = _jobs(tmp_path, {"spectra": {"boundaries_per_job": n}})
    if n >= len(names):
        assert _chain_jobs(jobs, "tiny-gpt2") == [("spectra_convergence", None), ("spectra_cumulative", None)]
        assert not any("/parts/" in o for j in jobs for o in j["output"])
        return
    n_sizes = len(convergence_sizes(SPECTRA["n_groups"], SPECTRA["convergence_sizes"]))
    assert n_sizes == 4
    assert _chain_jobs(jobs, "tiny-gpt2") == sorted(
        [("spectra_cumulative_gather", None), ("spectra_convergence_gather", None)]
        + [("spectra_cumulative_variant", v) for v in VARIANTS]
        + [("spectra_convergence_subset", str(k)) for k in range(n_sizes)]
    )
    out, jac_dir = "results/tiny-gpt2/init", "results/tiny-gpt2/init/jacobians"
    every = [f"{jac_dir}/{b}.{e}" for e in ("npy", "groups.npy", "json") for b in names]
    for j in jobs:
        if j["wildcards"].get("model") != "tiny-gpt2":
            continue
        if j["rule"] == "spectra_cumulative_variant":
            assert j["input"] == every
            assert j["output"] == [f"{out}/parts/cumulative/{j['wildcards']['variant']}.npz"]
        if j["rule"] == "spectra_convergence_subset":
            assert j["input"] == every
            assert j["output"] == [f"{out}/parts/convergence/{j['wildcards']['subset']}.npz"]
        if j["rule"] == "spectra_cumulative_gather":
            assert j["input"] == [f"{out}/parts/cumulative/{v}.npz" for v in VARIANTS] + every
            assert j["output"] == [f"{out}/cumulative.tsv"]
        if j["rule"] == "spectra_convergence_gather":
            assert j["input"] == [f"{out}/parts/convergence/{k}.npz" for k in range(n_sizes)] + every
            assert j["output"] == [f"{out}/convergence.tsv"]
    for other in ("tiny-neox", "tiny-llama"):
        assert {r for r, _ in _chain_jobs(jobs, other)} == {"spectra_cumulative", "spectra_convergence"}


@pytest.mark.dag
def test_the_subset_jobs_follow_the_configs_sizes(tmp_path):
    """spectra.convergence_sizes [3, 7] (n_groups 16): two subset jobs; n_groups 2: one size (2)."""
    jobs = _jobs(tmp_path / "a", {"spectra": {"boundaries_per_job": 2, "convergence_sizes": [3, 7]}})
    assert [k for r, k in _chain_jobs(jobs, "tiny-gpt2") if r == "spectra_convergence_subset"] == ["0", "1"]
    jobs = _jobs(tmp_path / "b", {"spectra": {"boundaries_per_job": 2, "n_groups": 2}})
    assert [k for r, k in _chain_jobs(jobs, "tiny-gpt2") if r == "spectra_convergence_subset"] == ["0"]


@pytest.mark.dag
def test_variant_and_subset_resources_count_their_share(tmp_path):
    """At d = 4096 a variant's job asks for one chain's memory and time, a subset's job for one size's (the
    resources' functions), each less than the one job; the gathers the fixed GATHER_MB and GATHER_MINUTES."""
    from schema_defaults import SPECTRA

    from layergeom.resources import margins, spectral_jobs

    d, nb, G = 4096, 4, SPECTRA["n_groups"]
    jobs = [j for j in _jobs(tmp_path, {"spectra": {"boundaries_per_job": 1}}, d)
            if j["wildcards"].get("model") == "tiny-gpt2"]  # fmt: skip
    want = {
        "spectra_cumulative_variant": (spectral_jobs.cumulative_variant_mem_mb(d, G, SPECTRA),
                                       spectral_jobs.cumulative_variant_runtime_min(d, nb)),
        "spectra_convergence_subset": lambda k: (spectral_jobs.convergence_subset_mem_mb(d, G, SPECTRA, nb),
                                                 spectral_jobs.convergence_subset_runtime_min(d, nb, G, SPECTRA, k)),
        "spectra_cumulative_gather": (margins.GATHER_MB, margins.GATHER_MINUTES),
        "spectra_convergence_gather": (margins.GATHER_MB, margins.GATHER_MINUTES),
    }  # fmt: skip
    single = {
        "cumulative": (spectral_jobs.spectra_mem_mb("spectra_cumulative", d, G, SPECTRA, nb),
                       spectral_jobs.spectra_runtime_min("spectra_cumulative", d, nb, G, SPECTRA)),
        "convergence": (spectral_jobs.spectra_mem_mb("spectra_convergence", d, G, SPECTRA, nb),
                        spectral_jobs.spectra_runtime_min("spectra_convergence", d, nb, G, SPECTRA)),
    }  # fmt: skip
    seen = {}
    for j in jobs:
        if j["rule"] in want:
            res = (int(j["resources"]["mem_mb"]), int(j["resources"]["runtime"]))
            expect = want[j["rule"]]
            assert res == (expect(int(j["wildcards"]["subset"])) if callable(expect) else expect), j["rule"]
            stage = j["rule"].split("_")[1]
            assert res[0] < single[stage][0] and res[1] < single[stage][1], (j["rule"], res, single[stage])
            seen[j["rule"]] = seen.get(j["rule"], 0) + 1
    assert seen == {"spectra_cumulative_variant": 2, "spectra_convergence_subset": 4,
                    "spectra_cumulative_gather": 1, "spectra_convergence_gather": 1}  # fmt: skip


def test_variant_and_subset_resources_are_a_share_of_the_single_jobs():
    """Two variants' jobs hold together at least the two-variant job's chains and ask for at least its time (they
    read J̄ and form Δ each); the subset jobs' times add up to the single job's (one size each, a larger one longer)."""
    from schema_defaults import SPECTRA

    from layergeom.resources import margins, spectral_jobs

    G, nb = SPECTRA["n_groups"], 64
    for d in (4096, 8192):  # above the MIN_MINUTES floor
        one = spectral_jobs.spectra_bytes("spectra_cumulative", d, G, SPECTRA)
        var = spectral_jobs.cumulative_variant_bytes(d, G, SPECTRA)
        assert one > var > one / 2
        t_one = spectral_jobs.spectra_runtime_min("spectra_cumulative", d, nb, G, SPECTRA)
        t_var = spectral_jobs.cumulative_variant_runtime_min(d, nb)
        assert t_var < t_one <= 2 * t_var + 1
        n_sizes = spectral_jobs.convergence_subsets(G, nb, SPECTRA)
        t_conv = spectral_jobs.spectra_runtime_min("spectra_convergence", d, nb, G, SPECTRA)
        t_sub = [spectral_jobs.convergence_subset_runtime_min(d, nb, G, SPECTRA, k) for k in range(n_sizes)]
        assert n_sizes == 4 and abs(sum(t_sub) - t_conv) <= n_sizes and t_sub == sorted(t_sub)  # larger S: longer
        assert spectral_jobs.convergence_subset_mem_mb(d, G, SPECTRA, nb) < spectral_jobs.spectra_mem_mb(
            "spectra_convergence", d, G, SPECTRA, nb
        )
    assert spectral_jobs.convergence_subsets(1, nb, SPECTRA) == 1  # one group: one job writing the empty table
    assert spectral_jobs.cumulative_variant_mem_mb(None, G, SPECTRA) == margins.MIN_MB


@pytest.mark.dag
def test_a_fanned_run_writes_the_one_jobs_cumulative_and_convergence_bytes(tmp_path):
    """tiny-gpt2's cumulative.tsv and convergence.tsv through the one jobs, then (the tables moved aside) through
    the variant and subset jobs and their gathers in the same folder (the scripts as the rules call them): only
    those run, and the tables are the same bytes."""
    targets = ["results/tiny-gpt2/init/cumulative.tsv", "results/tiny-gpt2/init/convergence.tsv"]
    run, one = tmp_path / "run", tmp_path / "one"  # run: _jobs' folder
    _jobs(tmp_path, None)  # writes tmp_path/config.yaml, the default
    snakemake(run, *targets, config=tmp_path / "config.yaml")
    out = run / "results" / "tiny-gpt2" / "init"
    one.mkdir()
    for t in targets:
        (run / t).rename(one / os.path.basename(t))
    fanned = _jobs(tmp_path, {"spectra": {"boundaries_per_job": 1}}, target=targets[0])  # now tmp_path/config.yaml
    assert sorted(j["rule"] for j in fanned) == ["spectra_cumulative_gather"] + ["spectra_cumulative_variant"] * 2
    res = snakemake(run, *targets, config=tmp_path / "config.yaml")
    ran = sorted(re.findall(r"Rule: (spectra_(?:cumulative|convergence)\w*)", res.stdout + res.stderr))
    n_sizes = ran.count("spectra_convergence_subset")
    assert ran == sorted(
        ["spectra_cumulative_gather", "spectra_convergence_gather"]
        + ["spectra_cumulative_variant"] * 2
        + ["spectra_convergence_subset"] * n_sizes
    ), ran
    assert n_sizes >= 2
    for t in targets:
        name = os.path.basename(t)
        assert (out / name).read_bytes() == (one / name).read_bytes(), name
    assert sorted(p.name for p in (out / "parts" / "cumulative").iterdir()) == ["full.npz", "update.npz"]
