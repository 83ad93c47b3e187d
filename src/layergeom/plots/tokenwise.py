"""Paper A figures: geometry per layer, RelErr per class, RelErr vs KL, rho heat-maps, energy vs rank.

Every figure compares all (model, checkpoint) runs in one picture; depth is normalised to l / (L - 1) so
models of different depth share an axis. Inputs are the tables of ``layergeom.tokenwise.pipeline``.
"""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..io import read_tsv, save_figure  # noqa: E402

CLASS_ORDER = ["diag", "lowrank", "orthogonal", "mlp", "global", "identity"]
CLASS_COLOURS = dict(zip(CLASS_ORDER, plt.get_cmap("tab10").colors))


def _classes(tables: dict[str, pd.DataFrame], skip=()) -> list[str]:
    present = {c for t in tables.values() for c in t["class"].unique()}
    return [c for c in CLASS_ORDER if c in present and c not in skip]


def _depth(t: pd.DataFrame) -> np.ndarray:
    n = t["layer"].max()
    return t["layer"].to_numpy() / max(n, 1)


def _run_label(run: str, labels: dict) -> str:
    model, checkpoint = run.split("/", 1)
    return f"{labels.get(model, model)} · {checkpoint}"


def _run_styles(runs: list[str]) -> dict[str, dict]:
    """A colour per model and a line style per checkpoint, so checkpoints of one model read as a family."""
    models = list(dict.fromkeys(r.split("/")[0] for r in runs))
    cmap = plt.get_cmap("tab10").colors
    styles, seen = {}, {}
    for r in runs:
        m = r.split("/")[0]
        i = seen.setdefault(m, 0)
        seen[m] += 1
        styles[r] = {"color": cmap[models.index(m) % 10], "ls": ["-", "--", ":", "-."][i % 4]}
    return styles


# ---- figures --------------------------------------------------------------------------------------
def plot_geometry(summaries: dict[str, pd.DataFrame], labels: dict, proj_k: dict):
    """Per layer: alignment |cos|, angle and projection energy of the tokenwise part (solid) and the residual
    (dashed) with the update, one column per class, one colour per run (delta convention)."""
    classes = _classes(summaries, skip=("identity",))
    rows = [
        ("cos_full_tok", "cos_full_res", "alignment |cos(u, ·)|"),
        ("angle_tok_deg", "angle_res_deg", "angle to u (deg)"),
        ("proj_tok", "proj_res", "projection π_k on tokenwise dirs"),
    ]
    cmap = plt.get_cmap("tab10").colors
    fig, axes = plt.subplots(len(rows), len(classes), figsize=(3.1 * len(classes), 8.2), squeeze=False, sharex=True)
    for j, cls in enumerate(classes):
        for i, (tok, res, ylabel) in enumerate(rows):
            ax = axes[i, j]
            for n, (run, t) in enumerate(summaries.items()):
                g = t[t["class"] == cls].sort_values("layer")
                x = _depth(g)
                kw = {"color": cmap[n % 10], "lw": 1.4, "marker": "o", "ms": 2.5}
                ax.plot(x, g[tok], "-", label=_run_label(run, labels) if (i, j) == (0, 0) else None, **kw)
                ax.plot(x, g[res], "--", **kw)
                if i == 2 and "proj_baseline" in g:
                    ax.plot(x, g["proj_baseline"], ":", color="0.5", lw=1)
            if i == 0:
                ax.set_title(cls)
                ax.set_ylim(0, 1.02)
            if i == 1:
                ax.set_ylim(0, 90)
            if i == 2:
                ax.set_ylim(0, 1.02)
                ax.set_xlabel("depth l / (L-1)")
            if j == 0:
                ax.set_ylabel(ylabel)
    handles, lbls = axes[0, 0].get_legend_handles_labels()
    handles += [plt.Line2D([], [], color="k", ls="-"), plt.Line2D([], [], color="k", ls="--")]
    lbls += ["tokenwise t", "residual r"]
    handles += [plt.Line2D([], [], color="0.5", ls=":")]
    lbls += ["random baseline k/d"]
    ncol = min(len(lbls), 5 if max(map(len, lbls), default=0) < 30 else 2)  # long run labels: fewer columns
    fig.legend(handles, lbls, loc="upper center", ncol=ncol, bbox_to_anchor=(0.5, 0.0), frameon=False)  # below
    ks = sorted(set(proj_k.values()))
    fig.suptitle(
        f"Update u = h_(l+1) - h_l vs its tokenwise part and residual (projection k = {', '.join(map(str, ks))})"
    )
    fig.tight_layout()
    return fig


