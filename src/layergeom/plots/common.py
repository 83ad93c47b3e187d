"""What the figures share: one colour per checkpoint, one line style per boundary kind, a log axis of subset
sizes, and the figure that says why there is nothing to draw."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

# one line style per boundary kind (names.KIND_ORDER): attention, MLP, per-layer input (Gemma-4), whole block
KIND_STYLE = {"attn": "-", "mlp": "--", "pli": "-.", "block": ":"}


def checkpoint_colours(names) -> dict[str, tuple]:
    cmap = plt.get_cmap("viridis")
    n = max(len(names), 1)
    return {c: cmap(0.85 * i / max(n - 1, 1)) for i, c in enumerate(names)}


def size_axis(ax, sizes: list[int]) -> None:
    """A log x axis labelled at the subset sizes themselves (no minor labels: they crowd on a short axis)."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(sizes))
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def note_figure(title: str, note: str):
    """A figure that says why there is nothing to draw (the run goes on; the tables say the same)."""
    fig, ax = plt.subplots(figsize=(6.6, 2.4))
    ax.axis("off")
    ax.text(0.5, 0.5, note, ha="center", va="center", wrap=True, fontsize=9, transform=ax.transAxes)
    fig.suptitle(title, fontsize=10)
    return fig
