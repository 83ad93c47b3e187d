"""A model's claims table (docs/methods.md, "Claims"; columns: docs/outputs.md) from the tables its run wrote.

``model_claims`` reads ``results/{model}/{checkpoint}/`` for every checkpoint — the per-anchor tokenwise tables
and ``tokenwise/pooled.tsv``, ``spectra.tsv``, ``trends.tsv``, ``cumulative.tsv``, ``schur.tsv``,
``coupling.tsv`` — and returns one row per (claim, checkpoint or checkpoint pair, kind / class / variant) with
the statistic, its interval, what it was compared with, the verdict (``verdicts``) and a one-line reason. A
claim whose inputs are missing (a table, a class, a kind, the null model, a trained checkpoint) keeps its
rows, ``not_applicable`` with the reason. Importing it does not import torch.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import read_tsv, read_tsv_if_exists, write_tsv
from ..results import step_of
from ..runtime import LayergeomError
from ..spectral.trends import N_BOOT, depth_thirds, trends_table
from . import verdicts as V
from .anchors import anchor_means, nanmean, nanmedian, percentile_interval, read_anchor_tables
from .catalogue import BY_ID, CLAIMS, statement

COLUMNS = ["model", "checkpoint", "step", "baseline", "claim", "paper", "kind", "class", "variant", "statement",
           "statistic", "estimate", "ci_low", "ci_high", "ci_level", "reference", "reference_ci_low",
           "reference_ci_high", "compared_with", "paper_value", "verdict", "reason", "source"]  # fmt: skip
POOLED = "pooled"  # the kind of the rows over every boundary kind together
ALL_CLASSES = "all"  # the class of the A2 row over every (layer, class)
EXPRESSIVE = "mlp"  # Paper A's more expressive class
VARIANTS = ("update", "full")
NO_NULL = "no init checkpoint in this config (a checkpoint with init: true, or at step 0)"
NO_TRAINED = "no trained checkpoint: every checkpoint of this model is a random-init null model"

NAN3 = (math.nan, math.nan, math.nan)


@dataclass
class Checkpoint:
    """One checkpoint's folder and its tables, each read once (None where the file is missing)."""

    name: str
    path: Path
    null: bool = False
    step: int | None = None

    def table(self, name: str) -> pd.DataFrame | None:
        return read_tsv_if_exists(self.path / name)

    @cached_property
    def spectra(self):
        return self.table("spectra.tsv")

    @cached_property
    def trends(self):
        return self.table("trends.tsv")

    @cached_property
    def cumulative(self):
        return self.table("cumulative.tsv")

    @cached_property
    def schur(self):
        return self.table("schur.tsv")

    @cached_property
    def coupling(self):
        return self.table("coupling.tsv")

    @cached_property
    def pooled(self):
        return self.table("tokenwise/pooled.tsv")

    @cached_property
    def anchor_tables(self) -> list[Path]:
        """tokenwise/L{layer}.tsv in layer order."""
        paths = list((self.path / "tokenwise").glob("L*.tsv"))
        return sorted((p for p in paths if p.stem[1:].isdigit()), key=lambda p: int(p.stem[1:]))


def checkpoint_step(path: Path, name: str) -> int | None:
    """The training step a checkpoint's key names, else its manifest's revision (as ``results.load``)."""
    step = step_of(name)
    manifest = path / "manifest.json"
    if step is None and manifest.exists():
        step = step_of(json.loads(manifest.read_text()).get("revision"))
    return step


def checkpoint_axis(cks: list[Checkpoint]) -> tuple[list[Checkpoint], Checkpoint | None]:
    """(the checkpoints along the training axis, the null model the pair claims compare with).

    The null model: the first random-init checkpoint in config order (init: true, a `config` model's, or one at
    step 0). The axis: the null model, then the checkpoints with a step by step, then the others in config
    order (`trained`)."""
    null = next((c for c in cks if c.null), None)
    order = sorted(range(len(cks)), key=lambda i: (cks[i] is not null, cks[i].step is None, cks[i].step or 0, i))
    return [cks[i] for i in order], null


