"""The four Paper B spectral figures draw from the tables the workflow writes (PNG and PDF)."""

from __future__ import annotations

import numpy as np

from layergeom.io import write_tsv
from layergeom.plots import spectral as plots
from layergeom.spectral import cumulative, schur, spectra


def test_draw_every_figure(tmp_path):
    rng = np.random.default_rng(0)
    names = [f"L{l}.{k}" for l in range(3) for k in ("attn", "mlp")]
    settings = {
        "model": "m",
        "label": "M",
        "checkpoints": ["trained", "init"],
        "boundaries": names,
        "n_layers": 3,
        "spectra": {"eigen_boundaries": [], "cumulative_variant": "update", "complex_tol": 1e-9},
    }
    inputs = {f: [] for f in ("eigenvalues", "gradient", "cumulative", "schur")}
    for ck in settings["checkpoints"]:
        mats = {n: rng.standard_normal((8, 8)) / 3 for n in names}
        decs = {}
        tables = {
            "gradient": spectra.spectra_table(mats, {n: 4 for n in names}, decompositions=decs),
            "cumulative": cumulative.cumulative_table(mats),
            "schur": schur.schur_surgery(mats, alphas=[0, 0.5, 1]),
        }
        tables["eigenvalues"] = spectra.eigenvalue_table(decs)
        for fig, table in tables.items():
            path = tmp_path / f"{ck}_{fig}.tsv"
            write_tsv(table, path)
            inputs[fig].append(str(path))
    for fig, paths in inputs.items():
        png, pdf = tmp_path / f"{fig}.png", tmp_path / f"{fig}.pdf"
        plots.draw(fig, paths, settings, png, pdf)
        assert png.stat().st_size > 10_000 and pdf.read_bytes()[:4] == b"%PDF"
    assert plots.default_eigen_boundaries(names) == ["L0.attn", "L1.mlp", "L2.mlp"]
