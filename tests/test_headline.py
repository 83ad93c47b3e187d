"""bench/headline.py: the README's headline table from a run's tables, and --check catching a changed number.

One test builds a run's tables by hand (fast); the other reads the shared run of the test config.
"""

from __future__ import annotations

import csv
import json
import statistics

import forked
import numpy as np
import pandas as pd
from conftest import ROOT, load_script

from layergeom.io import write_tsv
from layergeom.spectral.trends import trends_table

pytest_plugins = ["lg_runs"]

SCRIPT = ROOT / "bench" / "headline.py"
headline = load_script(SCRIPT)


def run(*args) -> forked.Result:
    return forked.run(path=SCRIPT, args=args, timeout=300)  # `python bench/headline.py args`, started forked


def rows_of(md: str) -> dict[str, list[str]]:
    """Markdown table -> label: cells (an independent parse of the printed table)."""
    out = {}
    for line in md.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        out[cells[0]] = cells[1:]
    return out


def read_rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def fake_run(root, rng) -> dict:
    """results/m/{trained,init}/ with every table the headline reads; returns the numbers it should print."""
    res = root / "results"
    write_tsv(pd.DataFrame({"checkpoint": ["trained", "init"]}), res / "m" / "checkpoints.tsv")
    expect = {}
    for ck in ("trained", "init"):
        d = res / "m" / ck
        (d / "tokenwise").mkdir(parents=True)
        (d / "manifest.json").write_text(json.dumps({"d_model": 16}))
        rows = []
        for layer in range(6):
            for kind in ("attn", "mlp"):
                v = rng.random()
                rows.append({"boundary": f"L{layer}.{kind}", "layer": layer, "kind": kind, "numerical_rank": 8,
                             "cond": 10 + 10 * v, "cond_full": 3e9, "sr_k": 4, "henrici": v, "henrici_ci_low": v - 0.01,
                             "henrici_ci_high": v + 0.01, "self_realign": 1 - v, "frac_complex": 0.5})  # fmt: skip
        sp = pd.DataFrame(rows)
        write_tsv(sp, d / "spectra.tsv")
        write_tsv(trends_table(sp, level=0.95, seed=0), d / "trends.tsv")
        cum = pd.DataFrame({"variant": ["update", "update", "full", "full"], "depth": [1, 2, 1, 2],
                            "erank": [9.0, 3.25, 12.0, 11.75], "erank_ci_low": [8, 3.0, 11, 11.5],
                            "erank_ci_high": [10, 3.5, 13, 12.0]})  # fmt: skip
        write_tsv(cum, d / "cumulative.tsv")
        schur = pd.DataFrame({"variant": ["update", "full", "update", "full"], "alpha": [0.0, 0.0, 1.0, 1.0],
                              "control": "none", "depth": 2, "erank": [1.5, 40.0, 3.25, 11.75],
                              "erank_ci_low": [1.0, 39.0, 3, 11], "erank_ci_high": [2.0, 41.0, 3.5, 12]})  # fmt: skip
        write_tsv(schur, d / "schur.tsv")
        sig = [True, True, False, True] + [False] * 8
        co = pd.DataFrame(
            {
                "boundary": sp["boundary"],
                "layer": sp["layer"],
                "kind": sp["kind"],
                "rho": 0.3,
                "p_value": 0.01,
                "significant": sig,
                "significant_layer": [True] * 2 + [False] * 10,
            }
        )
        write_tsv(co, d / "coupling.tsv")
        write_tsv(pd.DataFrame({"class": ["lowrank", "orthogonal", "mlp"], "spearman_rho": [0.434, 0.5, 0.9]}),
                  d / "tokenwise" / "pooled.tsv")  # fmt: skip
        tw = pd.DataFrame({"layer": [0, 1, 2], "class": "lowrank", "angle_res_deg": [50.0, 53.2, 70.0],
                           "angle_tok_deg": [30.0, 40.4, 41.0]})  # fmt: skip
        write_tsv(tw, d / "tokenwise.tsv")
        expect[ck] = {"cond": statistics.median(10 + 10 * r["henrici"] for r in rows if r["kind"] == "attn")}
    return expect