@dataclass
class Settings:
    """The settings the claims read (the claims job's: seed, tokenwise.bootstrap and .ci_level, spectra.ci_level and
    the claims section)."""

    seed: int = 0
    n_boot: int = 1000  # tokenwise.bootstrap: resamples of the anchors
    tokenwise_level: float = 0.95
    spectra_level: float = 0.95
    rho_threshold: float = 0.5
    residual_angle_deg: float = 60.0
    complex_fraction: float = 0.5

    @classmethod
    def from_job(cls, s: dict) -> Settings:
        c = s["claims"]
        return cls(seed=int(s["seed"]), n_boot=int(s["tokenwise"]["bootstrap"]),
                   tokenwise_level=float(s["tokenwise"]["ci_level"]), spectra_level=float(s["spectra"]["ci_level"]),
                   rho_threshold=float(c["rho_threshold"]), residual_angle_deg=float(c["residual_angle_deg"]),
                   complex_fraction=float(c["complex_fraction"]))  # fmt: skip

    def thresholds(self) -> dict:
        return {"rho_threshold": _g(self.rho_threshold), "residual_angle_deg": _g(self.residual_angle_deg),
                "complex_fraction": _g(self.complex_fraction)}  # fmt: skip


def _g(x: float) -> str:
    return f"{x:g}"


def _seed(settings: Settings, *names: str) -> list[int]:
    """A seed stream per (purpose, checkpoint): the same whatever the other checkpoints or the config order."""
    return [settings.seed, *(zlib.crc32(n.encode()) for n in names)]


@dataclass
class Rows:
    """The rows of one model's claims table, in the making."""

    model: str
    settings: Settings
    rows: list[dict] = field(default_factory=list)

    def add(self, claim: str, ck: Checkpoint | None, verdict: V.Verdict, *, baseline: Checkpoint | None = None,
            kind: str = "", cls: str = "", variant: str = "", est=NAN3, level: float = math.nan, ref=NAN3,
            compared_with: str = "", source: str = "") -> None:  # fmt: skip
        c = BY_ID[claim]
        self.rows.append({
            "model": self.model, "checkpoint": ck.name if ck else "", "step": ck.step if ck else None,
            "baseline": baseline.name if baseline else "", "claim": claim, "paper": c.paper, "kind": kind,
            "class": cls, "variant": variant, "statement": statement(c, self.settings.thresholds()),
            "statistic": c.statistic, "estimate": est[0], "ci_low": est[1], "ci_high": est[2],
            "ci_level": level if math.isfinite(est[1]) else math.nan, "reference": ref[0],
            "reference_ci_low": ref[1], "reference_ci_high": ref[2], "compared_with": compared_with,
            "paper_value": c.paper_value, "verdict": verdict.verdict, "reason": verdict.reason, "source": source,
        })  # fmt: skip


def _f(x) -> float:
    return float(x) if x is not None and not pd.isna(x) else math.nan


# ---- Paper A ---------------------------------------------------------------------------------------------------
ANCHOR_SOURCE = "tokenwise/L{layer}.tsv"


def _a_claims(out: Rows, ck: Checkpoint) -> None:
    s = out.settings
    df = read_anchor_tables(ck.anchor_tables) if ck.anchor_tables else None
    means = anchor_means(df, n_boot=s.n_boot, seed=_seed(s, "anchors", ck.name)) if df is not None else None
    if means is None or not means.classes:
        why = V.not_applicable(f"no per-anchor tokenwise tables of a restricted class under {ck.path / 'tokenwise'}")
        for claim in (
            "A1.tokenwise_aligned",
            "A1.tokenwise_aligned_abs",
            "A2.residual_angle",
            "A3.residual_projects_less",
            "A5.expressive_smaller_residual",
            "A6.middle_largest_residual",
        ):
            out.add(claim, ck, why, source=ANCHOR_SOURCE)  # fmt: skip
    else:
        _a_anchor_claims(out, ck, means)
    _a_rho_claims(out, ck)


def _stat(means: tuple[dict, dict], fn, level: float) -> tuple[float, float, float]:
    """(estimate, ci_low, ci_high) of a statistic of the layer means: `means` holds the estimates' (L,) and the
    resamples' (B, L) arrays by name, fn maps such a dict to the statistic ((), or (B,) for the resamples)."""
    est = float(fn(means[0]))
    lo, hi = percentile_interval(np.asarray(fn(means[1]), dtype=np.float64), level)
    return est, lo, hi


