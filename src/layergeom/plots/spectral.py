"""Paper B spectral figures: eigenvalues in the complex plane, the spectral gradient through depth, the
cumulative effective rank and the Schur surgery. Each function takes tables keyed by checkpoint (in
config order) and returns a matplotlib figure; ``draw`` reads the files and writes PNG and PDF."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from ..io import read_tsv, save_figure  # noqa: E402
from ..spectral.spectra import frac_complex  # noqa: E402

# one line style per boundary kind (names.KIND_ORDER): attention, MLP, per-layer input (Gemma-4), whole block
KIND_STYLE = {"attn": "-", "mlp": "--", "pli": "-.", "block": ":"}


def kind_style(kind: str):
    """The line style of a boundary kind (a dense dotted line for a kind without its own)."""
    return KIND_STYLE.get(kind, (0, (1, 1)))


GRADIENT_PANELS = [
    ("cond", "condition number σ₁/σ_d", True),
    ("self_realign", "self-realignment SR_k", False),
    ("henrici", "Henrici departure (normalised)", False),
    ("frac_expansive", "fraction expansive |λ|>1", False),
    ("frac_complex", "fraction complex eigenvalues", False),
]


def checkpoint_colours(names) -> dict[str, tuple]:
    cmap = plt.get_cmap("viridis")
    n = max(len(names), 1)
    return {c: cmap(0.85 * i / max(n - 1, 1)) for i, c in enumerate(names)}


def default_eigen_boundaries(boundaries: list[str]) -> list[str]:
    """Early, middle and late boundaries: the first, middle and last in depth order (deduplicated)."""
    picks = [boundaries[0], boundaries[len(boundaries) // 2], boundaries[-1]]
    return list(dict.fromkeys(picks))


def normalised_depth(layer, n_layers: int):
    """Layer index scaled to [0, 1] (0 for a one-layer model)."""
    return np.asarray(layer, dtype=float) / max(n_layers - 1, 1)


def plot_eigenvalues(tables: dict[str, pd.DataFrame], boundaries: list[str], title: str, complex_tol: float = 1e-9):
    """Eigenvalues of J̄_b in the complex plane with the unit circle; rows = checkpoints, columns = boundaries."""
    nr, nc = len(tables), len(boundaries)
    fig, axes = plt.subplots(nr, nc, figsize=(3.2 * nc, 3.2 * nr), squeeze=False)
    t = np.linspace(0, 2 * np.pi, 400)
    for i, (ck, df) in enumerate(tables.items()):
        for j, b in enumerate(boundaries):
            ax = axes[i, j]
            ev = df[df["boundary"] == b]
            ax.plot(np.cos(t), np.sin(t), color="0.5", lw=0.8, zorder=1)
            ax.axhline(0, color="0.85", lw=0.5, zorder=0)
            ax.axvline(0, color="0.85", lw=0.5, zorder=0)
            ax.scatter(ev["real"], ev["imag"], s=4, color="C0", alpha=0.7, linewidths=0, zorder=2)
            lim = max(1.1, 1.05 * float(ev["abs"].max()) if len(ev) else 1.1)
            ax.set_xlim(-lim, lim)
            ax.set_ylim(-lim, lim)
            ax.set_aspect("equal")
            if len(ev):
                f_c = frac_complex(ev["real"].to_numpy() + 1j * ev["imag"].to_numpy(), complex_tol)
                ax.set_title(f"{ck} · {b}\nρ = {ev['abs'].max():.3g}, complex {100 * f_c:.0f} %", fontsize=8)
            else:
                ax.set_title(f"{ck} · {b}", fontsize=8)
            if i == nr - 1:
                ax.set_xlabel("Re λ", fontsize=8)
            if j == 0:
                ax.set_ylabel("Im λ", fontsize=8)
            ax.tick_params(labelsize=7)
    fig.suptitle(f"{title}: eigenvalues of J̄_b (unit circle in grey)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_gradient(tables: dict[str, pd.DataFrame], n_layers: int, title: str):
    """κ, SR, Henrici, f_exp, f_cplx against normalised depth; one colour per checkpoint, line style per kind."""
    colours = checkpoint_colours(list(tables))
    fig, grid = plt.subplots(2, 3, figsize=(10.5, 6.2))
    axes = grid.ravel()
    kinds_seen: list[str] = []
    for ax, (col, label, logy) in zip(axes, GRADIENT_PANELS):
        for ck, df in tables.items():
            for kind, part in df.groupby("kind", sort=False):
                kinds_seen.append(kind)
                part = part.sort_values("layer")
                x = normalised_depth(part["layer"], n_layers)
                ax.plot(x, part[col], ls=kind_style(kind), color=colours[ck], lw=1.2, marker=".", ms=3)
        if col == "self_realign":
            base = next(iter(tables.values()))["sr_baseline"].iloc[0]
            ax.axhline(base, color="0.6", lw=0.8, ls=(0, (1, 2)))
            ax.text(0.01, base, " random k/d", fontsize=6, color="0.4", va="bottom", transform=ax.get_yaxis_transform())
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel("normalised depth", fontsize=8)
        ax.set_title(label, fontsize=8)
        ax.tick_params(labelsize=7)
    handles = [Line2D([], [], color=c, lw=1.5, label=ck) for ck, c in colours.items()]
    handles += [Line2D([], [], color="k", ls=kind_style(k), label=k) for k in dict.fromkeys(kinds_seen)]
    axes[-1].axis("off")
    axes[-1].legend(handles=handles, fontsize=8, loc="center", frameon=False, title="checkpoint / sublayer")
    fig.suptitle(f"{title}: spectral gradient of J̄_b", fontsize=10)
    fig.tight_layout()
    return fig


def plot_cumulative(tables: dict[str, pd.DataFrame], primary: str, title: str):
    """erank(C_n) against the number of boundaries composed; one panel per variant (primary first)."""
    colours = checkpoint_colours(list(tables))
    variants = list(dict.fromkeys(v for df in tables.values() for v in df["variant"]))
    variants.sort(key=lambda v: v != primary)
    fig, axes = plt.subplots(1, len(variants), figsize=(4.4 * len(variants), 3.4), squeeze=False, sharey=True)
    for ax, variant in zip(axes[0], variants):
        for ck, df in tables.items():
            part = df[df["variant"] == variant].sort_values("depth")
            ax.plot(part["depth"], part["erank"], color=colours[ck], lw=1.4, marker=".", ms=3, label=ck)
        ax.set_yscale("log")
        ax.set_xlabel("depth (boundaries composed)", fontsize=8)
        name = "J̄_b" if variant == "update" else "I + J̄_b"
        ax.set_title(f"C_n = Π {name}" + (" (primary)" if variant == primary else ""), fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0, 0].set_ylabel("effective rank of C_n", fontsize=8)
    axes[0, -1].legend(fontsize=7, frameon=False)
    fig.suptitle(f"{title}: cumulative effective rank", fontsize=10)
    fig.tight_layout()
    return fig


def plot_schur(tables: dict[str, pd.DataFrame], title: str):
    """Per checkpoint: cumulative erank vs depth for each α (own N solid, random control dashed), and at full depth."""
    nr = len(tables)
    fig, axes = plt.subplots(nr, 2, figsize=(9.0, 3.2 * nr), squeeze=False)
    for i, (ck, df) in enumerate(tables.items()):
        alphas = sorted(df["alpha"].unique())
        cmap = plt.get_cmap("plasma")
        col = {a: cmap(0.85 * k / max(len(alphas) - 1, 1)) for k, a in enumerate(alphas)}
        ax = axes[i, 0]
        for (a, control), part in df.groupby(["alpha", "control"], sort=True):
            part = part.sort_values("depth")
            ls = "-" if control == "none" else "--"
            ax.plot(part["depth"], part["erank"], color=col[a], ls=ls, lw=1.2, label=f"α={a:g}, {control}")
        ax.set_yscale("log")
        ax.set_xlabel("depth (boundaries composed)", fontsize=8)
        ax.set_ylabel("erank of cumulative J(α)", fontsize=8)
        ax.set_title(f"{ck}: cumulative erank ({df['variant'].iloc[0]})", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=5.5, ncol=2, frameon=False)
        ax = axes[i, 1]
        last = df[df["depth"] == df["depth"].max()]
        for control, part in last.groupby("control"):
            part = part.sort_values("alpha")
            ax.plot(part["alpha"], part["erank"], marker="o", ls="-" if control == "none" else "--", label=control)
        ax.set_xlabel("α (scale of the strictly upper Schur part)", fontsize=8)
        ax.set_ylabel("erank at full depth", fontsize=8)
        ax.set_title(f"{ck}: bottleneck vs non-normality", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(title="N", fontsize=7, title_fontsize=7, frameon=False)
    fig.suptitle(f"{title}: Schur surgery J(α) = Q(Λ + αN)Q*", fontsize=10)
    fig.tight_layout()
    return fig


def draw(figure: str, inputs: list[str], settings: dict, png: str, pdf: str) -> None:
    """Read one model's tables (one per checkpoint, in config order) and write one figure as PNG and PDF."""
    tables = {ck: read_tsv(p) for ck, p in zip(settings["checkpoints"], inputs)}
    title = settings.get("label") or settings["model"]
    cfg = settings["spectra"]
    if figure == "eigenvalues":
        shown = cfg.get("eigen_boundaries") or default_eigen_boundaries(settings["boundaries"])
        fig = plot_eigenvalues(tables, shown, title, cfg["complex_tol"])
    elif figure == "gradient":
        fig = plot_gradient(tables, settings["n_layers"], title)
    elif figure == "cumulative":
        fig = plot_cumulative(tables, cfg["cumulative_variant"], title)
    elif figure == "schur":
        fig = plot_schur(tables, title)
    else:
        raise ValueError(f"unknown spectra figure '{figure}'")
    save_figure(fig, png, pdf)
