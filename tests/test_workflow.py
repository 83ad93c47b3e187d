"""The workflow itself: the whole DAG on the tiny test config, in a scratch working directory."""

from __future__ import annotations

import csv
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import ROOT, TEST_CONFIG
from lg_runs import SNAKEMAKE, snakemake

from layergeom import names

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


def _table_rows() -> dict[str, tuple[str, str]]:
    """docs/outputs.md's table of per-checkpoint tables: file -> (columns cell, further columns cell)."""
    text = (ROOT / "docs" / "outputs.md").read_text()
    section = text.split("## Per model and checkpoint", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0].endswith(".tsv`"):
            out[cells[0].strip("`")] = (cells[2], cells[3])
    return out


def documented_columns() -> dict[str, list[str]]:
    """docs/outputs.md: the per-checkpoint tables and every column its table names (both column cells)."""
    return {
        table: [n for n in re.findall(r"`([a-z_]+)`", cols + " " + more) if not n.endswith("_v")]
        for table, (cols, more) in _table_rows().items()
    }


@dataclass
class Columns:
    """The columns docs/outputs.md allows in one table: names, patterns and suffixes that copy any of them."""

    names: set[str] = field(default_factory=set)
    patterns: list[str] = field(default_factory=list)  # regular expressions
    suffixes: list[str] = field(default_factory=list)  # `_abs`: a copy of any allowed column
    required: set[str] = field(default_factory=set)  # names every such table has (checked here for the files
    # the bullets describe; test_docs_outputs_columns_exist checks the table of per-checkpoint tables)

    def allows(self, col: str) -> bool:
        if col in self.names or any(re.fullmatch(p, col) for p in self.patterns):
            return True
        return any(col.endswith(s) and self.allows(col[: -len(s)]) for s in self.suffixes)


def _columns(text: str, metrics: set[str] = frozenset()) -> Columns:
    """Every backticked name in `text`: a column (`rho`), a suffix (`_abs`), a per-variant column (`rho_v`, for
    each v of "v ∈ {...}"), or a pattern (`proj_{full,tok,res}_k{K}`: K a number; `b_{metric}`: a metric of
    `metrics`)."""
    cols = Columns()
    variants = re.search(r"v ∈ \{([^}]*)\}", text)
    variants = re.findall(r"`([a-z_]+)`", variants.group(1)) if variants else []
    for tok in re.findall(r"`([^`]+)`", text):
        if re.fullmatch(r"_[a-z]+", tok):
            cols.suffixes.append(tok)
        elif re.fullmatch(r"[a-z][a-z0-9_]*_v", tok) and variants:
            cols.patterns.append(re.escape(tok[:-1]) + "(" + "|".join(variants) + ")")
        elif re.fullmatch(r"[a-z][a-z0-9_]*", tok):
            cols.names.add(tok)
        elif re.fullmatch(r"[a-z_]*(\{[a-zA-Z,]+\}[a-z_]*)+", tok):
            cols.patterns.append(re.sub(r"\{([a-zA-Z,]+)\}", lambda m: _placeholder(m.group(1), metrics), tok))
    return cols


def _placeholder(inner: str, metrics: set[str]) -> str:
    """`{a,b}` -> one of them; `{K}` -> a number; `{metric}` -> one of `metrics`."""
    if "," in inner:
        return "(" + "|".join(map(re.escape, inner.split(","))) + ")"
    if inner == "K":
        return r"\d+"
    assert inner == "metric" and metrics, f"docs/outputs.md: unknown placeholder {{{inner}}}"
    return "(" + "|".join(map(re.escape, sorted(metrics))) + ")"


def _bullet(text: str, start: str, end: str) -> Columns:
    """The columns named in docs/outputs.md from `start` to the next `end` (one file's description in a bullet),
    each required."""
    assert start in text, f"docs/outputs.md no longer says {start!r}"
    cols = _columns(text.split(start, 1)[1].split(end, 1)[0])
    cols.required = set(cols.names)
    return cols