def _a_anchor_claims(out: Rows, ck: Checkpoint, m) -> None:
    """The Paper A claims read on the per-anchor tables' layer means (`m`: ``anchors.AnchorMeans``)."""
    s, level, src = out.settings, out.settings.tokenwise_level, ANCHOR_SOURCE
    no_boot = " (tokenwise.bootstrap: 0)" if s.n_boot == 0 else ""

    def add(claim, cls, arrays, fn, side, *, ref=0.0, opposite=0.0, what, compared_with="0"):
        est = _stat(arrays, fn, level)
        v = V.threshold(*est, ref, side, opposite=opposite, what=what)
        if v.verdict == V.INCONCLUSIVE and no_boot:
            v = V.Verdict(v.verdict, v.reason + no_boot)
        out.add(claim, ck, v, cls=cls, est=est, level=level, ref=(ref, math.nan, math.nan),
                compared_with=compared_with, source=src)  # fmt: skip

    def read(claim, cls, metrics, fn, side, **kw):
        """A claim on one class's layer means of `metrics`; not applicable where the tables lack a column."""
        missing = [k for k in metrics if (cls, k) not in m.estimate]
        if missing:
            out.add(claim, ck, V.not_applicable(f"the per-anchor tables have no column for {missing}"), cls=cls,
                    source=src)  # fmt: skip
            return
        add(claim, cls, ({k: m.estimate[(cls, k)] for k in metrics}, {k: m.boot[(cls, k)] for k in metrics}), fn,
            side, **kw)  # fmt: skip

    for cls in m.classes:
        for claim, (tok, res), conv in (("A1.tokenwise_aligned", ("tok_d", "res_d"), "delta"),
                                        ("A1.tokenwise_aligned_abs", ("tok_a", "res_a"), "absolute")):  # fmt: skip
            read(claim, cls, (tok, res), lambda d, t=tok, r=res: nanmedian(d[t] - d[r]), +1,
                 what=f"|cos(u, t)| − |cos(u, r)| ({conv})")  # fmt: skip
    angle = {"ref": s.residual_angle_deg, "opposite": None, "what": "median angle of r (°)",
             "compared_with": "threshold"}  # fmt: skip
    for cls in m.classes:
        read("A2.residual_angle", cls, ("angle_res",), lambda d: nanmedian(d["angle_res"]), +1, **angle)
    have = [c for c in m.classes if (c, "angle_res") in m.estimate]  # every (layer, class): the classes side by side
    if have:
        both = (np.concatenate([m.estimate[(c, "angle_res")] for c in have]),
                np.concatenate([m.boot[(c, "angle_res")] for c in have], axis=1))  # fmt: skip
        add("A2.residual_angle", ALL_CLASSES, ({"a": both[0]}, {"a": both[1]}), lambda d: nanmedian(d["a"]), +1,
            **angle)  # fmt: skip
    for cls in m.classes:
        read("A3.residual_projects_less", cls, ("proj_full", "proj_res"),
             lambda d: nanmedian(d["proj_full"] - d["proj_res"]), +1, what="π(u) − π(r)")  # fmt: skip
    others = [c for c in m.classes if c != EXPRESSIVE]
    if EXPRESSIVE not in m.classes or not others:
        why = f"no {EXPRESSIVE} class (tokenwise.classes)" if others else f"no class besides {EXPRESSIVE}"
        for cls in others or [""]:
            out.add("A5.expressive_smaller_residual", ck, V.not_applicable(why), cls=cls, source=src)
    for cls in others if EXPRESSIVE in m.classes else []:
        arrays = ({"c": m.estimate[(cls, "relerr")], "x": m.estimate[(EXPRESSIVE, "relerr")]},
                  {"c": m.boot[(cls, "relerr")], "x": m.boot[(EXPRESSIVE, "relerr")]})  # fmt: skip
        add("A5.expressive_smaller_residual", cls, arrays, lambda d: nanmedian(d["c"] - d["x"]), +1,
            what=f"RelErr({cls}) − RelErr({EXPRESSIVE})", compared_with=EXPRESSIVE)  # fmt: skip
    thirds = depth_thirds(m.layers, int(m.layers.max()) + 1)

    def gap(d, outer):
        """The middle third's mean RelErr minus outer(first third's, last third's) (np.fmax or np.fmin)."""
        t = {k: nanmean(d["r"][..., mask], axis=-1) for k, mask in thirds.items()}
        return t["middle"] - outer(t["first"], t["last"])

    for cls in m.classes:
        if not thirds["middle"].any():
            why = V.not_applicable(f"{len(m.layers)} layers have no middle third")
            out.add("A6.middle_largest_residual", ck, why, cls=cls, source=src)
            continue
        arrays = ({"r": m.estimate[(cls, "relerr")]}, {"r": m.boot[(cls, "relerr")]})
        est = _stat(arrays, lambda d: gap(d, np.fmax), level)
        low = _stat(arrays, lambda d: gap(d, np.fmin), level)
        v = V.threshold(*est, 0.0, +1, what="middle − the larger outer third")
        if v.verdict == V.FAILS and low[2] < 0:  # below both outer thirds: the middle has the smallest residuals
            v = V.Verdict(V.REVERSED, f"{v.reason}; middle − the smaller outer third {V.num(low[0])} "
                                      f"{V.interval(low[1], low[2])} < 0")  # fmt: skip
        out.add("A6.middle_largest_residual", ck, v, cls=cls, est=est, level=level, ref=(0.0, math.nan, math.nan),
                compared_with="outer thirds", source=src)  # fmt: skip