def plot_relerr(summaries: dict[str, pd.DataFrame], labels: dict):
    """Mean RelErr = ||r|| / ||h_(l+1)|| per layer, one line per class, one panel per run."""
    classes = _classes(summaries)
    n = len(summaries)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False, sharey=True)
    for ax, (run, t) in zip(axes[0], summaries.items()):
        for cls in classes:
            g = t[t["class"] == cls].sort_values("layer")
            ax.plot(g["layer"], g["relerr"], "o-", ms=3, lw=1.3, color=CLASS_COLOURS[cls], label=cls)
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_title(textwrap.fill(_run_label(run, labels), width=int(4.2 * 72 / (0.6 * 10))), fontsize=10)
    axes[0, 0].set_ylabel("mean RelErr ||r|| / ||h_(l+1)||")
    axes[0, -1].legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


ROW_INCHES = 2.7  # height of one run's row in the RelErr-KL figure


def plot_relerr_kl(anchors: dict[str, pd.DataFrame], pooled: dict[str, pd.DataFrame], labels: dict):
    """Per-anchor RelErr vs KL (log-log), coloured by depth, pooled Spearman rho with its CI in each panel."""
    classes = _classes(anchors)
    runs = list(anchors)
    fig, axes = plt.subplots(
        len(runs),
        len(classes),
        figsize=(2.9 * len(classes) + 1, ROW_INCHES * len(runs)),
        squeeze=False,
        sharex=True,
        sharey=True,
        layout="constrained",
    )
    sc = None
    for i, run in enumerate(runs):
        a = anchors[run]
        p = pooled[run].set_index("class")
        n_layers = max(int(a["layer"].max()), 1)
        for j, cls in enumerate(classes):
            ax = axes[i, j]
            g = a[(a["class"] == cls) & np.isfinite(a["kl"]) & np.isfinite(a["relerr"])]
            kl = np.clip(g["kl"].to_numpy(), 1e-10, None)
            sc = ax.scatter(
                g["relerr"],
                kl,
                c=g["layer"] / n_layers,
                s=3,
                cmap="viridis",
                vmin=0,
                vmax=1,
                lw=0,
                alpha=0.5,
                rasterized=True,
            )
            ax.set_xscale("log")
            ax.set_yscale("log")
            if cls in p.index:
                r = p.loc[cls]
                ax.text(
                    0.03, 0.97, f"ρ = {r['spearman_rho']:.2f}\n[{r['rho_ci_low']:.2f}, {r['rho_ci_high']:.2f}]",
                    transform=ax.transAxes, va="top", fontsize=8,
                )  # fmt: skip
            if i == 0:
                ax.set_title(cls)
            if i == len(runs) - 1:
                ax.set_xlabel("RelErr")
            if j == 0:  # the run label wrapped to the row's height, so that rows never run into each other
                label = textwrap.fill(_run_label(run, labels), width=int(ROW_INCHES * 72 / (0.6 * 9)))
                ax.set_ylabel(f"{label}\nKL (nats)", fontsize=9)
    if sc is not None:
        fig.colorbar(sc, ax=axes, shrink=0.6, label="depth l / (L-1)")
    return fig


