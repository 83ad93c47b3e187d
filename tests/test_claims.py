"""The papers' claims (layergeom.claims, docs/methods.md §5): each verdict rule on numbers whose answer is known, and
the claims table of a model built by hand from tables constructed so that every verdict is known in advance
(holds, fails, reversed, inconclusive exactly at a threshold, not applicable without init), its estimates checked
against an independent computation from the same files.

The claims of the test config's run, and the rerun scope of the claims keys: tests/test_claims_run.py.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from layergeom import results
from layergeom.claims import verdicts as V
from layergeom.claims.catalogue import CLAIMS
from layergeom.claims.table import COLUMNS, NO_NULL, NO_TRAINED, Settings, gather_claims, model_claims
from layergeom.io import overlapping_texts, read_tsv, write_tsv
from layergeom.spectral.trends import trends_table

H, F, R, I, NA = V.HOLDS, V.FAILS, V.REVERSED, V.INCONCLUSIVE, V.NOT_APPLICABLE
nan = math.nan


# ---- the verdict rules -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "kw", "want"),
    [
        ((0.7, 0.6, 0.8, 0.5, +1), {"opposite": 0.0}, H),
        ((0.55, 0.5, 0.6, 0.5, +1), {"opposite": 0.0}, I),  # the interval's end exactly at the threshold
        ((0.45, 0.4, 0.5, 0.5, +1), {"opposite": 0.0}, I),  # touching from below
        ((0.5, 0.5, 0.5, 0.5, +1), {}, I),  # a point exactly at it
        ((0.3, 0.2, 0.4, 0.5, +1), {"opposite": 0.0}, F),  # below the threshold, not below the opposite
        ((-0.3, -0.4, -0.2, 0.5, +1), {"opposite": 0.0}, R),
        ((0.3, 0.2, 0.4, 0.5, +1), {}, F),  # no opposite claim: never reversed
        ((-0.2, -0.3, -0.1, 0.0, -1), {"opposite": 0.0}, H),  # a claim that the value is below
        ((0.2, 0.1, 0.3, 0.0, -1), {"opposite": 0.0}, R),
        ((0.0, 0.0, 0.1, 0.0, -1), {"opposite": 0.0}, I),
        ((0.7, nan, nan, 0.5, +1), {}, I),  # no interval
        ((nan, nan, nan, 0.5, +1), {}, NA),  # no estimate
    ],
)
def test_threshold_rule(args, kw, want):
    v = V.threshold(*args, **kw)
    assert v.verdict == want, v
    assert v.reason and "\n" not in v.reason


@pytest.mark.parametrize(
    ("a", "b", "side", "want"),
    [
        ((3.7, 3.4, 4.0), (12.6, 10.1, 15.6), -1, H),
        ((3.7, 3.4, 4.0), (12.6, 10.1, 15.6), +1, R),
        ((3.7, 3.4, 4.0), (4.5, 4.0, 5.0), -1, I),  # touching intervals overlap
        ((3.7, 3.4, 4.0), (3.8, 3.5, 4.1), -1, I),
        ((3.7, nan, nan), (12.6, 10.1, 15.6), -1, I),
        ((nan, nan, nan), (12.6, 10.1, 15.6), -1, NA),
    ],
)
def test_apart_rule(a, b, side, want):
    assert V.apart(a, b, side).verdict == want


@pytest.mark.parametrize(
    ("trained", "null", "want"),
    [
        ((-0.18, -0.30, -0.08), (-0.001, -0.002, 0.0), H),  # apart, and the trained slope itself below 0
        ((0.15, 0.02, 0.28), (-0.003, -0.004, -0.002), R),  # apart the other way
        ((0.02, 0.01, 0.03), (0.2, 0.15, 0.25), F),  # training lowered it, but the trained slope is still > 0
        ((-0.01, -0.05, 0.03), (0.2, 0.15, 0.25), F),  # ... or flat
        ((-0.1, -0.2, 0.0), (-0.05, -0.1, 0.0), I),  # overlapping intervals
    ],
)
def test_learned_rule(trained, null, want):
    assert V.learned(trained, null, -1).verdict == want


@pytest.mark.parametrize(
    ("a0", "orders", "a1", "want"),
    [
        ((157.6, 154.7, 160.6), (155.9, 157.9), (102.3, 101.4, 103.2), H),
        ((1.1, 0.9, 1.2), (2.9, 4.6), (3.7, 3.4, 4.0), I),  # canonical below, the orders reach α = 1
        ((1.1, 0.9, 1.2), (1.0, 3.3), (3.7, 3.4, 4.0), R),  # every order below α = 1's interval
        ((157.6, 154.7, 160.6), (100.0, 157.9), (102.3, 101.4, 103.2), I),  # one order under α = 1's upper end
        ((157.6, 154.7, 160.6), (103.2, 157.9), (102.3, 101.4, 103.2), I),  # ... exactly at it
        ((157.6, 154.7, 160.6), (nan, nan), (102.3, 101.4, 103.2), I),  # no order range: never holds
        ((110.0, 102.0, 118.0), (150.0, 160.0), (102.3, 101.4, 103.2), I),  # intervals overlap
        ((nan, nan, nan), (1.0, 2.0), (102.3, 101.4, 103.2), NA),
    ],
)
def test_schur_rule_holds_only_over_the_whole_order_range(a0, orders, a1, want):
    assert V.schur_raises(a0, orders, a1).verdict == want


def test_count_and_sign_rules():
    assert V.none_significant(0, 30).verdict == H and V.none_significant(2, 30).verdict == F
    assert [V.count_grows(b, a).verdict for a, b in ((0, 14), (14, 0), (3, 3))] == [H, R, F]
    pos, neg = (0.3, 0.2, 0.4), (-0.3, -0.4, -0.2)
    assert V.sign_follows((0.6, 0.5, 0.7), pos, neg).verdict == H
    assert V.sign_follows((0.2, 0.1, 0.3), (0.5, 0.4, 0.6), (0.3, 0.2, 0.4)).verdict == F  # higher, both positive
    assert V.sign_follows((-0.6, -0.7, -0.5), neg, pos).verdict == R
    assert V.sign_follows((0.1, -0.1, 0.3), pos, neg).verdict == I


# ---- a model's tables, built so that every verdict is known ------------------------------------------------------
L = 9  # layers
N_ANCHORS = 40
CLASSES = ("diag", "lowrank", "orthogonal", "mlp", "identity")


def _spectra(trained: bool) -> pd.DataFrame:
    """Trained: attention's Henrici falls and its SR rises with depth, the MLP's run the other way by as much (so
    pooled there is no gradient), most attention modes complex, most MLP modes real. Init: flat, with a wiggle
    symmetric about mid-depth (an OLS slope of exactly 0)."""
    rows = []
    for layer in range(L):
        x = layer / (L - 1)
        wiggle = 0.005 * math.cos(2 * math.pi * x)
        for kind in ("attn", "mlp"):
            s = -1 if kind == "attn" else +1
            h = 0.8 + s * 0.2 * (x - 0.5) + wiggle if trained else 0.9 + wiggle
            sr = 0.3 - s * 0.2 * (x - 0.5) + wiggle if trained else 0.11 + wiggle
            fc = (0.93 if kind == "attn" else 0.30) if trained else 0.93
            rows.append({"boundary": f"L{layer}.{kind}", "layer": layer, "kind": kind,
                         "henrici": h, "henrici_ci_low": h - 0.001, "henrici_ci_high": h + 0.001,
                         "self_realign": sr, "self_realign_ci_low": sr - 0.001, "self_realign_ci_high": sr + 0.001,
                         "frac_complex": fc, "frac_complex_ci_low": fc - 0.01, "frac_complex_ci_high": fc + 0.01})  # fmt: skip
    return pd.DataFrame(rows)


ERANK = {  # (checkpoint, variant): (depth 1, full depth, α = 0 at full depth, α = 0's order range)
    ("trained", "update"): ((100, 95, 105), (3.7, 3.4, 4.0), (1.1, 0.9, 1.2), (2.9, 4.6)),
    ("trained", "full"): ((400, 390, 410), (115.5, 114.5, 116.5), (157.6, 154.7, 160.6), (155.9, 157.9)),
    ("init", "update"): ((100, 95, 105), (12.6, 10.1, 15.6), (17.8, 16.0, 19.0), (17.1, 17.9)),
    ("init", "full"): ((400, 390, 410), (116.0, 115.0, 117.0), (257.5, 255.7, 259.3), (nan, nan)),
}
RHO = {"diag": (0.55, 0.5, 0.6), "lowrank": (0.8, 0.7, 0.9), "orthogonal": (0.3, 0.2, 0.4), "mlp": (-0.3, -0.4, -0.2),
       "identity": (0.9, 0.8, 1.0)}  # fmt: skip


def _anchor_rows(layer: int, rng) -> list[dict]:
    """Per class: lowrank's residual peaks mid-depth, mlp's dips there (smaller than every other class's), the
    others' grow with depth; orthogonal's residual angle is exactly 60°, mlp's residual projects more than u."""
    x = layer / (L - 1)
    bump = math.sin(math.pi * x)
    relerr = {"diag": 0.4 + 0.1 * x, "lowrank": 0.3 + 0.1 * bump, "orthogonal": 0.35 + 0.1 * x,
              "mlp": 0.2 - 0.1 * bump, "identity": 0.9}  # fmt: skip
    angle = {"diag": 70.0, "lowrank": 70.0, "orthogonal": 60.0, "mlp": 45.0, "identity": 90.0}
    rows = []
    for cls in CLASSES:
        for a in range(N_ANCHORS):
            noise = 0.01 * rng.standard_normal(4) if cls != "orthogonal" else np.zeros(4)
            rows.append({"layer": layer, "class": cls, "anchor": a, "row": 100 * a,
                         "cos_full_tok": 0.9 + noise[0], "cos_full_res": 0.3 + noise[1],
                         "cos_full_tok_abs": 0.99, "cos_full_res_abs": 0.2 if cls != "mlp" else 0.995,
                         "angle_res_deg": angle[cls] + 100 * noise[2], "proj_full": 0.5,
                         "proj_res": 0.6 if cls == "mlp" else 0.1, "relerr": relerr[cls] + noise[3]})  # fmt: skip
    return rows


def build_model(root, checkpoints=("trained", "init"), missing=()) -> object:
    """results/m/{checkpoint}/ with every table the claims read (but the files in `missing`); returns results/m."""
    rng = np.random.default_rng(0)
    model = root / "results" / "m"
    for ck in checkpoints:
        d = model / ck
        (d / "tokenwise").mkdir(parents=True)
        (d / "manifest.json").write_text(json.dumps({"d_model": 16, "revision": None}))
        trained = not ck.startswith("init")
        sp = _spectra(trained)
        write_tsv(sp, d / "spectra.tsv")
        write_tsv(trends_table(sp, level=0.95, seed=0), d / "trends.tsv")
        key = "trained" if trained else "init"
        cum, sch = [], []
        for v in ("update", "full"):
            one, full, a0, orders = ERANK[(key, v)]
            for depth, e in ((1, one), (2 * L, full)):
                cum.append({"variant": v, "depth": depth, "erank": e[0], "erank_ci_low": e[1], "erank_ci_high": e[2]})
            for alpha, e, o in ((0.0, a0, orders), (1.0, full, (full[0], full[0]))):
                sch.append({"alpha": alpha, "control": "none", "depth": 2 * L, "erank": e[0], "erank_ci_low": e[1],
                            "erank_ci_high": e[2], "variant": v, "erank_order_min": o[0], "erank_order_max": o[1]})  # fmt: skip
        write_tsv(pd.DataFrame(cum), d / "cumulative.tsv")
        write_tsv(pd.DataFrame(sch), d / "schur.tsv")
        near = sp["henrici"] < np.median(sp["henrici"])
        sig = np.array([trained and layer % 2 == 0 for layer in sp["layer"]])  # layers 0, 2, 4, 6, 8 when trained
        co = pd.DataFrame({"boundary": sp["boundary"], "layer": sp["layer"], "kind": sp["kind"],
                           "rho": np.where(near, 0.3, -0.3) + 0.02 * rng.standard_normal(len(sp)),
                           "p_value": 0.5, "q_value": 0.5, "significant": sig, "significant_layer": sig,
                           "operator": np.where(near, "near-symmetric", "non-normal")})  # fmt: skip
        write_tsv(co, d / "coupling.tsv")
        pooled = pd.DataFrame([{"class": c, "n": 360, "spearman_rho": r[0], "rho_ci_low": r[1], "rho_ci_high": r[2]}
                               for c, r in RHO.items()])  # fmt: skip
        write_tsv(pooled, d / "tokenwise" / "pooled.tsv")
        for layer in range(L):
            write_tsv(pd.DataFrame(_anchor_rows(layer, rng)), d / "tokenwise" / f"L{layer}.tsv")
        for name in missing:
            (d / name).unlink()
    return model


def verdicts(table: pd.DataFrame, claim: str, by: str = "kind", checkpoint: str | None = None) -> dict:
    t = table[table["claim"] == claim]
    if checkpoint is not None:
        t = t[t["checkpoint"] == checkpoint]
    return dict(zip(t[by], t["verdict"]))


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    model = build_model(tmp_path_factory.mktemp("claims"))
    return model_claims(model, ["trained", "init"], ["init"], Settings(n_boot=400)), model


def test_every_claim_has_rows_with_the_documented_columns(table):
    t, _ = table
    assert list(t.columns) == COLUMNS
    assert set(t["claim"]) == {c.id for c in CLAIMS}
    assert set(t["verdict"]) <= set(V.VERDICTS)
    assert t["reason"].str.len().min() > 0 and not t["reason"].str.contains("\n").any()
    assert list(dict.fromkeys(t["claim"])) == [c.id for c in CLAIMS]  # the catalogue's order
    per_ck = t[t["baseline"] == ""]
    assert list(dict.fromkeys(per_ck["checkpoint"])) == ["init", "trained"]  # the null model first on the axis


def test_paper_b_gradients_per_kind_and_pooled(table):
    """Attention follows the gradient, the MLP runs the other way, pooled there is none; init is flat; so the
    learned claim holds for attention, is reversed for the MLP and is inconclusive pooled."""
    t, model = table
    for claim in ("B2.henrici_falls", "B1.realign_rises"):
        assert verdicts(t, claim, checkpoint="trained") == {"attn": H, "mlp": R, "pooled": I}
        assert verdicts(t, claim, checkpoint="init") == {"attn": I, "mlp": I, "pooled": I}
        assert verdicts(t, f"{claim}_learned") == {"attn": H, "mlp": R, "pooled": I}
    assert verdicts(t, "B1.rotation_early", checkpoint="trained") == {"attn": H, "mlp": R, "pooled": H}
    # estimates against an independent computation: the OLS slope of the boundaries against layer/(L − 1)
    sp = read_tsv(model / "trained" / "spectra.tsv")
    row = t[(t["claim"] == "B2.henrici_falls") & (t["checkpoint"] == "trained")].set_index("kind")
    for kind, part in [("attn", sp[sp["kind"] == "attn"]), ("mlp", sp[sp["kind"] == "mlp"]), ("pooled", sp)]:
        slope = np.polyfit(part["layer"] / (L - 1), part["henrici"], 1)[0]
        assert row.loc[kind, "estimate"] == pytest.approx(slope, rel=1e-9, abs=1e-12)
        assert row.loc[kind, "ci_low"] <= row.loc[kind, "estimate"] <= row.loc[kind, "ci_high"]
    early = t[(t["claim"] == "B1.rotation_early") & (t["checkpoint"] == "trained")].set_index("kind")
    assert early.loc["pooled", "estimate"] == pytest.approx((0.93 + 0.30) / 2)  # first third, both kinds


def test_paper_b_cumulative_schur_and_coupling(table):
    t, _ = table
    assert verdicts(t, "B3.erank_collapse", "variant", "trained") == {"update": H, "full": H}
    assert verdicts(t, "B3.collapse_learned", "variant") == {"update": H, "full": I}
    assert verdicts(t, "B4.schur_dissolves", "variant", "trained") == {"update": I, "full": H}
    assert verdicts(t, "B4.schur_dissolves", "variant", "init") == {"update": H, "full": I}
    schur = t[t["claim"] == "B4.schur_dissolves"].set_index(["checkpoint", "variant"])
    assert "reach α = 1's interval" in schur.loc[("trained", "update"), "reason"]
    assert "no eigenvalue-order range" in schur.loc[("init", "full"), "reason"]
    assert (schur.loc[("trained", "update"), ["estimate", "reference"]].tolist()) == [1.1, 3.7]
    absent = t[t["claim"] == "B5.coupling_absent_init"]
    assert absent[["checkpoint", "verdict", "estimate"]].values.tolist() == [["init", H, 0]]
    grows = t[t["claim"] == "B5.coupling_grows"].iloc[0]
    assert (grows["checkpoint"], grows["baseline"], grows["verdict"], grows["estimate"]) == ("trained", "init", H, 5)
    assert grows["reason"] == "init 0 → trained 5"
    assert verdicts(t, "B5.coupling_sign_operator", "checkpoint") == {"init": NA, "trained": H}


def test_paper_a_claims_and_their_estimates(table):
    t, model = table
    trained = t[t["checkpoint"] == "trained"]
    assert verdicts(trained, "A1.tokenwise_aligned", "class") == dict.fromkeys(
        ("diag", "lowrank", "orthogonal", "mlp"), H
    )  # no control class
    # mlp's residual is the more aligned in the absolute convention: 0.99 − 0.995 on every anchor
    assert verdicts(trained, "A1.tokenwise_aligned_abs", "class") == {"diag": H, "lowrank": H, "orthogonal": H,
                                                                      "mlp": R}  # fmt: skip
    # the residual's angle: exactly at 60° is inconclusive (an interval of width 0 at the threshold)
    assert verdicts(trained, "A2.residual_angle", "class") == {"diag": H, "lowrank": H, "orthogonal": I, "mlp": F,
                                                               "all": H}  # fmt: skip
    assert verdicts(trained, "A3.residual_projects_less", "class") == {"diag": H, "lowrank": H, "orthogonal": H,
                                                                       "mlp": R}  # fmt: skip
    # ρ against 0.5: diag's interval starts exactly at it
    assert verdicts(trained, "A4.rho_relerr_kl", "class") == {"diag": I, "lowrank": H, "orthogonal": F, "mlp": R}
    assert verdicts(trained, "A5.expressive_smaller_residual", "class") == dict.fromkeys(
        ("diag", "lowrank", "orthogonal"), H
    )
    assert verdicts(trained, "A5.expressive_weaker_rho", "class") == dict.fromkeys(("diag", "lowrank", "orthogonal"), H)
    assert verdicts(trained, "A6.middle_largest_residual", "class") == {"diag": F, "lowrank": H, "orthogonal": F,
                                                                        "mlp": R}  # fmt: skip
    # the estimate of A1 from the per-anchor files, independently: layer means, their difference, the median
    frames = pd.concat([pd.read_csv(p, sep="\t") for p in sorted((model / "trained" / "tokenwise").glob("L*.tsv"))])
    lowrank = frames[frames["class"] == "lowrank"].groupby("layer")[["cos_full_tok", "cos_full_res"]].mean()
    want = float(np.median(lowrank["cos_full_tok"] - lowrank["cos_full_res"]))
    row = trained[(trained["claim"] == "A1.tokenwise_aligned") & (trained["class"] == "lowrank")].iloc[0]
    assert row["estimate"] == pytest.approx(want, rel=1e-12)
    assert row["ci_low"] < want < row["ci_high"] and row["ci_level"] == 0.95


def test_inconclusive_exactly_at_a_configured_threshold(tmp_path):
    """The same ρ interval [0.7, 0.9] against a threshold at its lower end, just below it and inside it."""
    model = build_model(tmp_path, checkpoints=("trained",))
    got = {}
    for thr in (0.7, 0.6999, 0.75):
        t = model_claims(model, ["trained"], [], Settings(n_boot=50, rho_threshold=thr))
        got[thr] = verdicts(t, "A4.rho_relerr_kl", "class")["lowrank"]
        assert t[t["claim"] == "A4.rho_relerr_kl"]["statement"].iloc[0].endswith(f"exceeds {thr:g}")
    assert got == {0.7: I, 0.6999: H, 0.75: I}


def test_without_init_the_learned_claims_are_not_applicable(tmp_path):
    model = build_model(tmp_path, checkpoints=("trained",))
    t = model_claims(model, ["trained"], [], Settings(n_boot=50))
    assert set(t["claim"]) == {c.id for c in CLAIMS}  # nothing dropped
    for claim in ("B1.realign_rises_learned", "B2.henrici_falls_learned", "B3.collapse_learned", "B5.coupling_grows",
                  "B5.coupling_absent_init"):  # fmt: skip
        rows = t[t["claim"] == claim]
        assert len(rows) and (rows["verdict"] == NA).all() and (rows["reason"] == NO_NULL).all(), claim
    assert verdicts(t, "B2.henrici_falls_learned") == {"attn": NA, "mlp": NA, "pooled": NA}
    assert (t.loc[t["claim"] == "B2.henrici_falls", "verdict"] != NA).all()  # the per-checkpoint claims stand


def test_without_a_trained_checkpoint_the_pairs_are_not_applicable(tmp_path):
    model = build_model(tmp_path, checkpoints=("init", "init-b"))
    t = model_claims(model, ["init", "init-b"], ["init", "init-b"], Settings(n_boot=50))
    pairs = t[t["claim"].isin(["B2.henrici_falls_learned", "B3.collapse_learned", "B5.coupling_grows"])]
    assert len(pairs) == 3 + 2 + 1 and (pairs["verdict"] == NA).all() and (pairs["reason"] == NO_TRAINED).all()
    assert set(pairs["checkpoint"]) == {""} and set(pairs["baseline"]) == {"init"}
    assert verdicts(t, "B5.coupling_absent_init", "checkpoint") == {"init": H, "init-b": H}


def test_missing_tables_keep_their_claims(tmp_path):
    model = build_model(tmp_path, missing=("schur.tsv", "coupling.tsv", "tokenwise/pooled.tsv", "trends.tsv"))
    t = model_claims(model, ["trained", "init"], ["init"], Settings(n_boot=50))
    assert set(t["claim"]) == {c.id for c in CLAIMS}
    for claim in ("B4.schur_dissolves", "B5.coupling_absent_init", "B5.coupling_sign_operator", "B5.coupling_grows",
                  "A4.rho_relerr_kl", "A5.expressive_weaker_rho"):  # fmt: skip
        rows = t[t["claim"] == claim]
        assert (rows["verdict"] == NA).all() and rows["reason"].str.startswith("no ").all(), claim
    # without trends.tsv the per-kind trends are missing, the pooled ones come from spectra.tsv
    assert verdicts(t, "B2.henrici_falls", checkpoint="trained") == {"attn": NA, "mlp": NA, "pooled": I}
    learned = t[t["claim"] == "B2.henrici_falls_learned"].set_index("kind")
    assert learned.loc["attn", "reason"] == "no trends.tsv row for attn at trained and init"
    assert learned.loc["pooled", "verdict"] == I


def test_the_table_round_trips_and_loads_across_models(table, tmp_path):
    t, _ = table
    res = tmp_path / "results"
    for m in ("a", "b"):
        write_tsv(t.assign(model=m), res / m / "claims.tsv")
    both = gather_claims([res / "a" / "claims.tsv", res / "b" / "claims.tsv"])
    assert list(both["model"].unique()) == ["a", "b"] and len(both) == 2 * len(t)
    loaded = results.load("claims", res)
    assert list(loaded.columns[:3]) == ["model", "checkpoint", "step"] and len(loaded) == 2 * len(t)
    assert loaded[loaded["model"] == "a"]["verdict"].tolist() == t["verdict"].tolist()
    assert "claims" in results.available(res)


def test_the_verdict_grid(table):
    from layergeom.plots.claims import grid, plot_verdict_grid

    t, _ = table
    rows, cols, cells = grid(t)
    assert cols == [("m", "init"), ("m", "trained"), ("m", "trained vs init")]
    assert ("B2.henrici_falls", "attn") in rows and ("A2.residual_angle", "all") in rows
    assert cells[(("B2.henrici_falls", "mlp"), ("m", "trained"))]["verdict"] == R
    fig = plot_verdict_grid(t)
    assert overlapping_texts(fig) == []
    texts = [x.get_text() for x in fig.axes[0].texts]
    assert len(texts) == len(t)  # one cell per row of the table
    assert any(x.startswith("✓ 5") and "init: 0" in x for x in texts)  # a count with what it is compared with


def test_the_command_reads_a_finished_run(tmp_path, capsys):
    """python -m layergeom.claims on a results folder: checkpoints from checkpoints.tsv, the null model from the
    manifests (source: init), the schema's thresholds; the same table as the rule's function."""
    from layergeom.claims.__main__ import main

    model = build_model(tmp_path)
    write_tsv(pd.DataFrame({"checkpoint": ["trained", "init"]}), model / "checkpoints.tsv")
    (model / "init" / "manifest.json").write_text(json.dumps({"source": "init", "revision": "seed=0"}))
    assert main([str(tmp_path / "results"), "--out", str(tmp_path / "out")]) == 0
    assert "claims (" in capsys.readouterr().out
    got = read_tsv(tmp_path / "out" / "m" / "claims.tsv")
    want = model_claims(model, ["trained", "init"], ["init"], Settings())
    assert got["verdict"].tolist() == want["verdict"].tolist()
    assert np.allclose(got["estimate"], want["estimate"], equal_nan=True)
    assert main([str(tmp_path / "nowhere")]) == 2
