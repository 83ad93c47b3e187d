"""The Paper B spectral figures and the convergence figures draw from the tables the workflow writes."""

from __future__ import annotations

import numpy as np
import pandas as pd
from schema_defaults import SPECTRA, schur_surgery, tol
from test_spectral import cumulative_table, spectra_row_with_intervals

from layergeom.io import write_tsv
from layergeom.plots import convergence as conv_plots
from layergeom.plots import spectral as plots
from layergeom.spectral import intervals, spectra
from layergeom.tokenwise.convergence import tokenwise_convergence


def test_draw_every_figure(tmp_path):
    rng = np.random.default_rng(0)
    names = [f"L{l}.{k}" for l in range(3) for k in ("attn", "mlp")]
    settings = {
        "model": "m",
        "label": "M",
        "checkpoints": ["trained", "init"],
        "boundaries": names,
        "n_layers": 3,
        "spectra": {"eigen_boundaries": [], "cumulative_variant": "update"},
    }
    inputs = {f: [] for f in ("eigenvalues", "gradient", "cumulative", "schur", "convergence")}
    counts = np.full(6, 4)
    reps = intervals.replicates(counts)
    for ck in settings["checkpoints"]:
        mats = {n: rng.standard_normal((8, 8)) / 3 for n in names}
        groups = {n: (M[None] + 0.02 * rng.standard_normal((6, 8, 8))).astype(np.float32) for n, M in mats.items()}
        devs = {n: intervals.deviations(mats[n], groups[n], counts, reps) for n in names}
        rows = [spectra_row_with_intervals(n, mats[n], 24, devs[n], reps.weights, SPECTRA["sr_k"]) for n in names]
        eig = [spectra.eigenvalue_frame(n, spectra.decompose(mats[n]), tol(8)) for n in names]
        metrics = ["henrici_early", "erank_middle", "cumulative_erank_update"]
        tables = {
            "gradient": spectra.order_columns(pd.DataFrame(rows)),
            "cumulative": cumulative_table(mats, deviations=devs, weights=reps.weights),
            "schur": schur_surgery(mats, alphas=[0, 0.5, 1], deviations=devs, weights=reps.weights),
            "eigenvalues": pd.concat(eig, ignore_index=True),
            "convergence": pd.DataFrame(
                [
                    {"metric": m, "n_samples": n, "value": 1.0 + 1 / n, "ci_low": 1.0, "ci_high": 1 + 2 / n}
                    for m in metrics
                    for n in (6, 12, 24, 48)
                ]  # fmt: skip
            ),
        }
        for fig, table in tables.items():
            path = tmp_path / f"{ck}_{fig}.tsv"
            write_tsv(table, path)
            inputs[fig].append(str(path))
    for fig, paths in inputs.items():
        png, pdf = tmp_path / f"{fig}.png", tmp_path / f"{fig}.pdf"
        plots.draw(fig, paths, settings, png, pdf)
        assert png.stat().st_size > 10_000 and pdf.read_bytes()[:4] == b"%PDF"
    assert plots.default_eigen_boundaries(names) == ["L0.attn", "L1.mlp", "L2.mlp"]