def _a_rho_claims(out: Rows, ck: Checkpoint) -> None:
    s, src = out.settings, "tokenwise/pooled.tsv"
    p = ck.pooled
    if p is None:
        out.add("A4.rho_relerr_kl", ck, V.not_applicable("no tokenwise/pooled.tsv"), source=src)
        out.add("A5.expressive_weaker_rho", ck, V.not_applicable("no tokenwise/pooled.tsv"), source=src)
        return
    rho = {r["class"]: (_f(r["spearman_rho"]), _f(r["rho_ci_low"]), _f(r["rho_ci_high"])) for _, r in p.iterrows()}
    classes = [c for c in rho if c not in ("identity", "global")]
    thr = s.rho_threshold
    for cls in classes:
        v = V.threshold(*rho[cls], thr, +1, opposite=0.0, what="ρ(RelErr, KL)")
        out.add("A4.rho_relerr_kl", ck, v, cls=cls, est=rho[cls], level=s.tokenwise_level,
                ref=(thr, math.nan, math.nan), compared_with="threshold", source=src)  # fmt: skip
    others = [c for c in classes if c != EXPRESSIVE]
    if EXPRESSIVE not in rho or not others:
        why = f"no {EXPRESSIVE} class" if EXPRESSIVE not in rho else f"no class besides {EXPRESSIVE}"
        for cls in others or [""]:
            out.add("A5.expressive_weaker_rho", ck, V.not_applicable(f"{why} in tokenwise/pooled.tsv"), cls=cls,
                    source=src)  # fmt: skip
        return
    for cls in others:
        v = V.apart(rho[EXPRESSIVE], rho[cls], -1, names=(f"ρ {EXPRESSIVE}", f"ρ {cls}"))
        out.add("A5.expressive_weaker_rho", ck, v, cls=cls, est=rho[EXPRESSIVE], level=s.tokenwise_level,
                ref=rho[cls], compared_with=cls, source=src)  # fmt: skip


# ---- Paper B: spectra ------------------------------------------------------------------------------------------
GRADIENTS = (("B1.realign_rises", "self_realign", +1), ("B2.henrici_falls", "henrici", -1))


def trend_rows(ck: Checkpoint, level: float, seed: int) -> dict[str, pd.DataFrame]:
    """kind -> its rows of trends.tsv (metric-indexed), and the same over every boundary (`pooled`), computed from
    spectra.tsv as trends.tsv is (methods §2.8)."""
    out = {}
    if ck.trends is not None:
        for kind, part in ck.trends.groupby("kind", sort=False):
            out[kind] = part.set_index("metric")
    if ck.spectra is not None and len(ck.spectra):
        pooled = trends_table(ck.spectra.assign(kind=POOLED), level=level, seed=seed)
        out[POOLED] = pooled.set_index("metric")
    return out