def test_headline_of_a_constructed_run(tmp_path):
    expect = fake_run(tmp_path, np.random.default_rng(0))
    res = run(tmp_path / "results")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "| | trained | init |" and lines[1] == "|---|---|---|"
    rows = rows_of(res.stdout)
    assert rows["numerical rank of every attention J̄_b"] == ["8 of 16", "8 of 16"]
    cond = rows["condition number of attention J̄_b over its non-zero modes (median)"]
    assert cond[0] == f"{expect['trained']['cond']:.1f} (σ₁/σ_d ~1e9)"
    assert rows["cumulative erank at full depth, `update` (products of J̄_b)"] == ["3.2 [3.0, 3.5]"] * 2  # 3.25: even
    assert rows["after Schur surgery at α = 0, `update` / `full`"] == ["1.5 [1.0, 2.0] / 40.0 [39.0, 41.0]"] * 2
    coupling = rows["FDR-significant coupling layers: any boundary (boundaries) / per-layer test"]
    assert coupling == ["2 of 6 (3 of 12) / 1 of 6"] * 2
    assert rows["ρ(RelErr, KL) pooled over layers: low-rank / orthogonal / MLP class"] == ["0.43 / 0.50 / 0.90"] * 2
    angle = "angle of the residual / of the tokenwise part to the update (low-rank, median over layers)"
    assert rows[angle] == ["53° / 40°"] * 2
    for kind in ("attention", "MLP"):  # per kind, in the same words for both checkpoints
        label = f"Henrici departure, {kind}: first / middle / last third (mean); slope per unit depth"
        assert label in rows and all("slope" in c for c in rows[label])
    assert "self-realignment SR₄, MLP: first / middle / last third (mean); slope per unit depth" in rows
    h = pd.read_csv(tmp_path / "results/m/trained/trends.tsv", sep="\t").set_index(["kind", "metric"])
    r = h.loc[("attn", "henrici")]
    cell = rows["Henrici departure, attention: first / middle / last third (mean); slope per unit depth"][0]
    assert cell.startswith(f"{r['first_third']:.3f} [{r['first_third_ci_low']:.3f}, {r['first_third_ci_high']:.3f}]")
    assert f"slope {r['slope']:+.3f}".replace("-", "−") in cell


def _readme(tmp_path, table: str):
    p = tmp_path / "README.md"
    p.write_text(f"# x\n\n## What the embedded model shows\n\nSome words.\n\n{table}\nMore words.\n\n## Next\n")
    return p


def test_check_catches_a_changed_number(tmp_path):
    fake_run(tmp_path, np.random.default_rng(1))
    table = run(tmp_path / "results").stdout
    ok = run(tmp_path / "results", "--check", _readme(tmp_path, table))
    assert ok.returncode == 0, ok.stderr
    bad = table.replace("2 of 6 (3 of 12)", "3 of 6 (3 of 12)", 1)
    res = run(tmp_path / "results", "--check", _readme(tmp_path, bad))
    assert res.returncode == 1
    assert "row 'FDR-significant coupling layers: any boundary (boundaries) / per-layer test' differs" in res.stderr
    dropped = "\n".join(line for line in table.splitlines() if "Schur" not in line) + "\n"
    res = run(tmp_path / "results", "--check", _readme(tmp_path, dropped))
    assert res.returncode == 1 and "row 'after Schur surgery at α = 0, `update` / `full`' is missing" in res.stderr
    res = run(tmp_path / "results", "--check", _readme(tmp_path, table + "| an old claim | 1 | 2 |\n"))
    assert res.returncode == 1 and "row 'an old claim' is not a number of the run" in res.stderr
    res = run(tmp_path / "nowhere")
    assert res.returncode == 2 and res.stderr.count("\n") == 1  # one line naming the problem