def test_tokenwise_convergence_table_and_figure(tmp_path):
    rng = np.random.default_rng(1)
    n_anchors, layers, windows = 40, 3, 10
    rows, tables = [], []
    for layer in range(layers):
        t = []
        for cls in ("diag", "lowrank"):
            for a in range(n_anchors):
                relerr = rng.random()
                rows.append({"layer": layer, "class": cls, "anchor": a, "row": a, "window": a % windows,
                             "position": 5, "relerr": relerr, "relerr_delta": relerr,
                             "kl": relerr + 0.3 * rng.random()})  # fmt: skip
                t.append({"layer": layer, "class": cls, "anchor": a, "angle_res_deg": 60 + 10 * rng.random()})
        tables.append(pd.DataFrame(t))
    anchors = pd.DataFrame(rows)
    conv = tokenwise_convergence(anchors, tables, {"ci_level": 0.95, "bootstrap": 100}, seed=0)
    assert set(conv["metric"]) == {"spearman_rho", "angle_res_deg"} and set(conv["axis"]) == {"anchors", "windows"}
    assert (conv.groupby(["metric", "class", "axis"])["n"].nunique() >= 4).all()
    full = conv[(conv["axis"] == "anchors") & (conv["n"] == n_anchors) & (conv["class"] == "diag")]
    ref = anchors[anchors["class"] == "diag"]
    from scipy import stats

    rho = full[full["metric"] == "spearman_rho"].iloc[0]
    assert rho["value"] == stats.spearmanr(ref["relerr"], ref["kl"]).statistic
    assert rho["ci_low"] < rho["value"] < rho["ci_high"]
    # nested: the anchors of a smaller subset are among those of a larger one; windows restrict the pool
    win = conv[(conv["axis"] == "windows") & (conv["metric"] == "spearman_rho") & (conv["class"] == "diag")]
    assert win["n_anchors"].is_monotonic_increasing and win["n_windows"].tolist() == sorted(win["n"].tolist())
    path = tmp_path / "c.tsv"
    write_tsv(conv, path)
    conv_plots.draw_tokenwise([str(path), str(path)], ["trained", "init"], "M", tmp_path / "f.png", tmp_path / "f.pdf")
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_convergence_figures_with_one_group_or_one_window_say_so(tmp_path):
    """spectra.n_groups: 1 (or one window) leaves convergence.tsv without rows; n_windows: 1 leaves the tokenwise
    windows axis one point. Both figures are written (a note, or what there is), and the run goes on."""
    import matplotlib.pyplot as plt
    from test_spectral import CONVERGENCE_KW, nonnormal, write_boundary_files

    from layergeom.io import read_tsv
    from layergeom.spectral.jobs.convergence import write_convergence

    mats = {f"L{i}.attn": nonnormal(6, seed=i) / 3 for i in range(2)}
    files = write_boundary_files(tmp_path, mats, G=1)
    write_convergence(files, tmp_path / "conv.tsv", **CONVERGENCE_KW | {"n_edge": 1, "sr_k": 2})
    assert len(read_tsv(tmp_path / "conv.tsv")) == 0
    fig = plots.plot_convergence({"c": read_tsv(tmp_path / "conv.tsv")}, "M")
    assert "one sample group" in " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    plt.close(fig)
    settings = {"model": "m", "checkpoints": ["c"], "spectra": {}}
    plots.draw("convergence", [str(tmp_path / "conv.tsv")], settings, tmp_path / "c.png", tmp_path / "c.pdf")
    assert (tmp_path / "c.pdf").read_bytes()[:4] == b"%PDF"
    rng = np.random.default_rng(2)
    anchors = pd.DataFrame({"layer": 0, "class": "diag", "anchor": np.arange(12), "row": np.arange(12), "window": 0,
                            "position": np.arange(1, 13), "relerr": rng.random(12), "relerr_delta": rng.random(12),
                            "kl": rng.random(12)})  # fmt: skip
    angles = pd.DataFrame({"layer": 0, "class": "diag", "anchor": np.arange(12), "angle_res_deg": rng.random(12)})
    conv = tokenwise_convergence(anchors, [angles], {"ci_level": 0.95, "bootstrap": 50}, seed=0)
    assert conv.loc[conv["axis"] == "windows", "n"].tolist() == [1, 1]  # one window: one point per metric
    write_tsv(conv, tmp_path / "t.tsv")
    conv_plots.draw_tokenwise([str(tmp_path / "t.tsv")], ["c"], "M", tmp_path / "t.png", tmp_path / "t.pdf")
    assert (tmp_path / "t.png").stat().st_size > 10_000
    fig = conv_plots.plot_tokenwise_convergence({"c": conv.iloc[:0]}, "M")  # no rows at all: a note
    assert "nothing to draw" in " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