def documented_tables() -> dict[str, Columns]:
    """Every table of a run, as a regular expression of its path under results/, -> the columns docs/outputs.md
    allows in it."""
    text = (ROOT / "docs" / "outputs.md").read_text()
    rows = _table_rows()
    spectra = _columns(" ".join(rows["spectra.tsv"])).names - {"boundary", "layer", "kind"}  # its metrics
    ck = r"[^/]+/[^/]+/"  # {model}/{checkpoint}/
    b = r"L\d+\.[a-z]+"  # a boundary
    out = {ck + re.escape(table): _columns(" ".join(cells), spectra) for table, cells in rows.items()}
    tw = out[ck + re.escape("tokenwise.tsv")]
    per_anchor = _bullet(text, "- `tokenwise/L{layer}.tsv` —", "`tokenwise/kl.tsv`")
    per_anchor.names |= tw.names
    per_anchor.patterns += tw.patterns
    per_anchor.suffixes += tw.suffixes
    per_kind = _bullet(text, "`training_dynamics.tsv` (", "\n\n")
    kind_cols = {n for n in per_kind.names if n.endswith("_k")}  # "then per boundary kind k `henrici_early_k`"
    per_kind.names -= kind_cols
    per_kind.required -= kind_cols
    per_kind.patterns += [re.escape(n[:-1]) + "(" + "|".join(names.KINDS) + ")" for n in sorted(kind_cols)]
    out.update({
        ck + r"tokenwise/L\d+\.tsv": per_anchor,
        ck + r"tokenwise/kl\.tsv": _bullet(text, "`tokenwise/kl.tsv` —", ";"),
        ck + r"tokenwise/anchors\.tsv": _bullet(text, "`tokenwise/anchors.tsv` —", ";"),
        ck + r"tokenwise/pooled\.tsv": _bullet(text, "`tokenwise/pooled.tsv` —", "\n- "),
        ck + rf"graphs/{b}\.tsv": _bullet(text, "- `graphs/{boundary}.tsv` —", "`{boundary}.edges.tsv`"),
        ck + rf"graphs/{b}\.edges\.tsv": _bullet(text, "`{boundary}.edges.tsv` —", ";"),
        ck + rf"graphs/{b}\.sweep\.tsv": _bullet(text, "`{boundary}.sweep.tsv` —", "\n- "),
        ck + rf"jacobians/{b}\.tsv": _bullet(text, "`{boundary}.tsv` — per-sample summaries", "of the"),
        r"[^/]+/checkpoints\.tsv": _bullet(text, "- `checkpoints.tsv` —", "\n- "),
        r"[^/]+/training\.tsv": Columns(),  # loss curves: no columns promised (and no train model in test.yaml)
        r"[^/]+/training_dynamics\.tsv": per_kind,
        r"figures/coupling_significant_layers\.tsv": _bullet(text, "(with its `.tsv`:", "`training_"),
        r"[^/]+/claims\.tsv": _bullet(text, "- `claims.tsv` —", "\n\n"),
        r"claims\.tsv": _bullet(text, "- `claims.tsv` —", "\n\n"),  # results/claims.tsv: the same columns
    })  # fmt: skip
    return out


def undocumented_columns(results: Path) -> list[str]:
    """Every table under `results` whose header has a column docs/outputs.md does not name (or lacks one that a
    bullet of it names), or that no entry of it describes; one line each."""
    tables = documented_tables()
    problems = []
    for path in sorted(results.rglob("*.tsv")):
        rel = path.relative_to(results)
        if any(part.startswith(".") for part in rel.parts):
            continue  # the temporaries of an interrupted atomic write
        matches = [cols for pattern, cols in tables.items() if re.fullmatch(pattern, rel.as_posix())]
        if not matches:
            problems.append(f"{rel}: a table docs/outputs.md does not describe")
            continue
        assert len(matches) == 1, f"{rel}: more than one entry of documented_tables matches"
        with open(path) as f:
            header = f.readline().rstrip("\n").split("\t")
        extra = [c for c in header if not matches[0].allows(c)]
        if extra:
            problems.append(f"{rel}: columns not in docs/outputs.md: {extra}")
        missing = sorted(matches[0].required - set(header))
        if missing:
            problems.append(f"{rel}: columns docs/outputs.md names but the table lacks: {missing}")
    return problems


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


