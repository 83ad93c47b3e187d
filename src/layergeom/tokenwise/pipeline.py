"""Paper A end to end, one function per workflow rule.

- :func:`fit_layer` (per model, checkpoint, layer): anchors, neighbourhoods, every class, per-anchor geometry
  -> ``tokenwise/L{layer}.tsv`` and the patched states ``tokenwise/L{layer}.patches.npz``;
- :func:`kl_checkpoint` (per model, checkpoint): the functional KL of every patch, one clean pass per window
  for all layers -> ``tokenwise/kl.tsv``;
- :func:`summarise` (per model, checkpoint): KL joined, means per (layer, class), Spearman rho with bootstrap
  CIs -> ``tokenwise.tsv``, ``tokenwise/anchors.tsv`` (per-anchor RelErr and KL), ``tokenwise/pooled.tsv``.

Importing this module does not import torch (the summary runs in the plotting environment).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from ..io import read_tsv, write_tsv
from ..resume.snapshots import NO_SNAPSHOTS, Snapshots
from ..runtime import LayergeomError, atomic_path
from ..store import ActivationStore

log = logging.getLogger("layergeom")

#: unit roundoff u = 2^-p of each activation-store dtype (p significant bits): relative rounding of a stored state
STORE_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}

#: required columns of tokenwise.tsv (docs/outputs.md), in order
SUMMARY_COLUMNS = [
    "layer",
    "class",
    "n_anchors",
    "cos_full_tok",
    "cos_full_res",
    "angle_tok_deg",
    "angle_res_deg",
    "proj_full",
    "proj_res",
    "relerr",
    "kl",
    "spearman_rho",
    "rho_ci_low",
    "rho_ci_high",
]
KEYS = ["layer", "class", "anchor", "row", "window", "position", "token_id", "d_model", "rank_used"]


def projection_ranks(cfg: dict) -> list[int]:
    """The k of every reported projection: the energy-vs-rank list, proj_k and 8 (always reported)."""
    return sorted({int(k) for k in cfg["energy_ranks"]} | {int(cfg["proj_k"]), 8})


def anchor_rows(store: ActivationStore, cfg: dict, seed: int) -> np.ndarray:
    """The anchors of a checkpoint: seeded non-BOS rows of the store, the same for every layer."""
    from .neighbours import sample_anchors

    return sample_anchors(np.flatnonzero(store.nonbos), cfg["n_anchors"], seed)


# ---- rule tokenwise_fit ---------------------------------------------------------------------------
def fit_layer(activations, layer: int, cfg: dict, *, seed: int, device: str = "cpu") -> tuple:
    """All classes at one block transition h_l -> h_{l+1}: per-anchor table and patched states.

    Returns (table, patches) with table a pandas DataFrame (one row per anchor and class) and patches a
    dict with ``t`` (n_classes, m, d) float32, ``classes``, ``rows`` (store rows of the anchors), ``layer``.
    """
    import pandas as pd
    import torch

    from .fits import fit_classes, fit_global, lowrank_rank
    from .geometry import geometry
    from .neighbours import knn

    store = ActivationStore(activations)
    names = store.block_inputs()
    if not 0 <= layer < len(names) - 1:
        raise LayergeomError(f"layer {layer} out of range: the model has {len(names) - 1} blocks")
    classes = list(cfg["classes"])
    ks = projection_ranks(cfg)
    pool = np.flatnonzero(store.nonbos)  # candidate neighbours: every non-BOS token
    rows = anchor_rows(store, cfg, seed)
    k = int(cfg["k"])
    if k + 1 > len(pool):
        raise LayergeomError(f"tokenwise.k={k} needs more than {len(pool)} non-BOS tokens; lower k or add windows")
    rank_used = lowrank_rank(cfg["rank"], k, store.d_model)
    if "lowrank" in classes and rank_used < int(cfg["rank"]):
        log.warning(
            "tokenwise.rank=%d is capped at %d (k=%d neighbours, d=%d): the lowrank class is fitted at rank %d "
            "(column rank_used)",
            cfg["rank"],
            rank_used,
            k,
            store.d_model,
            rank_used,
        )
    t0 = time.perf_counter()
    H0 = torch.from_numpy(np.ascontiguousarray(store.states(names[layer])[pool])).to(device)  # (n, d)
    H1 = torch.from_numpy(np.ascontiguousarray(store.states(names[layer + 1])[pool])).to(device)
    a_idx = torch.as_tensor(np.searchsorted(pool, rows), device=device)  # anchors' indices in the pool
    nbr = knn(H0, a_idx, k, leave_one_out=bool(cfg["leave_one_out"]))  # (m, k)
    X, Y = H0[nbr], H1[nbr]  # (m, k, d)
    xa, ya = H0[a_idx], H1[a_idx]  # (m, d)
    radius = (X[:, -1] - xa).norm(dim=1)
    warn_degenerate(radius, layer, k)
    t_knn = time.perf_counter() - t0
    gmap = fit_global(H0, H1, ridge=cfg["ridge"]) if "global" in classes else None
    seeds = np.random.SeedSequence([seed, layer]).generate_state(len(rows)).astype(np.int64)
    fits, loc = fit_classes(classes, X, Y, xa, cfg, q=max(ks), seeds=seeds, global_map=gmap)
    t_fit = time.perf_counter() - t0 - t_knn
    hp = loc.xa if loc is not None else None
    yp = loc.to_coords(ya) if loc is not None else None
    index = store.index[rows]
    tables, patches = [], []
    for name in classes:
        cols = {
            "layer": layer,
            "class": name,
            "anchor": np.arange(len(rows)),
            "row": rows,
            "window": index[:, 0],
            "position": index[:, 1],
            "token_id": index[:, 2],
            "knn_radius": radius.cpu().numpy(),
        }
        geo = geometry(
            xa, ya, fits[name], ks, proj_k=int(cfg["proj_k"]), primary=cfg["primary_convention"], hp=hp, yp=yp
        )
        cols.update(geo)
        cols["proj_baseline"] = int(cfg["proj_k"]) / store.d_model
        cols["d_model"] = store.d_model
        cols["rank_used"] = rank_used  # the lowrank class's rank after the cap min(tokenwise.rank, k, d)
        tables.append(pd.DataFrame(cols))
        patches.append(fits[name].t.float().cpu().numpy())
    log.info(
        "layer %d: %d anchors, k=%d, %d classes; kNN %.2f s, fits %.2f s, geometry %.2f s",
        layer,
        len(rows),
        k,
        len(classes),
        t_knn,
        t_fit,
        time.perf_counter() - t0 - t_knn - t_fit,
    )
    return pd.concat(tables, ignore_index=True), {
        "t": np.stack(patches),
        "classes": np.array(classes),
        "rows": rows,
        "layer": np.int64(layer),
    }


def warn_degenerate(radius, layer: int, k: int) -> int:
    """Warn when anchors' k-th neighbour is at distance 0 (repeated states: the neighbours come from
    tie-breaking, and the fits and ρ of that layer mean little); returns how many. Column ``knn_radius`` shows it."""
    n = int((radius == 0).sum())
    if n:
        log.warning("layer %d: %d of %d anchors have all k=%d neighbours at distance 0 (identical states, e.g. a "
                    "corpus of one repeated token): their neighbourhoods come from tie-breaking and this layer's "
                    "fits and rho are not meaningful (column knn_radius)", layer, n, len(radius), k)  # fmt: skip
    return n


def write_fits(activations, layer: int, cfg: dict, *, seed: int, device: str, out_table, out_patches) -> None:
    """Rule entry point: :func:`fit_layer` and write both outputs."""
    table, patches = fit_layer(activations, layer, cfg, seed=seed, device=device)
    write_tsv(table, out_table)
    with atomic_path(out_patches) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **patches)


# ---- rule tokenwise_kl ------------------------------------------------------------------------------
def kl_checkpoint(
    model_dir,
    activations,
    patch_files: list,
    *,
    device: str = "cpu",
    slow: bool = False,
    batch_rows: int,
    snapshots: Snapshots = NO_SNAPSHOTS,
):
    """KL of every patched state of every layer; one clean pass per window. Returns a DataFrame.

    ``snapshots`` (``layergeom.resume.snapshots.Snapshots``): resume the batched KL from its last snapshot, and save.
    """
    import pandas as pd
    import torch

    from ..adapters import get_adapter
    from ..models import load_model
    from .kl import patched_kl, patched_kl_slow

    store = ActivationStore(activations)
    loaded = [dict(np.load(p)) for p in patch_files]
    if not loaded:
        raise LayergeomError("no patched states to evaluate")
    rows = loaded[0]["rows"]
    for p in loaded:
        if not np.array_equal(p["rows"], rows):
            raise LayergeomError("patched states of different layers use different anchors; rerun tokenwise_fit")
    patches = {int(p["layer"]): p["t"] for p in loaded}
    classes = {int(p["layer"]): [str(c) for c in p["classes"]] for p in loaded}
    windows, positions = store.index[rows, 0], store.index[rows, 1]
    adapter = get_adapter(load_model(model_dir, device))
    if adapter.n_layers != len(store.block_inputs()) - 1:
        raise LayergeomError(f"{model_dir} has {adapter.n_layers} blocks but the activations have another depth")
    # the activations must come from these weights: compare one window's clean pass with the store
    w = int(windows[0])
    run = adapter.clean_run(
        torch.as_tensor(store.token_ids()[w])[None].to(adapter.device), torch.as_tensor(positions[:1])
    )
    names = store.block_inputs()
    ref = np.asarray(store.states(names[-1])[w * store.window_tokens : (w + 1) * store.window_tokens])
    err = float(np.abs(run.states[-1].float().cpu().numpy() - ref).max() / max(np.abs(ref).max(), 1e-30))
    # the same weights give the same states up to the store's rounding (unit roundoff u: 0 for float32)
    if err > 1e-3 + STORE_ROUNDOFF[store.dtype]:
        raise LayergeomError(f"the activations do not match the weights in {model_dir} (relative error {err:.2g})")
    t0 = time.perf_counter()
    if slow:
        kls = patched_kl_slow(adapter, store.token_ids(), windows, positions, patches)
    else:
        kls = patched_kl(
            adapter, store.token_ids(), windows, positions, patches, max_rows=batch_rows, snapshots=snapshots
        )
    log.info("KL for %d layers x %d anchors in %.1f s", len(patches), len(rows), time.perf_counter() - t0)
    frames = []
    for l, kl in kls.items():
        for i, name in enumerate(classes[l]):
            frames.append(
                pd.DataFrame({"layer": l, "class": name, "anchor": np.arange(len(rows)), "row": rows, "kl": kl[i]})
            )
    return pd.concat(frames, ignore_index=True)


def write_kl(
    model_dir, activations, patch_files, *, device: str, out, batch_rows: int, snapshot_s: float | None = None
) -> None:
    """Rule entry point: :func:`kl_checkpoint` into ``out``; with ``snapshot_s``, resumable after a kill (the KL
    done so far saved every that many seconds in ``.partial/`` next to ``out``, keyed by inputs and settings)."""
    import torch

    settings = {"device": str(device), "batch_rows": int(batch_rows), "threads": torch.get_num_threads()}
    snap = Snapshots.for_job(out, "tokenwise_kl", [model_dir, activations, *patch_files], settings, snapshot_s)
    table = kl_checkpoint(model_dir, activations, patch_files, device=device, batch_rows=batch_rows, snapshots=snap)
    write_tsv(table, out)
    snap.clear()


# ---- rule tokenwise_summary ---------------------------------------------------------------------------
def summarise(tables: list, kl, cfg: dict, *, seed: int) -> tuple:
    """Join the KL, average over anchors per (layer, class), add Spearman rho(RelErr, KL) with bootstrap CIs.

    tables: per-layer per-anchor DataFrames; kl: DataFrame (layer, class, anchor, kl).
    Returns (summary, anchors, pooled) DataFrames.
    """
    import pandas as pd

    from .stats import spearman_ci

    df = pd.concat(tables, ignore_index=True)
    df = df.merge(kl[["layer", "class", "anchor", "kl"]], on=["layer", "class", "anchor"], how="left", validate="1:1")
    n_boot, level = int(cfg["bootstrap"]), float(cfg["ci_level"])
    classes = list(dict.fromkeys(df["class"]))
    metrics = [c for c in df.columns if c not in KEYS and df[c].dtype.kind == "f"]
    out = []
    for (layer, name), g in df.groupby(["layer", "class"], sort=False):
        row = {"layer": int(layer), "class": name, "n_anchors": len(g)}
        for c in ("d_model", "rank_used"):
            if c in g:
                row[c] = int(g[c].iloc[0])
        row.update({c: float(np.nanmean(g[c])) if np.isfinite(g[c]).any() else np.nan for c in metrics})
        row["kl_median"] = float(np.nanmedian(g["kl"])) if np.isfinite(g["kl"]).any() else np.nan
        row["relerr_median"] = float(np.nanmedian(g["relerr"])) if np.isfinite(g["relerr"]).any() else np.nan
        boot_seed = np.random.SeedSequence([seed, int(layer), classes.index(name)])
        r = spearman_ci(g["relerr"], g["kl"], n_boot=n_boot, level=level, seed=boot_seed)
        row.update(spearman_rho=r.rho, rho_ci_low=r.ci_low, rho_ci_high=r.ci_high, rho_p=r.p_value, rho_n=r.n)
        rd = spearman_ci(g["relerr_delta"], g["kl"], n_boot=n_boot, level=level, seed=boot_seed.spawn(1)[0])
        row.update(spearman_rho_delta=rd.rho, rho_delta_ci_low=rd.ci_low, rho_delta_ci_high=rd.ci_high)
        out.append(row)
    summary = pd.DataFrame(out)
    summary = summary[SUMMARY_COLUMNS + [c for c in summary.columns if c not in SUMMARY_COLUMNS]]
    summary = summary.sort_values(["layer", "class"], key=lambda s: s.map(classes.index) if s.name == "class" else s)
    pooled = []
    for name in classes:
        g = df[df["class"] == name]
        r = spearman_ci(
            g["relerr"],
            g["kl"],
            n_boot=n_boot,
            level=level,
            seed=np.random.SeedSequence([seed, 10**6, classes.index(name)]),
        )
        pooled.append(
            {
                "class": name,
                "n": r.n,
                "spearman_rho": r.rho,
                "rho_ci_low": r.ci_low,
                "rho_ci_high": r.ci_high,
                "rho_p": r.p_value,
            }
        )
    anchors = df[["layer", "class", "anchor", "row", "window", "position", "relerr", "relerr_delta", "kl"]]
    return summary.reset_index(drop=True), anchors, pd.DataFrame(pooled)


def write_summary(tables, kl, cfg: dict, *, seed: int, out_summary, out_anchors, out_pooled) -> None:
    summary, anchors, pooled = summarise([read_tsv(p) for p in tables], read_tsv(kl), cfg, seed=seed)
    write_tsv(summary, out_summary)
    write_tsv(anchors, out_anchors)
    write_tsv(pooled, out_pooled)