def test_headline_of_the_test_run(reference_run, tmp_path):
    """The tables for the test config's two-checkpoint model, the numbers against the run's files read with the
    csv module and the claims against its claims.tsv, and --check passing on them and failing on one changed
    number."""
    results = reference_run / "results"
    res = run(results, "--model", "tiny-llama")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "| | init | init-b |"
    rows = rows_of(res.stdout)
    assert not [label for label, cells in rows.items() if "n/a" in cells and "Schur" not in label]
    for j, ck in enumerate(("init", "init-b")):
        d = results / "tiny-llama" / ck
        cum = [r for r in read_rows(d / "cumulative.tsv") if r["variant"] == "update"]
        last = max(cum, key=lambda r: int(r["depth"]))
        cell = rows["cumulative erank at full depth, `update` (products of J̄_b)"][j]
        assert cell.startswith(f"{float(last['erank']):.1f}")
        co = read_rows(d / "coupling.tsv")
        n_layers = len({r["layer"] for r in co})
        any_layer = len({r["layer"] for r in co if r["significant"] == "true"})
        per_layer = len({r["layer"] for r in co if r["significant_layer"] == "true"})
        n_sig = sum(r["significant"] == "true" for r in co)
        assert rows["FDR-significant coupling layers: any boundary (boundaries) / per-layer test"][j] == (
            f"{any_layer} of {n_layers} ({n_sig} of {len(co)}) / {per_layer} of {n_layers}"
        )
        sp = [r for r in read_rows(d / "spectra.tsv") if r["kind"] == "attn"]
        ranks = {int(r["numerical_rank"]) for r in sp}
        d_model = json.loads((d / "manifest.json").read_text())["d_model"]
        if len(ranks) == 1:
            assert rows["numerical rank of every attention J̄_b"][j] == f"{ranks.pop()} of {d_model}"
    for kind in ("attention", "MLP"):
        assert f"Henrici departure, {kind}: first / middle / last third (mean); slope per unit depth" in rows
    label = "cumulative erank at full depth, `update` (products of J̄_b)"
    line = next(line for line in res.stdout.splitlines() if line.startswith(f"| {label} |"))
    cells = line.split(" | ")
    cells[1] = "999.9" + cells[1][cells[1].index(" ") :] if " " in cells[1] else "999.9"
    claims = run(results, "--model", "tiny-llama", "--claims")
    assert claims.returncode == 0, claims.stderr
    assert claims.stdout.splitlines()[0] == "| | init | init-b | — vs init |"
    both = _two_tables(tmp_path, res.stdout, claims.stdout, model="tiny-llama")
    assert run(results, "--model", "tiny-llama", "--check", both).returncode == 0
    changed = _two_tables(tmp_path, res.stdout.replace(line, " | ".join(cells)), claims.stdout, model="tiny-llama")
    bad = run(results, "--model", "tiny-llama", "--check", changed)
    assert bad.returncode == 1 and f"row '{label}' differs" in bad.stderr
    claim_rows = rows_of(claims.stdout)
    table = read_rows(results / "tiny-llama" / "claims.tsv")
    for r in table:
        scope = " · ".join(x for x in (r["kind"], r["class"], r["variant"]) if x)
        label = f"`{r['claim']}`" + (f" {scope}" if scope else "")
        col = ["init", "init-b", "— vs init"].index(f"{r['checkpoint'] or '—'} vs {r['baseline']}" if r["baseline"]
                                                    else r["checkpoint"])  # fmt: skip
        assert claim_rows[label][col].startswith(r["verdict"].replace("_", " ")), (label, col)
    tally = claim_rows["verdicts: holds / fails / reversed / inconclusive / not applicable"]
    assert sum(int(n) for cell in tally for n in cell.split(" / ")) == len(table)