def _trend(rows: dict, kind: str, metric: str, col: str) -> tuple[float, float, float]:
    if kind not in rows or metric not in rows[kind].index:
        return NAN3
    r = rows[kind].loc[metric]
    return _f(r[col]), _f(r.get(f"{col}_ci_low")), _f(r.get(f"{col}_ci_high"))


def _kinds(cks: list[Checkpoint]) -> list[str]:
    """Every boundary kind of the model's spectra tables in depth order, then `pooled`."""
    kinds = [k for c in cks if c.spectra is not None for k in c.spectra["kind"]]
    return [*dict.fromkeys(kinds), POOLED]


def _b_spectral_claims(out: Rows, ck: Checkpoint, kinds: list[str], trends: dict) -> None:
    s = out.settings
    cf = s.complex_fraction
    for kind in kinds:
        src = "spectra.tsv (all kinds; trends as trends.tsv)" if kind == POOLED else "trends.tsv"
        if kind not in trends:
            why = V.not_applicable(f"no {'spectra.tsv' if kind == POOLED else 'trends.tsv row'} for {kind}")
            for claim in ("B1.rotation_early", "B1.realign_rises", "B2.henrici_falls"):
                out.add(claim, ck, why, kind=kind, source=src)
            continue
        early = _trend(trends, kind, "frac_complex", "first_third")
        v = V.threshold(*early, cf, +1, opposite=cf, what="early complex fraction")
        out.add("B1.rotation_early", ck, v, kind=kind, est=early, level=s.spectra_level, ref=(cf, math.nan, math.nan),
                compared_with="threshold", source=src)  # fmt: skip
        for claim, metric, side in GRADIENTS:
            slope = _trend(trends, kind, metric, "slope")
            v = V.threshold(*slope, 0.0, side, opposite=0.0, what="slope")
            first, last = _trend(trends, kind, metric, "first_third")[0], _trend(trends, kind, metric, "last_third")[0]
            if v.verdict != V.NOT_APPLICABLE:
                v = V.Verdict(v.verdict, f"{v.reason}; thirds {V.num(first)} → {V.num(last)}")
            if v.verdict == V.INCONCLUSIVE and not math.isfinite(slope[1]):
                n = int(trends[kind].loc[metric, "n_boundaries"]) if metric in trends[kind].index else 0
                v = V.Verdict(V.INCONCLUSIVE, f"{v.reason}: {n} boundaries (the slope's bootstrap needs 3)")
            out.add(claim, ck, v, kind=kind, est=slope, level=s.spectra_level, ref=(0.0, math.nan, math.nan),
                    compared_with="0", source=src)  # fmt: skip


def _full_depth(table: pd.DataFrame | None, **where) -> pd.Series | None:
    """The row at the largest depth of `table` where each column equals its value (floats: np.isclose)."""
    if table is None:
        return None
    t = table
    for col, val in where.items():
        if col not in t:
            return None
        t = t[np.isclose(t[col], val)] if isinstance(val, float) else t[t[col] == val]
    return t.loc[t["depth"].idxmax()] if len(t) else None


def _erank(row: pd.Series | None) -> tuple[float, float, float]:
    if row is None:
        return NAN3
    return _f(row["erank"]), _f(row.get("erank_ci_low")), _f(row.get("erank_ci_high"))


