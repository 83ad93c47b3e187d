"""The claims of the test config's run (the shared run of tests/lg_runs.py), checked against that run's own tables
read with the csv module, and the rerun scope of the claims keys: a changed threshold reruns the claims jobs and
nothing upstream of them."""

from __future__ import annotations

import copy
import csv

import yaml
from conftest import TEST_CONFIG
from lg_runs import TEST_CONFIG_FILE, snakemake
from test_job_settings import PARAMS, UPSTREAM, scheduled_jobs

from layergeom import results
from layergeom.claims.catalogue import CLAIMS
from layergeom.claims.table import NO_TRAINED
from layergeom.claims.verdicts import VERDICTS

pytest_plugins = ["lg_runs"]


def rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def test_claims_of_the_test_run(reference_run):
    res = reference_run / "results"
    ids = [c.id for c in CLAIMS]
    every = []
    for model, m in TEST_CONFIG["models"].items():
        table = rows(res / model / "claims.tsv")
        every += table
        assert [r["claim"] for r in table] == sorted((r["claim"] for r in table), key=ids.index)
        assert set(r["claim"] for r in table) == set(ids), model  # every claim, none dropped
        assert {r["verdict"] for r in table} <= set(VERDICTS)
        assert all(r["reason"] and r["model"] == model for r in table)
        per_ck = {r["checkpoint"] for r in table if r["claim"] == "B2.henrici_falls"}
        assert per_ck == set(m["checkpoints"]), model
        # the test config's models are random-init: no trained checkpoint for the learned claims
        learned = [r for r in table if r["claim"] in ("B2.henrici_falls_learned", "B3.collapse_learned")]
        assert learned and all(r["verdict"] == "not_applicable" and r["reason"] == NO_TRAINED for r in learned)
        kinds = {r["kind"] for r in table if r["claim"] == "B1.realign_rises"}
        spectra_kinds = {r["kind"] for c in m["checkpoints"] for r in rows(res / model / c / "spectra.tsv")}
        assert kinds == spectra_kinds | {"pooled"}, model
        for ck in m["checkpoints"]:
            d = res / model / ck
            mine = [r for r in table if r["checkpoint"] == ck]
            # the full-depth cumulative erank, as cumulative.tsv has it
            for variant in ("update", "full"):
                cum = [r for r in rows(d / "cumulative.tsv") if r["variant"] == variant]
                last = max(cum, key=lambda r: int(r["depth"]))
                claim = next(r for r in mine if r["claim"] == "B3.erank_collapse" and r["variant"] == variant)
                assert claim["estimate"] == last["erank"]  # the same text: a copied float, or nan for both
                if last["erank"] == "nan":  # a product that vanished (the kv-shared layers of tiny-gemma4)
                    assert claim["verdict"] == "not_applicable" and "vanished" in claim["reason"]
            # the per-kind slopes, as trends.tsv has them
            trends = {r["kind"]: r for r in rows(d / "trends.tsv") if r["metric"] == "henrici"}
            for r in mine:
                if r["claim"] == "B2.henrici_falls" and r["kind"] in trends:
                    assert float(r["estimate"]) == float(trends[r["kind"]]["slope"])
            # coupling at init: its verdict from coupling.tsv's per-layer test
            sig = {r["layer"] for r in rows(d / "coupling.tsv") if r["significant_layer"] == "true"}
            absent = next(r for r in mine if r["claim"] == "B5.coupling_absent_init")
            assert absent["verdict"] == ("holds" if not sig else "fails") and float(absent["estimate"]) == len(sig)
    assert rows(res / "claims.tsv") == every  # results/claims.tsv: the models' tables in config order
    for ext in ("png", "pdf"):
        assert (res / "figures" / f"claims.{ext}").stat().st_size > 0
    loaded = results.load("claims", res)
    assert len(loaded) == len(every) and set(loaded["model"]) == set(TEST_CONFIG["models"])


def test_a_claims_key_reruns_only_the_claims_jobs(reference_run, tmp_path):
    """claims.rho_threshold changed globally reruns every model's claims job (its params) and the table across
    models (its input); set for one model, that model's claims job only (and the table across models)."""
    n_models = len(TEST_CONFIG["models"])
    cases = {"global": ({"claims": {"rho_threshold": 0.6}}, None), "one model": ({}, "tiny-gpt2")}
    for name, (top, one) in cases.items():
        cfg = copy.deepcopy(yaml.safe_load(TEST_CONFIG_FILE.read_text()))
        cfg.update(top)
        if one:
            cfg["models"][one]["overrides"] = {"claims": {"rho_threshold": 0.6}}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        out = snakemake(reference_run, "-n", config=path).stdout
        jobs = [j for j in scheduled_jobs(out, models=True) if j[0] != "all"]  # (the target rule: no job of its own)
        claims = [(m, reasons) for rule, reasons, m in jobs if rule == "claims"]
        assert sorted(r for r, _, _ in jobs) == ["claims"] * (1 if one else n_models) + ["claims_all"], (name, jobs)
        assert all(PARAMS in reasons and set(reasons) <= UPSTREAM | {PARAMS} for _, reasons in claims)
        if one:
            assert [m for m, _ in claims] == [one]
        gather = next(reasons for rule, reasons, _ in jobs if rule == "claims_all")
        assert set(gather) <= UPSTREAM, gather