def plot_rho(summaries: dict[str, pd.DataFrame], labels: dict):
    """Spearman rho(RelErr, KL) per class and layer, one heat-map per run (model x layer x class)."""
    classes = _classes(summaries)
    n = len(summaries)
    width = max(4.0, 0.22 * max(t["layer"].max() + 1 for t in summaries.values()) + 2)
    fig, axes = plt.subplots(
        n, 1, figsize=(width + 1.5, 0.32 * len(classes) * n + 0.9 * n), squeeze=False, layout="constrained"
    )
    im = None
    for ax, (run, t) in zip(axes[:, 0], summaries.items()):
        piv = t.pivot(index="class", columns="layer", values="spearman_rho").reindex(classes)
        im = ax.imshow(
            piv.to_numpy(dtype=float), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest"
        )
        ax.set_yticks(range(len(classes)), classes)
        step = max(1, len(piv.columns) // 15)
        ax.set_xticks(range(0, len(piv.columns), step), piv.columns[::step])
        ax.set_title(textwrap.fill(_run_label(run, labels), width=int(width * 72 / (0.6 * 10))), fontsize=10)
        if len(piv.columns) <= 12:
            for (yi, xi), v in np.ndenumerate(piv.to_numpy(dtype=float)):
                if np.isfinite(v):
                    ax.text(
                        xi, yi, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w" if abs(v) > 0.6 else "k"
                    )
    axes[-1, 0].set_xlabel("layer")
    if im is not None:
        fig.colorbar(im, ax=axes, shrink=0.8, label="Spearman ρ(RelErr, KL)")
    return fig


def plot_energy_rank(summaries: dict[str, pd.DataFrame], labels: dict):
    """Energy of the update (solid) and of the residual (dashed) captured by the top-k tokenwise directions,
    against k, averaged over layers; one panel per class, random baseline k/d dotted."""
    classes = _classes(summaries, skip=("identity",))
    styles = _run_styles(list(summaries))
    fig, axes = plt.subplots(1, len(classes), figsize=(3.2 * len(classes), 3.4), squeeze=False, sharey=True)
    for ax, cls in zip(axes[0], classes):
        for run, t in summaries.items():
            g = t[t["class"] == cls]
            ranks = sorted(
                int(c.split("_k")[-1]) for c in g.columns if c.startswith("proj_full_k") and c[11:].isdigit()
            )
            if not ranks:
                continue
            full = [np.nanmean(g[f"proj_full_k{k}"]) for k in ranks]
            res = [np.nanmean(g[f"proj_res_k{k}"]) for k in ranks]
            st = styles[run]
            ax.plot(ranks, full, marker="o", ms=3, color=st["color"], ls=st["ls"], label=_run_label(run, labels))
            ax.plot(ranks, res, marker="x", ms=3, color=st["color"], ls=st["ls"], alpha=0.45)
            if "d_model" in g and len(g):
                ax.plot(ranks, np.minimum(np.array(ranks) / g["d_model"].iloc[0], 1), ":", color="0.5", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_title(cls)
        ax.set_xlabel("k (top-k tokenwise directions)")
        ax.set_ylim(0, 1.02)
    axes[0, 0].set_ylabel("mean π_k  (o update,  x residual)")
    axes[0, -1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def draw_figures(
    summaries: dict[str, str],
    anchors: dict[str, str],
    pooled: dict[str, str],
    labels: dict,
    proj_k: dict,
    outputs: dict,
) -> None:
    """Read the per-run tables (keys ``model/checkpoint``) and write every figure to its PNG and PDF."""
    summ = {r: read_tsv(p) for r, p in summaries.items()}
    anch = {r: read_tsv(p) for r, p in anchors.items()}
    pool = {r: read_tsv(p) for r, p in pooled.items()}
    figs = {
        "geometry": plot_geometry(summ, labels, proj_k),
        "relerr": plot_relerr(summ, labels),
        "relerr_kl": plot_relerr_kl(anch, pool, labels),
        "rho": plot_rho(summ, labels),
        "energy_rank": plot_energy_rank(summ, labels),
    }
    for name, fig in figs.items():
        save_figure(fig, outputs[name], outputs[f"{name}_pdf"])