def _b_cumulative_claims(out: Rows, ck: Checkpoint) -> None:
    s, cum = out.settings, ck.cumulative
    for variant in VARIANTS:
        rows = cum[cum["variant"] == variant] if cum is not None else None
        if rows is None or len(rows) < 2:
            why = "no cumulative.tsv" if cum is None else f"fewer than 2 depths of the {variant} variant"
            out.add("B3.erank_collapse", ck, V.not_applicable(why), variant=variant, source="cumulative.tsv")
            continue
        full, one = _erank(rows.loc[rows["depth"].idxmax()]), _erank(rows.loc[rows["depth"].idxmin()])
        v = V.apart(full, one, -1, names=("full depth", "depth 1"))
        if v.verdict == V.NOT_APPLICABLE and "log_norm" in rows:
            gone = rows[np.isneginf(rows["log_norm"].to_numpy(dtype=np.float64))]
            if len(gone):  # the product is exactly 0 from there on: no singular values to take an erank of
                first = gone.loc[gone["depth"].idxmin()]
                v = V.not_applicable(f"the product vanished at depth {int(first['depth'])} ({first.get('boundary', '')};"
                                     " log ‖C‖ = −inf): its erank is undefined")  # fmt: skip
        out.add("B3.erank_collapse", ck, v, variant=variant, est=full, level=s.spectra_level, ref=one,
                compared_with="depth 1", source="cumulative.tsv")  # fmt: skip
    sch = ck.schur
    for variant in VARIANTS:
        src = "schur.tsv"
        if sch is None:
            out.add("B4.schur_dissolves", ck, V.not_applicable("no schur.tsv"), variant=variant, source=src)
            continue
        a0 = _full_depth(sch, alpha=0.0, control="none", variant=variant)
        a1 = _full_depth(sch, alpha=1.0, control="none", variant=variant)
        if a0 is None or a1 is None:
            missing = " and ".join(f"α = {a}" for a, r in ((0, a0), (1, a1)) if r is None)
            out.add("B4.schur_dissolves", ck, V.not_applicable(f"schur.tsv has no {missing} (spectra.alphas)"),
                    variant=variant, source=src)  # fmt: skip
            continue
        orders = (_f(a0.get("erank_order_min")), _f(a0.get("erank_order_max")))
        v = V.schur_raises(_erank(a0), orders, _erank(a1))
        out.add("B4.schur_dissolves", ck, v, variant=variant, est=_erank(a0), level=s.spectra_level,
                ref=_erank(a1), compared_with="α = 1", source=src)  # fmt: skip


def _pair_claims(out: Rows, trained: Checkpoint, null: Checkpoint | None, kinds, trends: dict) -> None:
    """The learned claims of one trained checkpoint against the null model (null None: not applicable)."""
    s = out.settings
    for claim, metric, side in GRADIENTS:
        for kind in kinds:
            src = "trends.tsv" if kind != POOLED else "spectra.tsv (all kinds)"
            if null is None:
                out.add(f"{claim}_learned", trained, V.not_applicable(NO_NULL), kind=kind, source=src)
                continue
            t = _trend(trends[trained.name], kind, metric, "slope")
            n = _trend(trends[null.name], kind, metric, "slope")
            v = V.learned(t, n, side, names=(trained.name, null.name))
            lacking = [c.name for c in (trained, null) if kind not in trends[c.name]]
            if lacking:
                v = V.not_applicable(f"no {'spectra.tsv' if kind == POOLED else 'trends.tsv row'} for {kind} at "
                                     f"{' and '.join(lacking)}")  # fmt: skip
            out.add(f"{claim}_learned", trained, v, baseline=null, kind=kind, est=t, level=s.spectra_level, ref=n,
                    compared_with=null.name, source=src)  # fmt: skip
    for variant in VARIANTS:
        src = "cumulative.tsv"
        if null is None:
            out.add("B3.collapse_learned", trained, V.not_applicable(NO_NULL), variant=variant, source=src)
            continue
        t = _erank(_full_depth(trained.cumulative, variant=variant))
        n = _erank(_full_depth(null.cumulative, variant=variant))
        v = V.apart(t, n, -1, names=(trained.name, null.name))
        lacking = [c.name for c in (trained, null) if c.cumulative is None]
        if lacking:
            v = V.not_applicable(f"no cumulative.tsv at {' and '.join(lacking)}")
        out.add("B3.collapse_learned", trained, v, baseline=null, variant=variant, est=t, level=s.spectra_level,
                ref=n, compared_with=null.name, source=src)  # fmt: skip


