"""Paper B topology figures: one correlation graph by community, coupling ρ against depth, significant counts."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

N_COLOURED = 10  # the largest communities get their own colour, the rest are grey


def graph_layout(n_nodes: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, seed: int = 0) -> np.ndarray:
    """(n, 2) Fruchterman-Reingold layout of the positive layer (igraph), from seeded initial positions."""
    import igraph as ig

    g = ig.Graph(n=n_nodes, edges=np.column_stack([src, dst]).tolist())
    start = np.random.default_rng(seed).uniform(-1, 1, size=(n_nodes, 2))
    layout = g.layout_fruchterman_reingold(weights=list(map(float, weight)), seed=start.tolist(), niter=500)
    return np.asarray(layout.coords, dtype=np.float64)


def plot_community_graph(nodes: pd.DataFrame, edges: pd.DataFrame, title: str, seed: int = 0):
    """One boundary's positive-edge graph, nodes coloured by signed-Leiden community, boundary nodes ringed."""
    pos_edges = edges[edges["r"] > 0]
    xy = graph_layout(len(nodes), pos_edges["source"].to_numpy(), pos_edges["target"].to_numpy(), pos_edges["r"], seed)
    fig, ax = plt.subplots(figsize=(6.5, 6.5))
    segs = np.stack([xy[pos_edges["source"]], xy[pos_edges["target"]]], axis=1)  # (m, 2, 2)
    ax.add_collection(LineCollection(segs, colors="0.55", linewidths=0.3, alpha=0.25, zorder=1))
    comm = nodes["community"].to_numpy()
    sizes = np.bincount(comm)
    rank = np.argsort(np.argsort(-sizes, kind="stable"), kind="stable")[comm]  # 0 = the largest community
    cmap = plt.get_cmap("tab10")
    colours = np.where(rank[:, None] < N_COLOURED, cmap(np.minimum(rank, 9)), (0.75, 0.75, 0.75, 1.0))
    bnd = nodes["boundary"].to_numpy(dtype=bool)
    ax.scatter(xy[~bnd, 0], xy[~bnd, 1], s=9, c=colours[~bnd], linewidths=0, zorder=2)
    ax.scatter(xy[bnd, 0], xy[bnd, 1], s=26, c=colours[bnd], edgecolors="black", linewidths=0.7, zorder=3)
    ax.autoscale()
    ax.set_aspect("equal")
    ax.axis("off")
    n_neg = int((edges["r"] < 0).sum())
    ax.set_title(
        f"{title}\n{len(nodes)} units, {len(sizes)} communities, {len(pos_edges)} positive edges drawn "
        f"({n_neg} negative not drawn)",
        fontsize=9,
    )
    handles = [
        Line2D([], [], marker="o", ls="", color=cmap(i), label=f"community {i + 1} ({np.sort(sizes)[::-1][i]})")
        for i in range(min(N_COLOURED, len(sizes)))
    ]
    handles.append(Line2D([], [], marker="o", ls="", mfc="white", mec="black", label="boundary node"))
    ax.legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


def plot_coupling_rho(tables: dict[str, pd.DataFrame], title: str):
    """ρ(participation, amplification) against layer, one line per checkpoint, one panel per operator kind.

    Filled markers: FDR-significant boundaries; hollow: not significant.
    """
    kinds = list(dict.fromkeys(k for t in tables.values() for k in t["kind"]))
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.2 * len(kinds), 3.4), sharey=True, squeeze=False)
    colours = plt.get_cmap("viridis")(np.linspace(0, 0.9, max(len(tables), 1)))
    for ax, kind in zip(axes[0], kinds):
        for colour, (ckpt, t) in zip(colours, tables.items()):
            t = t[t["kind"] == kind].sort_values("layer")
            sig = t["significant"].to_numpy(dtype=bool)
            ax.plot(t["layer"], t["rho"], "-", color=colour, lw=1.2, label=ckpt)
            ax.scatter(t["layer"][sig], t["rho"][sig], color=colour, s=22, zorder=3)
            ax.scatter(t["layer"][~sig], t["rho"][~sig], facecolors="white", edgecolors=colour, s=22, zorder=3)
        ax.axhline(0, color="0.5", lw=0.6)
        ax.set_title(kind, fontsize=9)
        ax.set_xlabel("layer")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0, 0].set_ylabel("Spearman ρ(P, a)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    handles += [
        Line2D([], [], marker="o", ls="", color="0.3", label="FDR-significant"),
        Line2D([], [], marker="o", ls="", mfc="white", mec="0.3", label="not significant"),
    ]
    axes[0, -1].legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_significant_counts(counts: pd.DataFrame):
    """Bars of the fraction of FDR-significant layers per checkpoint, grouped by model, annotated k / L."""
    models = list(dict.fromkeys(counts["model"]))
    fig, ax = plt.subplots(figsize=(max(4.0, 0.7 * len(counts) + 1.5 * len(models)), 3.6))
    x, ticks, labels = 0.0, [], []
    for model in models:
        sub = counts[counts["model"] == model]
        xs = x + np.arange(len(sub))
        frac = sub["n_significant_layers"] / sub["n_layers"]
        ax.bar(xs, frac, color=plt.get_cmap("viridis")(np.linspace(0, 0.9, len(sub))), width=0.8)
        for xi, f, (_, row) in zip(xs, frac, sub.iterrows()):
            ax.text(xi, f, f"{row['n_significant_layers']}/{row['n_layers']}", ha="center",
                    va="bottom", fontsize=7)  # fmt: skip
        ax.text(xs.mean(), -0.32, model, transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=8)
        ticks += list(xs)
        labels += list(sub["checkpoint"])
        x = xs[-1] + 2.0
    ax.set_xticks(ticks, labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("FDR-significant layers / L")
    ax.set_ylim(0, 1.1)
    fig.tight_layout()
    return fig
