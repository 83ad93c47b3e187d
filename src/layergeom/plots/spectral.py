"""Paper B spectral figures: eigenvalues in the complex plane, the spectral gradient through depth, the
cumulative effective rank, the Schur surgery and the convergence with the number of samples. Each function
takes tables keyed by checkpoint (in config order) and returns a matplotlib figure; ``draw`` reads the files
and writes PNG and PDF. Every metric with an interval (``*_ci_low``/``*_ci_high``) is drawn with its band,
so a trained-vs-init difference reads against the sampling uncertainty."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from ..io import read_tsv, save_figure  # noqa: E402
from .common import KIND_STYLE, checkpoint_colours, note_figure, size_axis  # noqa: E402


def kind_style(kind: str):
    """The line style of a boundary kind (a dense dotted line for a kind without its own)."""
    return KIND_STYLE.get(kind, (0, (1, 1)))


GRADIENT_PANELS = [
    ("cond", "condition number σ₁/σ_r (non-zero part)", True),
    ("self_realign", "self-realignment SR_k", False),
    ("henrici", "Henrici departure (normalised)", False),
    ("frac_expansive", "fraction expansive |λ|>1", False),
    ("frac_complex", "fraction complex eigenvalues", False),
    ("erank", "effective rank of J̄_b", False),
]
BAND_ALPHA = 0.2


def band(ax, x, table: pd.DataFrame, col: str, color, **kw) -> None:
    """Shade the interval of `col` (columns {col}_ci_low/_ci_high) when the table has it."""
    lo, hi = f"{col}_ci_low", f"{col}_ci_high"
    if lo in table and hi in table and np.isfinite(table[lo]).any():
        ax.fill_between(np.asarray(x, float), table[lo], table[hi], color=color, alpha=BAND_ALPHA, lw=0, **kw)


def default_eigen_boundaries(boundaries: list[str]) -> list[str]:
    """Early, middle and late boundaries: the first, middle and last in depth order (deduplicated)."""
    picks = [boundaries[0], boundaries[len(boundaries) // 2], boundaries[-1]]
    return list(dict.fromkeys(picks))


def normalised_depth(layer, n_layers: int):
    """Layer index scaled to [0, 1] (0 for a one-layer model)."""
    return np.asarray(layer, dtype=float) / max(n_layers - 1, 1)


def plot_eigenvalues(tables: dict[str, pd.DataFrame], boundaries: list[str], title: str):
    """Eigenvalues of J̄_b in the complex plane with the unit circle; rows = checkpoints, columns = boundaries.

    Numerically zero modes (all but the r largest |λ|, r the numerical rank) are grey, non-zero modes blue
    when complex beyond their precision and orange otherwise (real, or a pair within rounding of the axis);
    the title counts the complex fraction over the non-zero modes (columns ``nonzero``/``complex`` of
    eigenvalues.tsv, the flags of spectra.tsv).
    """
    nr, nc = len(tables), len(boundaries)
    fig, axes = plt.subplots(nr, nc, figsize=(3.2 * nc, 3.2 * nr), squeeze=False)
    t = np.linspace(0, 2 * np.pi, 400)
    for i, (ck, df) in enumerate(tables.items()):
        for j, b in enumerate(boundaries):
            ax = axes[i, j]
            ev = df[df["boundary"] == b]
            nz = ev["nonzero"].astype(bool) if "nonzero" in ev else pd.Series(True, index=ev.index)
            ax.plot(np.cos(t), np.sin(t), color="0.5", lw=0.8, zorder=1)
            ax.axhline(0, color="0.85", lw=0.5, zorder=0)
            ax.axvline(0, color="0.85", lw=0.5, zorder=0)
            ax.scatter(ev["real"][~nz], ev["imag"][~nz], s=3, color="0.7", linewidths=0, zorder=2)
            cx = ev["complex"].astype(bool) if "complex" in ev else pd.Series(True, index=ev.index)
            for sel, colour in ((nz & cx, "C0"), (nz & ~cx, "C1")):
                ax.scatter(ev["real"][sel], ev["imag"][sel], s=4, color=colour, alpha=0.7, linewidths=0, zorder=3)
            lim = max(1.1, 1.05 * float(ev["abs"].max()) if len(ev) else 1.1)
            ax.set_xlim(-lim, lim)
            ax.set_ylim(-lim, lim)
            ax.set_aspect("equal")
            if len(ev) and "complex" in ev and nz.any():
                f_c = float(ev["complex"][nz].astype(bool).mean())
                ax.set_title(
                    f"{ck} · {b}\nρ = {ev['abs'].max():.3g}, complex {100 * f_c:.0f} % of {int(nz.sum())} modes",
                    fontsize=8,
                )
            else:
                ax.set_title(f"{ck} · {b}", fontsize=8)
            if i == nr - 1:
                ax.set_xlabel("Re λ", fontsize=8)
            if j == 0:
                ax.set_ylabel("Im λ", fontsize=8)
            ax.tick_params(labelsize=7)
    fig.suptitle(f"{title}: eigenvalues of J̄_b (unit circle; complex modes blue, real orange, zero grey)", fontsize=10)
    fig.tight_layout()
    return fig


KIND_MARKER = {"attn": "o", "mlp": "s", "pli": "^", "block": "D"}
KIND_NAME = {"attn": "attention", "mlp": "MLP", "pli": "per-layer input", "block": "block"}


def trend_line(ax, trend: pd.Series, color, x_range: tuple[float, float] = (0.0, 1.0)) -> None:
    """The OLS trend a + b·x of trends.tsv over the depths it was fitted on (log10 metrics on their scale)."""
    x = np.linspace(*x_range, 20)
    y = trend["intercept"] + trend["slope"] * x
    if trend["scale"] == "log10":
        y = 10.0**y
    ax.plot(x, y, color=color, ls=(0, (4, 2)), lw=0.9, alpha=0.9)


def slope_panel(ax, trends: dict[str, pd.DataFrame], metric: str, kinds: list[str]) -> None:
    """Slope per unit relative depth with its bootstrap interval: one column per checkpoint, one marker per kind."""
    names = list(trends)
    for j, kind in enumerate(kinds):
        for i, ck in enumerate(names):
            t = trends[ck]
            r = t[(t["kind"] == kind) & (t["metric"] == metric)]
            if not len(r) or not np.isfinite(r["slope"].iloc[0]):
                continue
            r = r.iloc[0]
            xi = i + 0.15 * (j - (len(kinds) - 1) / 2)
            err = np.array([[r["slope"] - r["slope_ci_low"]], [r["slope_ci_high"] - r["slope"]]])
            ax.errorbar([xi], [r["slope"]], yerr=np.where(np.isfinite(err), err, 0), marker=KIND_MARKER.get(kind, "x"),
                        color="k", ms=3.5, capsize=2, lw=0.9)  # fmt: skip
    ax.axhline(0, color="0.6", lw=0.7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=6, rotation=90 if len(names) > 3 else 0)
    ax.set_xlim(-0.6, len(names) - 0.4)


def plot_gradient(tables: dict[str, pd.DataFrame], n_layers: int, title: str, trends: dict | None = None):
    """Per kind (rows): κ, SR, Henrici, f_exp, f_cplx, erank and the numerical rank against normalised depth,
    one colour per checkpoint with its band and (given trends.tsv) its OLS trend dashed; a last row of the
    slopes per unit depth with their bootstrap intervals, per checkpoint and kind."""
    colours = checkpoint_colours(list(tables))
    kinds = list(dict.fromkeys(k for df in tables.values() for k in df["kind"]))
    panels = [*GRADIENT_PANELS, ("numerical_rank", "numerical rank of J̄_b", False)]
    nr, nc = len(kinds) + (trends is not None), len(panels)
    fig, axes = plt.subplots(nr, nc, figsize=(2.45 * nc, 2.35 * nr + 0.5), squeeze=False)
    for r, kind in enumerate(kinds):
        for c, (col, label, logy) in enumerate(panels):
            ax = axes[r, c]
            for ck, df in tables.items():
                part = df[df["kind"] == kind].sort_values("layer")
                x = normalised_depth(part["layer"], n_layers)
                ax.plot(x, part[col], color=colours[ck], lw=1.2, marker=KIND_MARKER.get(kind, "."), ms=2.5)
                band(ax, x, part, col, colours[ck])
                t = (trends or {}).get(ck)
                row = None if t is None else t[(t["kind"] == kind) & (t["metric"] == col)]
                fitted = np.isfinite(part[col].to_numpy(float))
                if row is not None and len(row) and np.isfinite(row["slope"].iloc[0]) and fitted.any():
                    trend_line(ax, row.iloc[0], colours[ck], (x[fitted].min(), x[fitted].max()))
            if col == "self_realign":  # k' = min(k, rank) differs between boundaries of low rank: one line per k'/d
                parts = [df.loc[df["kind"] == kind, "sr_baseline"] for df in tables.values()]
                for base in sorted(pd.concat(parts).dropna().unique()):
                    ax.axhline(base, color="0.6", lw=0.8, ls=(0, (1, 2)))
                    ax.text(0.01, base, " random k'/d", fontsize=6, color="0.4", va="bottom",
                            transform=ax.get_yaxis_transform())  # fmt: skip
            if logy:
                ax.set_yscale("log")
            elif col in ("self_realign", "henrici", "frac_expansive", "frac_complex"):
                ax.set_ylim(-0.03, 1.03)  # fractions: the whole range, so bands and levels read alike
            ax.set_xlim(-0.03, 1.03)  # the whole depth, also where a kind has values in part of it
            if r == 0:
                ax.set_title(label, fontsize=8)
            if c == 0:
                ax.set_ylabel(f"{KIND_NAME.get(kind, kind)} ({kind})", fontsize=8)
            if r == len(kinds) - 1:
                ax.set_xlabel("normalised depth", fontsize=7)
            ax.tick_params(labelsize=6.5)
    if trends is not None:
        for c, (col, _, _) in enumerate(GRADIENT_PANELS):
            ax = axes[-1, c]
            slope_panel(ax, trends, col, kinds)
            unit = "log10 " if col in ("cond",) else ""
            ax.set_title(f"slope of {unit}{col} per unit depth", fontsize=7)
            ax.tick_params(labelsize=6.5)
        ax = axes[-1, -1]
        ax.axis("off")
        handles = [Line2D([], [], color=c, lw=1.5, label=ck) for ck, c in colours.items()]
        handles += [Line2D([], [], color="k", marker=KIND_MARKER.get(k, "x"), ls="none", label=k) for k in kinds]
        handles += [Line2D([], [], color="0.3", ls=(0, (4, 2)), lw=0.9, label="OLS trend")]
        ax.legend(handles=handles, fontsize=6.5 if len(handles) > 8 else 7, loc="center", frameon=False,
                  ncol=2 if len(handles) > 8 else 1, title="checkpoint / kind", title_fontsize=7)  # fmt: skip
    else:
        handles = [Line2D([], [], color=c, lw=1.5, label=ck) for ck, c in colours.items()]
        axes[0, -1].legend(handles=handles, fontsize=6, frameon=False)
    fig.suptitle(f"{title}: spectral gradient of J̄_b per boundary kind (bands: {ci_label(tables)} intervals; "
                 f"slopes: bootstrap over boundaries)", fontsize=10)  # fmt: skip
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
            band(ax, part["depth"], part, "erank", colours[ck])
        ax.set_yscale("log")
        ax.set_xlabel("depth (boundaries composed)", fontsize=8)
        name = "J̄_b" if variant == "update" else "I + J̄_b"
        ax.set_title(f"C_n = Π {name}" + (" (primary)" if variant == primary else ""), fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0, 0].set_ylabel("effective rank of C_n", fontsize=8)
    axes[0, -1].legend(fontsize=7, frameon=False)
    fig.suptitle(f"{title}: cumulative effective rank (bands: {ci_label(tables)} intervals)", fontsize=10)
    fig.tight_layout()
    return fig


def order_band(ax, x, table: pd.DataFrame, color) -> bool:
    """Hatch the range of the erank over random Schur orders (erank_order_min/_max) where the table has it."""
    lo, hi = "erank_order_min", "erank_order_max"
    if lo not in table or hi not in table or not np.isfinite(table[lo]).any():
        return False
    ax.fill_between(np.asarray(x, float), table[lo], table[hi], facecolor="none", edgecolor=color, hatch="////",
                    lw=0, alpha=0.6)  # fmt: skip
    return True


def plot_schur(tables: dict[str, pd.DataFrame], title: str, primary: str = "update"):
    """Per checkpoint and cumulative variant: erank vs depth for each α (own N solid, random control dashed,
    jackknife bands shaded, the range over random eigenvalue orders hatched), and erank at full depth against
    α with its interval and, beside it, its range over the orders."""
    nr = len(tables)
    variants = list(dict.fromkeys(v for df in tables.values() for v in df.get("variant", pd.Series([primary]))))
    variants.sort(key=lambda v: v != primary)
    fig, axes = plt.subplots(nr, 2 * len(variants), figsize=(4.4 * 2 * len(variants), 3.2 * nr), squeeze=False)
    spread = False
    for i, (ck, df) in enumerate(tables.items()):
        if "variant" not in df:
            df = df.assign(variant=primary)
        alphas = sorted(df["alpha"].unique())
        cmap = plt.get_cmap("plasma")
        col = {a: cmap(0.85 * k / max(len(alphas) - 1, 1)) for k, a in enumerate(alphas)}
        step = 0.02 * (max(alphas) - min(alphas) or 1)  # the order range beside the interval
        for j, variant in enumerate(variants):
            dv = df[df["variant"] == variant]
            name = "J(α)" if variant == "update" else "I + J(α)"
            ax = axes[i, 2 * j]
            for (a, control), part in dv.groupby(["alpha", "control"], sort=True):
                if a == 0 and control == "random":
                    continue  # the same operator as α = 0 with the own N
                part = part.sort_values("depth")
                ls = "-" if control == "none" else "--"
                ax.plot(part["depth"], part["erank"], color=col[a], ls=ls, lw=1.2, label=f"α={a:g}, {control}")
                band(ax, part["depth"], part, "erank", col[a])
                if control == "none" and a < 1:
                    spread |= order_band(ax, part["depth"], part, col[a])
            ax.set_yscale("log")
            ax.set_xlabel("depth (boundaries composed)", fontsize=8)
            ax.set_ylabel(f"erank of Π {name}", fontsize=8)
            ax.set_title(f"{ck}: {variant}" + (" (primary)" if variant == primary else ""), fontsize=8)
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=5.5, ncol=2, frameon=False)
            ax = axes[i, 2 * j + 1]
            last = dv[dv["depth"] == dv["depth"].max()]
            for control, part in last.groupby("control"):
                part = part.sort_values("alpha")
                yerr = None
                if "erank_ci_low" in part and np.isfinite(part["erank_ci_low"]).any():
                    yerr = np.vstack([part["erank"] - part["erank_ci_low"], part["erank_ci_high"] - part["erank"]])
                    yerr = np.where(np.isfinite(yerr), yerr, 0)
                line = ax.errorbar(part["alpha"], part["erank"], yerr=yerr, marker="o", capsize=3,
                                   ls="-" if control == "none" else "--", label=control)  # fmt: skip
                if control == "none" and "erank_order_min" in part:
                    ok = np.isfinite(part["erank_order_min"]) & (part["alpha"] < 1)
                    if ok.any():
                        ax.vlines(part["alpha"][ok] + step, part["erank_order_min"][ok], part["erank_order_max"][ok],
                                  color=line[0].get_color(), lw=3, alpha=0.5, label="none: range over orders")  # fmt: skip
                        spread = True
            ax.set_xlabel("α (scale of the strictly upper Schur part)", fontsize=8)
            ax.set_ylabel("erank at full depth", fontsize=8)
            ax.set_title(f"{ck}: bottleneck vs non-normality ({variant})", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.legend(title="N", fontsize=7, title_fontsize=7, frameon=False)
    note = "; hatched / bars beside: range over random eigenvalue orders" if spread else ""
    fig.suptitle(f"{title}: Schur surgery J(α) = Q(Λ + αN)Q*, both cumulative operators (canonical order |λ|↓; "
                 f"bands: {ci_label(tables)} intervals{note})", fontsize=9)  # fmt: skip
    fig.tight_layout()
    return fig


def plot_convergence(tables: dict[str, pd.DataFrame], title: str):
    """Each headline metric against the number of samples (nested subsets), one colour per checkpoint."""
    colours = checkpoint_colours(list(tables))
    metrics = list(dict.fromkeys(m for df in tables.values() if "metric" in df for m in df["metric"]))
    if not metrics:  # one sample group (spectra.n_groups: 1, or a single window): no subsets to compare
        return note_figure(f"{title}: convergence with the number of samples", "one sample group per checkpoint "
                           "(spectra.n_groups: 1 or a single window): no nested subsets to compare")  # fmt: skip
    nc = 4
    nr = int(np.ceil(len(metrics) / nc))
    fig, axes = plt.subplots(nr, nc, figsize=(3.4 * nc, 2.8 * nr), squeeze=False)
    for ax, metric in zip(axes.ravel(), metrics):
        for k, (ck, df) in enumerate(tables.items()):
            part = df[df["metric"] == metric].sort_values("n_samples")
            x = part["n_samples"].to_numpy(float) * (1 + 0.03 * k)  # side by side
            yerr = np.vstack([part["value"] - part["ci_low"], part["ci_high"] - part["value"]])
            ax.errorbar(x, part["value"], yerr=np.where(np.isfinite(yerr), yerr, 0), color=colours[ck],
                        marker="o", ms=3, capsize=2, lw=1, label=ck)  # fmt: skip
        size_axis(ax, sorted({int(n) for df in tables.values() for n in df.loc[df["metric"] == metric, "n_samples"]}))
        ax.set_title(metric, fontsize=8)
        ax.set_xlabel("samples (first groups)", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in axes.ravel()[len(metrics) :]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=7, frameon=False)
    fig.suptitle(f"{title}: headline metrics against the number of samples ({ci_label(tables, 'ci_low')})",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    return fig


def ci_label(tables: dict[str, pd.DataFrame], column: str = "_ci_low") -> str:
    """'jackknife' when some table has intervals, else 'no'."""
    has = any(c.endswith(column) and np.isfinite(df[c]).any() for df in tables.values() for c in df.columns)
    return "jackknife" if has else "no"


def draw(figure: str, inputs: list[str], settings: dict, png: str, pdf: str) -> None:
    """Read one model's tables (one per checkpoint, in config order; the gradient's spectra.tsv files may be
    followed by its trends.tsv files) and write one figure as PNG and PDF."""
    cks = settings["checkpoints"]
    tables = {ck: read_tsv(p) for ck, p in zip(cks, inputs)}
    title = settings.get("label") or settings["model"]
    cfg = settings["spectra"]
    if figure == "eigenvalues":
        shown = cfg.get("eigen_boundaries") or default_eigen_boundaries(settings["boundaries"])
        fig = plot_eigenvalues(tables, shown, title)
    elif figure == "gradient":
        more = inputs[len(cks) :]
        trends = {ck: read_tsv(p) for ck, p in zip(cks, more)} if len(more) == len(cks) else None
        fig = plot_gradient(tables, settings["n_layers"], title, trends)
    elif figure == "cumulative":
        fig = plot_cumulative(tables, cfg["cumulative_variant"], title)
    elif figure == "schur":
        fig = plot_schur(tables, title, cfg["cumulative_variant"])
    elif figure == "convergence":
        fig = plot_convergence(tables, title)
    else:
        raise ValueError(f"unknown spectra figure '{figure}'")
    save_figure(fig, png, pdf)