def _no_trained(out: Rows, null: Checkpoint | None, kinds) -> None:
    """The pair and axis claims of a model without a trained checkpoint: one not-applicable row each."""
    why = V.not_applicable(NO_TRAINED)
    for claim, _, _ in GRADIENTS:
        for kind in kinds:
            out.add(f"{claim}_learned", None, why, baseline=null, kind=kind)
    for variant in VARIANTS:
        out.add("B3.collapse_learned", None, why, baseline=null, variant=variant)
    out.add("B5.coupling_grows", None, why, baseline=null)


# ---- Paper B: coupling ---------------------------------------------------------------------------------------
def significant_layers(co: pd.DataFrame) -> tuple[int, int, int]:
    """(FDR-significant layers by the per-layer test, or any boundary where the table has no per-layer test;
    layers; layers with any significant boundary)."""
    any_layer = int(co.loc[co["significant"].astype(bool), "layer"].nunique())
    per_layer = int(co.loc[co["significant_layer"].astype(bool), "layer"].nunique()) if "significant_layer" in co \
        else any_layer  # fmt: skip
    return per_layer, int(co["layer"].nunique()), any_layer


def _count_text(co: pd.DataFrame) -> str:
    per_layer, n, any_layer = significant_layers(co)
    return f"{per_layer} of {n} layers (any-boundary count {any_layer})"


def _b_coupling_sign(out: Rows, ck: Checkpoint) -> None:
    s, co, src = out.settings, ck.coupling, "coupling.tsv"
    claim = "B5.coupling_sign_operator"
    if co is None:
        out.add(claim, ck, V.not_applicable("no coupling.tsv"), source=src)
        return
    if not co["significant"].astype(bool).any():
        out.add(claim, ck, V.not_applicable("no FDR-significant coupling: no sign to follow the operator"),
                source=src)  # fmt: skip
        return
    groups = {g: co.loc[co["operator"] == g, "rho"].to_numpy(dtype=np.float64) for g in ("near-symmetric",
                                                                                          "non-normal")}  # fmt: skip
    groups = {g: x[np.isfinite(x)] for g, x in groups.items()}
    if min(len(x) for x in groups.values()) < 2:
        out.add(claim, ck, V.not_applicable("fewer than 2 boundaries with a ρ in an operator group"), source=src)
        return
    rng = np.random.default_rng(_seed(s, "coupling_sign", ck.name))
    boot = {g: x[rng.integers(0, len(x), size=(N_BOOT, len(x)))].mean(axis=1) for g, x in groups.items()}  # (B,)
    level = s.spectra_level

    def stat(g):
        return (float(groups[g].mean()), *percentile_interval(boot[g], level))

    diff = (stat("near-symmetric")[0] - stat("non-normal")[0],
            *percentile_interval(boot["near-symmetric"] - boot["non-normal"], level))  # fmt: skip
    v = V.sign_follows(diff, stat("near-symmetric"), stat("non-normal"))
    out.add(claim, ck, v, est=diff, level=level, ref=(0.0, math.nan, math.nan), compared_with="0", source=src)


def _b_coupling_axis(out: Rows, axis: list[Checkpoint], null: Checkpoint | None) -> None:
    src = "coupling.tsv"
    nulls = [c for c in axis if c.null or c is null]
    for ck in nulls:
        co = ck.coupling
        if co is None:
            out.add("B5.coupling_absent_init", ck, V.not_applicable("no coupling.tsv"), source=src)
            continue
        per_layer, n, any_layer = significant_layers(co)
        v = V.none_significant(per_layer, n)
        v = V.Verdict(v.verdict, f"{v.reason} (any-boundary count {any_layer})")
        out.add("B5.coupling_absent_init", ck, v, est=(per_layer, math.nan, math.nan), ref=(0.0, math.nan, math.nan),
                compared_with="0", source=src)  # fmt: skip
    if not nulls:
        out.add("B5.coupling_absent_init", None, V.not_applicable(NO_NULL), source=src)
    trained = [c for c in axis if not c.null and c is not null]
    if not trained:
        return  # _no_trained wrote its row
    last = trained[-1]
    if null is None:
        out.add("B5.coupling_grows", last, V.not_applicable(NO_NULL), source=src)
        return
    seq = [c for c in axis if c.coupling is not None]  # the whole axis, the null model first
    if null.coupling is None or last.coupling is None:
        miss = [c.name for c in (null, last) if c.coupling is None]
        out.add("B5.coupling_grows", last, V.not_applicable(f"no coupling.tsv for {miss}"), baseline=null, source=src)
        return
    counts = [significant_layers(c.coupling)[0] for c in seq]
    v = V.count_grows(counts[seq.index(last)], counts[0], names=(last.name, null.name))
    path = " → ".join(f"{c.name} {k}" for c, k in zip(seq, counts))
    dips = any(b < a for a, b in zip(counts, counts[1:]))
    v = V.Verdict(v.verdict, f"{path}{' (not monotone)' if dips else ''}" + (": no growth" if v.verdict == V.FAILS
                                                                            else ""))  # fmt: skip
    out.add("B5.coupling_grows", last, v, baseline=null, est=(counts[seq.index(last)], math.nan, math.nan),
            ref=(counts[0], math.nan, math.nan), compared_with=null.name, source=src)  # fmt: skip


