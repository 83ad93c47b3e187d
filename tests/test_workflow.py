"""The workflow itself: the whole DAG on the tiny test config, in a scratch working directory."""

from __future__ import annotations

import csv
import json
import subprocess

from conftest import ROOT, TEST_CONFIG
from lg_runs import SNAKEMAKE, snakemake

pytest_plugins = ["lg_runs"]
MANIFEST_KEYS = {"model", "checkpoint", "source", "revision", "weights_sha256", "n_layers", "d_model",
                 "boundaries", "corpus", "n_windows", "window_tokens", "seed", "layergeom_version", "code_id",
                 "torch_version", "transformers_version", "numpy_version", "device", "hub_commit"}  # fmt: skip


def test_full_dag_outputs(reference_run):
    test_run = reference_run
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


REQUIRED_COLUMNS = {
    "tokenwise.tsv": "layer class n_anchors cos_full_tok cos_full_res angle_tok_deg angle_res_deg proj_full proj_res "
    "relerr kl spearman_rho rho_ci_low rho_ci_high",
    "spectra.tsv": "boundary layer kind n_samples numerical_rank cond self_realign henrici frac_expansive frac_complex "
    "asymmetry erank part_ratio "
    + " ".join(
        f"{m}_ci_{s}"
        for m in ("cond", "self_realign", "henrici", "frac_expansive", "frac_complex", "erank")
        for s in ("low", "high")
    ),  # fmt: skip
    "cumulative.tsv": "variant depth boundary erank erank_ci_low erank_ci_high",
    "schur.tsv": "alpha control depth erank erank_ci_low erank_ci_high variant",
    "convergence.tsv": "metric n_samples value ci_low ci_high",
    "coupling.tsv": "boundary layer kind n_communities rho p_value q_value significant n_permutations",
}


def test_output_tables_have_the_documented_columns(reference_run):
    """The paths and columns of docs/outputs.md, which users script against, for every model and checkpoint."""
    for name, m in TEST_CONFIG["models"].items():
        for ck in m["checkpoints"]:
            man = json.loads((reference_run / "results" / name / ck / "manifest.json").read_text())
            for table, cols in REQUIRED_COLUMNS.items():
                with open(reference_run / "results" / name / ck / table) as f:
                    rows = list(csv.DictReader(f, delimiter="\t"))
                assert set(cols.split()) <= set(rows[0]), (name, ck, table)
                if table in ("spectra.tsv", "coupling.tsv"):
                    assert [r["boundary"] for r in rows] == man["boundaries"]
                if table == "coupling.tsv":
                    assert {r["significant"] for r in rows} <= {"true", "false"}
                    # enough permutations that one boundary alone can pass BH (unless stopped early above q)
                    m, q = len(rows), 0.05
                    assert max(int(r["n_permutations"]) for r in rows) >= 2 * m / q or all(
                        float(r["p_value"]) > q for r in rows
                    )
                if table == "schur.tsv":
                    assert {r["variant"] for r in rows} == {"update", "full"}
                if table == "convergence.tsv":
                    sizes = {}
                    for r in rows:
                        sizes.setdefault(r["metric"], set()).add(r["n_samples"])
                    assert min(len(v) for v in sizes.values()) >= min(4, int(man["n_windows"]) - 1)


def documented_columns() -> dict[str, list[str]]:
    """docs/outputs.md: the per-checkpoint tables and every column its table names (both column cells)."""
    import re

    text = (ROOT / "docs" / "outputs.md").read_text()
    section = text.split("## Per model and checkpoint", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0].endswith(".tsv`"):
            names = re.findall(r"`([a-z_]+)`", cells[2] + " " + cells[3])
            out[cells[0].strip("`")] = [n for n in names if not n.endswith("_v")]
    return out


def test_docs_outputs_columns_exist(reference_run):
    """Every table and column that docs/outputs.md names is in every checkpoint's results of the test run."""
    documented = documented_columns()
    assert {"tokenwise.tsv", "spectra.tsv", "cumulative.tsv", "schur.tsv", "coupling.tsv"} <= set(documented)
    values = {"update", "full", "none", "random", "spearman_rho", "angle_res_deg", "anchors", "windows",
              "non-normal", "near-symmetric", "structured", "autodiff", "self",
              "own", "energy_ranks", "_abs"}  # values, a config key and a suffix named in the cells  # fmt: skip
    for name, m in TEST_CONFIG["models"].items():
        for ck in m["checkpoints"]:
            for table, cols in documented.items():
                with open(reference_run / "results" / name / ck / table) as f:
                    header = f.readline().rstrip("\n").split("\t")
                missing = [c for c in cols if c not in header and c not in values]
                assert not missing, (name, ck, table, missing)


def test_nothing_left_to_do(reference_run):
    res = snakemake(reference_run, "-n")
    assert "Nothing to be done" in res.stdout + res.stderr


def test_no_work_folder_is_left_behind(reference_run):
    """The test config snapshots every step of the long jobs (snapshot_minutes: 0): the jobs saved snapshots
    (their logs say so) and removed their work folders once their outputs were in place."""
    assert not sorted(reference_run.rglob(".partial")), "work folders left after a finished run"
    logs = [p.read_text() for p in (reference_run / "logs").rglob("*.log")]
    for what in ("activations", "tokenwise_kl", "spectra", "cumulative", "schur", "convergence"):
        assert any(f"{what}: snapshot after " in t for t in logs), what


def test_config_typo_stops_before_any_job(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "config" / "test.yaml").read_text().replace("window_tokens:", "window_tokns:"))
    res = snakemake(tmp_path / "wd", "-n", config=bad, check=False)
    assert res.returncode != 0
    out = res.stdout + res.stderr  # snakemake prints the WorkflowError on either stream
    assert "corpus" in out and "window_tokns" in out and "invalid configuration" in out
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