# ---- the claims table (results/{model}/claims.tsv) -----------------------------------------------------------------
def fake_claims(root) -> None:
    """A claims.tsv of three rows for the constructed run: a per-kind slope, a pair, a count."""
    from layergeom.claims.table import COLUMNS

    base = dict.fromkeys(COLUMNS, "")
    base.update(model="m", paper="B", estimate=np.nan, ci_low=np.nan, ci_high=np.nan, reference=np.nan)
    table = pd.DataFrame([
        {**base, "checkpoint": "init", "claim": "B2.henrici_falls", "kind": "attn", "estimate": -0.001,
         "ci_low": -0.002, "ci_high": 0.0, "verdict": "inconclusive", "reason": "r"},
        {**base, "checkpoint": "trained", "claim": "B2.henrici_falls", "kind": "attn", "estimate": -0.1834,
         "ci_low": -0.2951, "ci_high": -0.0802, "verdict": "holds", "reason": "r"},
        {**base, "checkpoint": "trained", "baseline": "init", "claim": "B5.coupling_grows", "estimate": 21.0,
         "reference": 0.0, "compared_with": "init", "verdict": "holds", "reason": "r"},
    ])[COLUMNS]  # fmt: skip
    write_tsv(table, root / "results" / "m" / "claims.tsv")


def _two_tables(tmp_path, numbers: str, claims: str, model: str = "m"):
    p = tmp_path / "README.md"
    p.write_text(f"# x\n\n## What the embedded model shows\n\n{numbers}\n### The papers' claims: {model}\n\nWords.\n\n"
                 f"{claims}\nMore words.\n\n## Next\n")  # fmt: skip
    return p


def test_claims_table_check_and_update(tmp_path):
    fake_run(tmp_path, np.random.default_rng(2))
    fake_claims(tmp_path)
    claims = res = run(tmp_path / "results", "--claims")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "| | init | trained | trained vs init |"
    rows = rows_of(res.stdout)
    assert rows["`B2.henrici_falls` attn"] == ["inconclusive −0.00100 [−0.00200, 0.00]", "holds −0.183 [−0.295, −0.0802]",
                                              ""]  # fmt: skip
    assert rows["`B5.coupling_grows`"] == ["", "", "holds 21 (init 0)"]
    assert rows["verdicts: holds / fails / reversed / inconclusive / not applicable"] == [
        "0 / 0 / 0 / 1 / 0", "1 / 0 / 0 / 0 / 0", "1 / 0 / 0 / 0 / 0"]  # fmt: skip
    numbers = run(tmp_path / "results").stdout
    stale = _two_tables(tmp_path, numbers.replace("2 of 6", "5 of 6", 1), res.stdout.replace("holds 21", "holds 14"))
    assert run(tmp_path / "results", "--check", stale).returncode == 1
    up = run(tmp_path / "results", "--update", stale)
    assert up.returncode == 0, up.stderr
    text = stale.read_text()
    assert numbers in text and res.stdout in text and text.endswith("More words.\n\n## Next\n")  # in place
    assert run(tmp_path / "results", "--check", stale).returncode == 0
    empty = _two_tables(tmp_path, numbers, "")  # a claims section with no table yet: --update adds one
    assert run(tmp_path / "results", "--check", empty).returncode == 2
    assert run(tmp_path / "results", "--update", empty).returncode == 0
    added = empty.read_text()
    assert added.index("Words.") < added.index(res.stdout) < added.index("## Next")  # at the end of its section
    assert run(tmp_path / "results", "--check", empty).returncode == 0
    bad = run(
        tmp_path / "results",
        "--check",
        _two_tables(tmp_path, numbers, res.stdout.replace("holds −0.183", "fails −0.183")),
    )
    assert bad.returncode == 1 and "row '`B2.henrici_falls` attn' differs" in bad.stderr
    alone = run(tmp_path / "results", "--check", _readme(tmp_path, numbers))  # the README lacks the claims
    assert alone.returncode == 2 and "no heading 'The papers' claims: m'" in alone.stderr
    (tmp_path / "results" / "m" / "claims.tsv").unlink()  # the README has claims the run does not
    res = run(tmp_path / "results", "--check", _two_tables(tmp_path, numbers, claims.stdout))
    assert res.returncode == 1 and "the run has no claims.tsv" in res.stderr