# ---- the table -------------------------------------------------------------------------------------------------
def model_claims(model_dir: str | Path, checkpoints: list[str], nulls=(), settings: Settings | None = None,
                 model: str | None = None) -> pd.DataFrame:  # fmt: skip
    """The claims table of one model: its checkpoints' folders under `model_dir`, `checkpoints` in config order,
    `nulls` the random-init ones (besides any at step 0); columns ``COLUMNS``, rows in the catalogue's order,
    then along the checkpoint axis."""
    model_dir = Path(model_dir)
    s = settings or Settings()
    if not checkpoints:
        raise LayergeomError(f"{model_dir}: no checkpoints to read claims from")
    cks = []
    for name in checkpoints:
        path = model_dir / name
        step = checkpoint_step(path, name)
        cks.append(Checkpoint(name, path, null=name in set(nulls) or step == 0, step=step))
    axis, null = checkpoint_axis(cks)
    out = Rows(model or model_dir.name, s)
    kinds = _kinds(axis)
    trends = {ck.name: trend_rows(ck, s.spectra_level, s.seed) for ck in axis}
    trained = [c for c in axis if not c.null and c is not null]
    for ck in axis:
        _a_claims(out, ck)
        _b_spectral_claims(out, ck, kinds, trends[ck.name])
        _b_cumulative_claims(out, ck)
        _b_coupling_sign(out, ck)
    for ck in trained:
        _pair_claims(out, ck, null, kinds, trends)
    if not trained:
        _no_trained(out, null, kinds)
    _b_coupling_axis(out, axis, null)
    return order_rows(pd.DataFrame(out.rows, columns=COLUMNS), [c.name for c in axis])


def order_rows(table: pd.DataFrame, axis: list[str]) -> pd.DataFrame:
    """Rows by claim (the catalogue's order), then along the checkpoint axis, each keeping its kind/class order."""
    claim_pos = {c.id: i for i, c in enumerate(CLAIMS)}
    ck_pos = {c: i for i, c in enumerate(["", *axis])}
    key = pd.DataFrame({"c": table["claim"].map(claim_pos), "k": table["checkpoint"].map(ck_pos),
                        "i": np.arange(len(table))})  # fmt: skip
    table = table.iloc[key.sort_values(["c", "k", "i"]).index].reset_index(drop=True)
    table["step"] = pd.array([None if pd.isna(v) else int(v) for v in table["step"]], dtype="Int64")
    return table


def write_model_claims(output, checkpoints: list[str], nulls: list[str], settings: dict, model: str) -> pd.DataFrame:
    """Rule entry point: ``results/{model}/claims.tsv`` from the tables beside it (its folder is the model's)."""
    out = Path(output)
    table = model_claims(out.parent, checkpoints, nulls, Settings.from_job(settings), model=model)
    write_tsv(table, out)
    return table


def gather_claims(paths) -> pd.DataFrame:
    """``results/claims.tsv``: the models' claims tables one after the other (in the config's model order)."""
    frames = [read_tsv(p) for p in paths]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    table["step"] = pd.array([None if pd.isna(v) else int(v) for v in table["step"]], dtype="Int64")
    return table[COLUMNS]
