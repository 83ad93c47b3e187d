"""Coupling of graph topology to Jacobian amplification (Paper B §3.4-3.5).

Per boundary b: the amplification a_i of every residual unit i by the mean Jacobian J̄_b, the Spearman
correlation ρ(P_i, a_i) with the participation coefficient across units and its permutation p-value;
then Benjamini-Hochberg across the boundaries of one model checkpoint, the number of FDR-significant
layers (a layer with any significant boundary, and a per-layer test: Simes within the layer, BH across
layers), and the sign of ρ by operator type (attention / MLP / block; non-normal vs near-symmetric at the
median Henrici departure of the checkpoint).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats

from ..names import parse_boundary
from ..runtime import LayergeomError, progress

log = logging.getLogger("layergeom")

AMPLIFICATIONS = ("full", "update", "self")


def amplification(J: np.ndarray, variant: str = "full") -> np.ndarray:
    """Amplification of unit i by J̄_b: ln‖(I+J)e_i‖₂ (full), ln‖J e_i‖₂ (update) or ln|1+J_ii| (self gain)."""
    J = np.asarray(J, dtype=np.float64)
    if J.ndim != 2 or J.shape[0] != J.shape[1]:
        raise LayergeomError(f"a Jacobian must be square, got shape {J.shape}")
    with np.errstate(divide="ignore"):
        if variant == "full":
            cols = J + np.eye(J.shape[0])  # the residual map I + J̄; column i is its image of e_i
            return np.log(np.linalg.norm(cols, axis=0))
        if variant == "update":
            return np.log(np.linalg.norm(J, axis=0))
        if variant == "self":  # the residual map's gain from unit i back onto unit i itself
            return np.log(np.abs(1.0 + np.diag(J)))
    raise LayergeomError(f"amplification must be one of {AMPLIFICATIONS}, got '{variant}'")


def permutation_count(n_boundaries: int, q: float, n_permutations: int | None = None) -> int:
    """Permutations per test: `n_permutations`, or (None) enough that one boundary alone can pass BH at q.

    BH over m tests rejects the smallest p only when p ≤ q/m; a two-sided permutation p-value is at least
    2/(n+1), so n ≥ 2m/q − 1 is the bare minimum. The default takes max(1000, ⌈4m/q⌉): a boundary whose |ρ|
    at most one permutation reaches passes alone (2·2/(n+1) ≤ q/m), and the p-values near the BH threshold
    rest on a few exceedances rather than on the floor. (m = 60, q = 0.05: 4800.)
    """
    if n_permutations is not None:
        return int(n_permutations)
    return max(1000, int(np.ceil(4 * max(n_boundaries, 1) / q)))


def spearman_permutation(
    x: np.ndarray,
    y: np.ndarray,
    n_permutations: int,
    rng,
    *,
    stop_above: float | None = None,
    batch: int = 1000,
    confidence: float = 1e-3,
) -> tuple[float, float, int, int]:
    """Spearman ρ(x, y) with a two-sided permutation p-value; returns (ρ, p, n pairs, permutations used).

    Both variables are ranked once (average ranks); each permutation shuffles x's ranks against y's and
    the null ρ is one dot product, in batches. p = min(1, 2·(1 + #{tail})/(1 + n)) with the smaller tail
    (#{ρ* ≥ ρ} or #{ρ* ≤ ρ}), as scipy.stats.permutation_test's two-sided p. Adaptive stop: with
    `stop_above` = q, a test stops after a batch once even the Clopper–Pearson lower bound (at
    `confidence`) of its p exceeds q — it can never be significant under BH at level q (BH rejects only
    p ≤ q) — so only the boundaries near or below the threshold pay for all n permutations.
    """
    ok = np.isfinite(x) & np.isfinite(y)
    n = int(ok.sum())
    if n < 3:
        return np.nan, np.nan, n, 0
    rx = stats.rankdata(x[ok])
    ry = stats.rankdata(y[ok])
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = np.sqrt(np.sum(rx * rx) * np.sum(ry * ry))
    if denom == 0:  # one variable is constant: ρ undefined
        return np.nan, np.nan, n, 0
    rho = float(rx @ ry / denom)
    eps = 1e-12 * max(1.0, abs(rho))  # ties of ρ* with ρ count as extreme (floating-point slack)
    hi = lo = done = 0
    while done < n_permutations:
        b = min(batch, n_permutations - done)
        perm = np.argsort(rng.random((b, n)), axis=1)  # (b, n) one permutation per row
        null = rx[perm] @ ry / denom  # (b,)
        hi += int(np.sum(null >= rho - eps))
        lo += int(np.sum(null <= rho + eps))
        done += b
        if stop_above is not None and done < n_permutations:
            tail = min(hi, lo)
            low_p = 2 * stats.beta.ppf(confidence, tail, done - tail + 1) if tail > 0 else 0.0
            if low_p > stop_above:
                break
    p = min(1.0, 2 * (1 + min(hi, lo)) / (1 + done))
    return rho, float(p), n, done


def fdr_bh(p: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray]:
    """Benjamini-Hochberg q-values across the finite p-values (scipy); NaN p gives NaN q, not significant."""
    p = np.asarray(p, dtype=np.float64)
    ok = np.isfinite(p)
    qval = np.full(p.shape, np.nan)
    if ok.any():
        qval[ok] = stats.false_discovery_control(p[ok], method="bh")
    return np.where(ok, qval <= q, False), qval


def coupling_rows(
    participations: dict[str, np.ndarray],
    boundary_flags: dict[str, np.ndarray],
    jacobians: Mapping[str, np.ndarray],
    n_permutations: int,
    seed: int,
    henrici_values: Mapping[str, float],
    stop_above: float | None = None,
) -> pd.DataFrame:
    """ρ(P_i, a_i) and its permutation p-value for every boundary and amplification variant (no FDR yet).

    ``jacobians`` maps boundary -> J̄_b (or a path to its .npy); the boundaries keep their given (depth) order.
    ``henrici_values`` maps boundary -> its Henrici departure H (the spectra stage's, from spectra.tsv).
    ``stop_above`` (the FDR level q) stops a test early once its p is clearly above q (``spearman_permutation``).
    """
    rows = []
    items = progress(participations.items(), total=len(participations), desc="coupling", unit="boundary")
    for bi, (b, p) in enumerate(items):
        J = np.asarray(jacobians[b])
        if J.shape != (len(p), len(p)):
            raise LayergeomError(f"{b}: Jacobian shape {J.shape} does not match the graph's {len(p)} nodes")
        if not np.isfinite(J).all():
            raise LayergeomError(f"{b}: the mean Jacobian has non-finite entries")
        layer, kind = parse_boundary(b)
        h = float(henrici_values[b])
        row = {"boundary": b, "layer": layer, "kind": kind, "henrici": h}
        for vi, variant in enumerate(AMPLIFICATIONS):
            a = amplification(J, variant)
            rng = np.random.default_rng([seed, bi, vi])  # one independent stream per (boundary, variant)
            rho, pval, n, used = spearman_permutation(p, a, n_permutations, rng, stop_above=stop_above)
            flag = boundary_flags[b] & np.isfinite(a)
            rest = ~boundary_flags[b] & np.isfinite(a)
            gap = float(a[flag].mean() - a[rest].mean()) if flag.any() and rest.any() else np.nan
            row |= {f"rho_{variant}": rho, f"p_{variant}": pval, f"n_units_{variant}": n, f"amp_gap_{variant}": gap,
                    f"n_permutations_{variant}": used}  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows)


def apply_fdr(table: pd.DataFrame, amplification_variant: str, q: float) -> pd.DataFrame:
    """Add q-values per variant and the primary columns rho, p_value, q_value, significant of one checkpoint."""
    out = table.copy()
    for variant in AMPLIFICATIONS:
        if f"p_{variant}" in out:
            reject, qval = fdr_bh(out[f"p_{variant}"].to_numpy(), q)
            out[f"q_{variant}"] = qval
            out[f"significant_{variant}"] = reject
    v = amplification_variant
    out["rho"], out["p_value"] = out[f"rho_{v}"], out[f"p_{v}"]
    out["q_value"], out["significant"] = out[f"q_{v}"], out[f"significant_{v}"]
    out["n_units"], out["amp_gap"] = out[f"n_units_{v}"], out[f"amp_gap_{v}"]
    if f"n_permutations_{v}" in out:
        out["n_permutations"] = out[f"n_permutations_{v}"]
    out["amplification"] = v
    return out


def simes(p: np.ndarray) -> float:
    """Simes' combined p-value of one intersection null: min_i m·p_(i)/i over the m finite p-values (NaN if none)."""
    p = np.sort(np.asarray(p, dtype=np.float64)[np.isfinite(p)])
    if not len(p):
        return np.nan
    return float(min(1.0, np.min(len(p) * p / np.arange(1, len(p) + 1))))


def layer_fdr(table: pd.DataFrame, q: float, p_column: str = "p_value") -> pd.DataFrame:
    """Per-layer test: Simes p of each layer's boundary p-values, then BH across layers at q.

    One row per layer: layer, n_boundaries, p_layer, q_layer, significant_layer. H_l is "no boundary of
    layer l is coupled"; rejecting it at BH level q controls the FDR over layers (Simes is valid under
    independence and the positive dependence BH already assumes over boundaries).
    """
    layers = list(dict.fromkeys(table["layer"]))
    p_layer = np.array([simes(table.loc[table["layer"] == ly, p_column].to_numpy()) for ly in layers])  # (layers,)
    reject, qval = fdr_bh(p_layer, q)
    n = [int((table["layer"] == ly).sum()) for ly in layers]
    return pd.DataFrame({"layer": layers, "n_boundaries": n, "p_layer": p_layer, "q_layer": qval,
                         "significant_layer": reject})  # fmt: skip


def apply_layer_fdr(table: pd.DataFrame, q: float) -> pd.DataFrame:
    """Add the per-layer test (``layer_fdr`` of the primary p_value) to every boundary row of its layer."""
    per = layer_fdr(table, q).set_index("layer")
    out = table.copy()
    for col in ("p_layer", "q_layer", "significant_layer"):
        out[col] = out["layer"].map(per[col]).to_numpy()
    out["significant_layer"] = out["significant_layer"].astype(bool)
    return out


def henrici_split(henrici_values: np.ndarray) -> np.ndarray:
    """Operator type by the Henrici departure: `non-normal` above the checkpoint's median, else `near-symmetric`."""
    h = np.asarray(henrici_values, dtype=np.float64)
    return np.where(h > np.nanmedian(h), "non-normal", "near-symmetric")


COUPLING_COLUMNS = [
    "boundary", "layer", "kind", "n_communities", "rho", "p_value", "q_value", "significant", "n_permutations"
]  # fmt: skip


def coupling_table(
    graphs: dict[str, pd.DataFrame],
    jacobians: Mapping[str, np.ndarray],
    cfg: dict,
    seed: int,
    henrici_values: Mapping[str, float],
) -> pd.DataFrame:
    """The coupling table of one model checkpoint: one row per boundary, docs/outputs.md columns first.

    ``graphs`` maps boundary -> its node table (columns community, participation, boundary) in depth order;
    ``henrici_values`` as in ``coupling_rows``.
    """
    parts = {b: g["participation"].to_numpy(dtype=np.float64) for b, g in graphs.items()}
    flags = {b: g["boundary"].to_numpy(dtype=bool) for b, g in graphs.items()}
    m, q = len(parts), float(cfg["fdr_q"])
    n_perm = permutation_count(m, q, cfg["n_permutations"])
    floor = 2.0 / (n_perm + 1)  # the smallest two-sided permutation p-value
    if floor > q / max(m, 1):
        log.warning(
            "n_permutations=%d: p >= %.2g, so BH at q=%g over %d boundaries needs >= %d of them at that floor "
            "before any is significant; raise n_permutations to >= %d (or leave it unset) to resolve single "
            "boundaries", n_perm, floor, q, m, int(np.ceil(floor * m / q)), int(np.ceil(2 * m / q)),
        )  # fmt: skip
    else:
        log.info(
            "%d permutations per test%s: the smallest p, %.2g, is below q/m = %.2g (BH at q=%g over %d "
            "boundaries), so one boundary alone can be significant; tests stop early once p is clearly above q",
            n_perm, "" if cfg["n_permutations"] is not None else " (max(1000, 4m/q))", floor, q / max(m, 1), q, m,
        )  # fmt: skip
    raw = coupling_rows(parts, flags, jacobians, n_perm, seed, henrici_values, stop_above=q)
    out = apply_layer_fdr(apply_fdr(raw, cfg["amplification"], cfg["fdr_q"]), q)
    out["n_communities"] = [int(graphs[b]["community"].max()) + 1 for b in out["boundary"]]
    out["n_boundary_nodes"] = [int(graphs[b]["boundary"].sum()) for b in out["boundary"]]
    out["operator"] = henrici_split(out["henrici"].to_numpy())
    out["resolution"] = float(cfg["resolution"])
    extra = [c for c in out.columns if c not in COUPLING_COLUMNS]
    first = ["amplification", "n_units", "n_boundary_nodes", "amp_gap", "henrici", "operator", "resolution",
             "p_layer", "q_layer", "significant_layer"]  # fmt: skip
    return out[COUPLING_COLUMNS + first + [c for c in extra if c not in first]]


def sweep_table(
    sweeps: dict[str, pd.DataFrame],
    jacobians: Mapping[str, np.ndarray],
    cfg: dict,
    seed: int,
) -> pd.DataFrame:
    """Coupling at every swept resolution γ (primary amplification only), BH within each γ."""
    v = cfg["amplification"]
    n_perm = permutation_count(len(sweeps), float(cfg["fdr_q"]), cfg["n_permutations"])
    tables = []
    for gamma in sorted({float(g) for s in sweeps.values() for g in s["gamma"].unique()}):
        sub = {b: s[s["gamma"] == gamma].sort_values("node") for b, s in sweeps.items()}
        rows = []
        for bi, (b, g) in enumerate(sub.items()):
            J = np.asarray(jacobians[b])
            rng = np.random.default_rng([seed, bi, AMPLIFICATIONS.index(v)])
            rho, pval, n, used = spearman_permutation(
                g["participation"].to_numpy(dtype=np.float64), amplification(J, v), n_perm, rng,
                stop_above=float(cfg["fdr_q"]),
            )  # fmt: skip
            layer, kind = parse_boundary(b)
            rows.append(
                {"gamma": gamma, "boundary": b, "layer": layer, "kind": kind,
                 "n_communities": int(g["community"].max()) + 1, "rho": rho, "p_value": pval, "n_units": n,
                 "n_permutations": used}
            )  # fmt: skip
        t = pd.DataFrame(rows)
        t["significant"], t["q_value"] = fdr_bh(t["p_value"].to_numpy(), cfg["fdr_q"])
        tables.append(t)
    cols = [
        "gamma",
        "boundary",
        "layer",
        "kind",
        "n_communities",
        "rho",
        "p_value",
        "q_value",
        "significant",
        "n_units",
        "n_permutations",
    ]
    return pd.concat(tables, ignore_index=True)[cols]


def operator_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Sign of ρ by operator type: counts of significant positive / negative ρ per kind and Henrici class."""
    groups = [("all", pd.Series("all", index=table.index)), ("kind", table["kind"]), ("operator", table["operator"])]
    groups.append(("kind_operator", table["kind"] + "/" + table["operator"]))
    rows = []
    for grouping, labels in groups:
        for label in pd.unique(labels):
            t = table[labels == label]
            sig = t["significant"].astype(bool)
            rows.append(
                {
                    "grouping": grouping,
                    "group": label,
                    "n_boundaries": len(t),
                    "n_significant": int(sig.sum()),
                    "n_significant_positive": int((sig & (t["rho"] > 0)).sum()),
                    "n_significant_negative": int((sig & (t["rho"] < 0)).sum()),
                    "frac_rho_positive": float((t["rho"] > 0).mean()) if len(t) else np.nan,
                    "mean_rho": float(t["rho"].mean()),
                    "median_rho": float(t["rho"].median()),
                    "median_henrici": float(t["henrici"].median()),
                }
            )
    return pd.DataFrame(rows)


def n_significant_layers_simes(table: pd.DataFrame) -> int:
    """Layers whose per-layer test (Simes within the layer, BH across layers) rejects: column significant_layer."""
    return int(table.loc[table["significant_layer"].astype(bool), "layer"].nunique())


def significant_counts(tables: dict[tuple[str, str], pd.DataFrame]) -> pd.DataFrame:
    """FDR-significant boundaries and layers per model checkpoint: a layer with any significant boundary
    (``n_significant_layers``) and by the per-layer test (``n_significant_layers_simes``)."""
    rows = []
    for (model, checkpoint), t in tables.items():
        sig = t["significant"].astype(bool)
        rows.append(
            {
                "model": model,
                "checkpoint": checkpoint,
                "n_layers": int(t["layer"].nunique()),
                "n_boundaries": len(t),
                "n_significant_layers": int(t.loc[sig, "layer"].nunique()),
                "n_significant_layers_simes": n_significant_layers_simes(t),
                "n_significant_boundaries": int(sig.sum()),
                "n_significant_positive": int((sig & (t["rho"] > 0)).sum()),
                "n_significant_negative": int((sig & (t["rho"] < 0)).sum()),
            }
        )
    return pd.DataFrame(rows)
