"""Per-kind depth trends of spectra.tsv (trends.tsv) and the per-kind gradient figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from layergeom.io import overlapping_texts, read_tsv, write_tsv
from layergeom.plots import spectral as plots
from layergeom.spectral import trends as tr

METRICS = tr.TREND_METRICS


def spectra_frame(n_layers: int, values: dict[str, callable], half: float = 0.01) -> pd.DataFrame:
    """A spectra.tsv of attn and mlp boundaries whose metric m at relative depth x is values[kind](m, x)."""
    rows = []
    for layer in range(n_layers):
        x = layer / max(n_layers - 1, 1)
        for kind in ("attn", "mlp"):
            row = {
                "boundary": f"L{layer}.{kind}",
                "layer": layer,
                "kind": kind,
                "numerical_rank": 8,
                "sr_baseline": 0.1,
            }
            for m in METRICS:
                v = values[kind](m, x)
                row[m] = v
                lo, hi = (v / (1 + half), v * (1 + half)) if m in tr.LOG_METRICS else (v - half, v + half)
                row[f"{m}_ci_low"], row[f"{m}_ci_high"] = lo, hi
            rows.append(row)
    return pd.DataFrame(rows)


def test_thirds():
    for L, sizes in [(30, (10, 10, 10)), (2, (1, 0, 1)), (4, (1, 2, 1)), (7, (2, 3, 2))]:
        th = tr.depth_thirds(np.arange(L), L)
        assert tuple(int(th[k].sum()) for k in tr.THIRDS) == sizes
        assert not (th["first"] & th["last"]).any()


def test_ols_line_against_polyfit():
    rng = np.random.default_rng(0)
    x, y = rng.random(17), rng.standard_normal(17)
    b, a = tr.ols_line(x, y)
    np.testing.assert_allclose([b, a], np.polyfit(x, y, 1), rtol=1e-12)
    assert np.isnan(tr.ols_line(np.ones(3), y[:3])[0])


def test_exact_lines_per_kind_and_no_pooling():
    """Attention rises (0.2 + 0.5x), the MLP falls (0.7 − 0.5x): pooled, there would be no gradient; per kind
    the slopes are exactly ±0.5 with zero-width bootstrap intervals, and the thirds' means are those of the
    line at the layers of each third. cond = 10^(1 + 2x): slope 2 on the log10 scale."""
    L = 30

    def f(sign):
        return lambda m, x: 10 ** (1 + 2 * x) if m == "cond" else (0.45 + sign * 0.5 * (x - 0.5))

    t = tr.trends_table(spectra_frame(L, {"attn": f(1), "mlp": f(-1)}), level=0.95, seed=0)
    assert t["kind"].tolist() == ["attn"] * len(METRICS) + ["mlp"] * len(METRICS)
    x = np.arange(L) / (L - 1)
    for kind, sign in (("attn", 1), ("mlp", -1)):
        r = t[(t["kind"] == kind) & (t["metric"] == "henrici")].iloc[0]
        assert r["slope"] == pytest.approx(sign * 0.5, abs=1e-12)
        assert r["slope_ci_low"] == pytest.approx(sign * 0.5, abs=1e-9)
        assert r["slope_ci_high"] == pytest.approx(sign * 0.5, abs=1e-9)
        assert r["first_third"] == pytest.approx(np.mean(0.45 + sign * 0.5 * (x[:10] - 0.5)), abs=1e-12)
        assert r["last_third"] == pytest.approx(np.mean(0.45 + sign * 0.5 * (x[20:] - 0.5)), abs=1e-12)
        assert r["first_third_ci_low"] == pytest.approx(r["first_third"] - 0.01, abs=1e-12)
        assert (r["n_boundaries"], r["n_first"], r["n_middle"], r["n_last"]) == (30, 10, 10, 10)
        c = t[(t["kind"] == kind) & (t["metric"] == "cond")].iloc[0]
        assert c["scale"] == "log10" and c["slope"] == pytest.approx(2.0, abs=1e-10)
        assert c["first_third"] == pytest.approx(10 ** np.mean(1 + 2 * x[:10]), rel=1e-10)  # geometric mean
    pooled = 0.5 * (0.5 + -0.5)
    assert pooled == 0  # what one line over both kinds would have said


def test_bootstrap_interval_covers_the_true_slope():
    """y = 1 + 0.3x + N(0, 0.2²) at 30 boundaries: the percentile interval of the pairs bootstrap covers 0.3
    in ≈ 93–95 % of 300 draws (3 binomial standard deviations below 0.93: 0.886)."""
    rng = np.random.default_rng(1)
    x = np.arange(30) / 29
    hits = 0
    for _ in range(300):
        y = 1 + 0.3 * x + 0.2 * rng.standard_normal(30)
        boots = tr.bootstrap_slopes(x, y, tr.N_BOOT, rng)
        lo, hi = np.quantile(boots, [0.025, 0.975])
        hits += lo <= 0.3 <= hi
    assert hits / 300 >= 0.886, hits


def test_sampling_bound_is_attained_by_fully_correlated_errors():
    """Moving every boundary by its half-width h_b in the direction of its weight c_b moves the slope by
    exactly the bound Σ|c_b| h_b; any other move of at most h_b each moves it less."""
    rng = np.random.default_rng(2)
    x, y, h = rng.random(12), rng.random(12), 0.01 + 0.05 * rng.random(12)
    bound = tr.slope_sampling_halfwidth(x, h)
    c = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
    b0 = tr.ols_line(x, y)[0]
    assert tr.ols_line(x, y + h * np.sign(c))[0] - b0 == pytest.approx(bound, rel=1e-10)
    for _ in range(100):
        shift = h * rng.uniform(-1, 1, 12)
        assert abs(tr.ols_line(x, y + shift)[0] - b0) <= bound + 1e-12


def test_small_models_and_bad_input():
    t = tr.trends_table(spectra_frame(2, {"attn": lambda m, x: 1 + x, "mlp": lambda m, x: 2 - x}), level=0.95, seed=0)
    r = t[(t["kind"] == "attn") & (t["metric"] == "henrici")].iloc[0]
    assert r["slope"] == pytest.approx(1.0) and np.isnan(r["slope_ci_low"])  # two boundaries: no interval
    assert np.isnan(r["middle_third"]) and r["n_middle"] == 0
    from layergeom.runtime import LayergeomError

    with pytest.raises(LayergeomError, match="no boundaries"):
        tr.trends_table(pd.DataFrame(columns=["boundary", "layer", "kind", "henrici"]), level=0.95, seed=0)


def test_trends_file_round_trip(tmp_path):
    sp = spectra_frame(6, {"attn": lambda m, x: 5 + x, "mlp": lambda m, x: 5 - x})
    write_tsv(sp, tmp_path / "spectra.tsv")
    t = tr.write_trends(tmp_path / "spectra.tsv", tmp_path / "trends.tsv", level=0.9, seed=3)
    back = read_tsv(tmp_path / "trends.tsv")
    assert list(back.columns) == tr.COLUMNS
    pd.testing.assert_frame_equal(back, t, check_dtype=False)


@pytest.mark.parametrize("n_checkpoints", [2, 9])
def test_gradient_figure_per_kind(tmp_path, n_checkpoints):
    """The figure draws per kind with the trends (as the workflow's rule gives them) and no text overlaps."""
    rng = np.random.default_rng(4)
    cks = ["trained", "init"] if n_checkpoints == 2 else [f"step{10 * i}" for i in range(n_checkpoints)]
    inputs, trend_paths = [], []
    for ck in cks:
        s = rng.random()
        sp = spectra_frame(12, {"attn": lambda m, x, s=s: 0.5 + 0.3 * s * x, "mlp": lambda m, x: 0.6 - 0.2 * x})
        sp["henrici"] += 0.02 * rng.standard_normal(len(sp))
        write_tsv(sp, tmp_path / f"{ck}.spectra.tsv")
        tr.write_trends(tmp_path / f"{ck}.spectra.tsv", tmp_path / f"{ck}.trends.tsv", level=0.95, seed=0)
        inputs.append(str(tmp_path / f"{ck}.spectra.tsv"))
        trend_paths.append(str(tmp_path / f"{ck}.trends.tsv"))
    tables = {ck: read_tsv(p) for ck, p in zip(cks, inputs)}
    trends = {ck: read_tsv(p) for ck, p in zip(cks, trend_paths)}
    fig = plots.plot_gradient(tables, 12, "A long model label, as real runs have", trends)
    assert overlapping_texts(fig) == []
    assert fig.axes[0].get_ylabel() == "attention (attn)"
    if n_checkpoints == 2:  # the rule's entry point to the files (the same drawing at any checkpoint count)
        settings = {"model": "m", "label": "M", "checkpoints": cks, "n_layers": 12, "spectra": {}}
        plots.draw("gradient", inputs + trend_paths, settings, tmp_path / "g.png", tmp_path / "g.pdf")
        assert (tmp_path / "g.png").stat().st_size > 10_000


def test_training_dynamics_per_kind(tmp_path):
    """dynamics.edge_means: attention rising and the MLP falling by the same amount cancel in the pooled
    henrici_early/_late, and the per-kind columns keep them apart (thirds as in trends.tsv)."""
    from layergeom import dynamics

    L = 9
    sp = spectra_frame(L, {"attn": lambda m, x: 0.5 + 0.3 * x, "mlp": lambda m, x: 0.5 - 0.3 * x})
    e = dynamics.edge_means(sp)
    x = np.arange(L) / (L - 1)
    assert e["henrici_early"] == pytest.approx(0.5) and e["henrici_late"] == pytest.approx(0.5)
    assert e["henrici_early_attn"] == pytest.approx(np.mean(0.5 + 0.3 * x[:3]))
    assert e["henrici_late_mlp"] == pytest.approx(np.mean(0.5 - 0.3 * x[6:]))
    assert e["self_realign_late_attn"] == pytest.approx(np.mean(0.5 + 0.3 * x[6:]))


def test_an_unbounded_condition_number_interval_gives_an_unbounded_third(tmp_path):
    """A boundary whose cond interval is unbounded above (cond_ci_high = inf) makes its third's upper end inf,
    and trends.tsv is written with it (the definition includes that infinity); the slope stays finite."""
    from layergeom import io
    from layergeom.spectral import trends

    rows = []
    for layer in range(6):
        for kind in ("attn", "mlp"):
            c = 10.0 + layer
            rows.append({"boundary": f"L{layer}.{kind}", "layer": layer, "kind": kind, "cond": c,
                         "cond_ci_low": c / 2, "cond_ci_high": np.inf if (layer, kind) == (5, "mlp") else 2 * c})  # fmt: skip
    spectra = pd.DataFrame(rows)
    row = trends.trend_row(spectra[spectra["kind"] == "mlp"], "cond", 6, level=0.95, rng=np.random.default_rng(0))
    assert row["last_third_ci_high"] == np.inf and np.isfinite(row["first_third_ci_high"])
    assert np.isfinite(row["slope"]) and np.isfinite(row["slope_sampling_halfwidth"])
    io.write_tsv(pd.DataFrame([{"kind": "mlp", **row}]), tmp_path / "trends.tsv", stage="trends")