def test_every_output_column_is_documented(reference_run):
    """The other way: every column of every table of the test run is in docs/outputs.md (so a new column is
    documented with it), and every table is one docs/outputs.md describes."""
    problems = undocumented_columns(reference_run / "results")
    assert not problems, "\n".join(problems)


def test_the_documented_columns_check_can_fail(tmp_path):
    """undocumented_columns finds a new column in a documented table, a missing one, and an undocumented table."""
    (tmp_path / "m" / "c" / "graphs").mkdir(parents=True)
    (tmp_path / "m" / "c" / "trends.tsv").write_text("kind\tmetric\tslope\n")
    (tmp_path / "m" / "c" / "tokenwise.tsv").write_text("layer\tproj_full_k4\tproj_tok_k16_abs\tkl_abs\n")
    (tmp_path / "m" / "c" / "schur.tsv").write_text("alpha\tb_henrici\tb_sr_k\n")
    (tmp_path / "m" / "c" / "coupling.tsv").write_text("boundary\trho_self\tsignificant_update\n")
    node_cols = ["node", "community", "participation", "boundary", "degree", "degree_pos", "degree_neg",
                 "strength_pos", "strength_neg"]  # fmt: skip
    (tmp_path / "m" / "c" / "graphs" / "L0.attn.tsv").write_text("\t".join(node_cols) + "\n")
    assert undocumented_columns(tmp_path) == []
    (tmp_path / "m" / "c" / "trends.tsv").write_text("kind\tmetric\tslope\tslope_new\n")
    (tmp_path / "m" / "c" / "schur.tsv").write_text("alpha\tb_nope\n")
    (tmp_path / "m" / "c" / "coupling.tsv").write_text("boundary\trho_other\n")
    (tmp_path / "m" / "c" / "graphs" / "L0.attn.tsv").write_text("\t".join(node_cols[:4] + ["centrality"]) + "\n")
    (tmp_path / "m" / "c" / "new.tsv").write_text("a\n")
    problems = "\n".join(undocumented_columns(tmp_path))
    for bad in ("slope_new", "b_nope", "rho_other", "centrality", "lacks: ['degree', 'degree_neg'", "new.tsv: a table"):
        assert bad in problems, bad


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


@pytest.mark.dag
def test_config_typo_stops_before_any_job(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "config" / "test.yaml").read_text().replace("window_tokens:", "window_tokns:"))
    res = snakemake(tmp_path / "wd", "-n", config=bad, check=False)
    assert res.returncode != 0
    out = res.stdout + res.stderr  # snakemake prints the WorkflowError on either stream
    assert "corpus" in out and "window_tokns" in out and "invalid configuration" in out
    assert not (tmp_path / "wd" / "results").exists()


@pytest.mark.dag
def test_default_config_dry_run(tmp_path):
    """The default DAG (embedded SmolLM2, trained + init) builds without touching the network."""
    res = subprocess.run([*SNAKEMAKE, "-d", str(tmp_path), "-n", "--cores", "2"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "materialize" in res.stdout


@pytest.mark.dag
def test_corpus_too_short_fails_cleanly(tmp_path):
    cfg = (ROOT / "config" / "test.yaml").read_text().replace("n_windows: 24", "n_windows: 100000")
    (tmp_path / "c.yaml").write_text(cfg)
    wd = tmp_path / "wd"
    res = snakemake(wd, "results/tiny-llama/windows.npz", config=tmp_path / "c.yaml", check=False)
    assert res.returncode != 0
    log = (wd / "logs" / "windows" / "tiny-llama.log").read_text()
    assert "enough for only" in log
    assert not (wd / "results" / "tiny-llama" / "windows.npz").exists()
