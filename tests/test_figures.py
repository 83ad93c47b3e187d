"""Figures a reader can read: no two texts of any figure of the test run overlap once drawn."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from conftest import TEST_CONFIG  # noqa: E402

from layergeom.io import overlapping_texts, save_figure  # noqa: E402

pytest_plugins = ["lg_runs"]


def test_overlap_check_finds_overlapping_labels():
    """The check itself: two labels drawn on top of each other are reported, apart they are not."""
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.text(0.1, 0.5, "a long label here", transform=ax.transAxes)
    ax.text(0.15, 0.5, "another long label", transform=ax.transAxes)
    assert ("a long label here", "another long label") in overlapping_texts(fig)
    fig2, ax2 = plt.subplots(figsize=(3, 2))
    ax2.text(0.1, 0.2, "a long label here", transform=ax2.transAxes)
    ax2.text(0.1, 0.7, "another long label", transform=ax2.transAxes)
    assert overlapping_texts(fig2) == []
    plt.close("all")


def test_no_figure_of_the_test_run_has_overlapping_text(reference_run):
    """Every figure rule saves through ``io.save_figure``, which logs each pair of overlapping texts."""
    logs = list((reference_run / "logs").rglob("*.log"))
    assert any("figure" in p.parent.name for p in logs), "no figure logs in the test run"
    assert any(m.get("label") for m in TEST_CONFIG["models"].values()), "the test config should exercise a long label"
    found = [f"{p.relative_to(reference_run)}: {line.strip()}" for p in logs for line in p.read_text().splitlines()
             if "overlapping text" in line]  # fmt: skip
    assert not found, "\n".join(found)


def test_a_figure_drawn_again_has_the_same_bytes(tmp_path, monkeypatch):
    """PNG and PDF carry no date of drawing: the same figure saved at two different times is byte-identical (PDF's
    CreationDate would differ by the clock, moved a day on between the two saves)."""
    import time as _time

    def draw(folder):
        folder.mkdir()
        fig, ax = plt.subplots()
        ax.plot([0, 1, 2], [1, 0, 2], label="x")
        ax.legend()
        save_figure(fig, folder / "f.png", folder / "f.pdf")

    draw(tmp_path / "a")
    real = _time.time
    monkeypatch.setattr(_time, "time", lambda: real() + 86400)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(int(real()) + 86400))
    draw(tmp_path / "b")
    for name in ("f.png", "f.pdf"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
