"""Reduced precision: bf16/fp16 checkpoints against fp32 within rounding bounds, reduced-precision and
reduced-boundary activation stores, and the store's temp() wiring in the DAG (docs/precision.md).

Rounding model of the bounds: a dtype with p significant bits rounds with relative error at most its unit
roundoff u = 2^-p (bfloat16 p=8: u = 3.9e-3; float16 p=11: u = 4.9e-4). The embedding lookup rounds the
stream once (≤ u); every sublayer step x + F(x) then rounds three things — its input, its weights and the
sum it adds to the stream — each by ≤ u relative, and propagates the earlier error through I + J_F, whose
gain is O(1) in these models. So after s steps the stream deviates from fp32 by at most u·(1 + 3s) relative
to its largest entry, and J̄_b, a smooth function of the same rounded weights and states, by at most the
bound of the stream after its own step.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from conftest import ROOT, TINY, tiny_model

from layergeom import config as lgconfig
from layergeom import materialize, models, store
from layergeom.adapters import FINAL, get_adapter
from layergeom.manifest import write_manifest
from layergeom.runtime import LayergeomError

U = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
WINDOWS = torch.randint(3, 512, (12, 24), generator=torch.Generator().manual_seed(0)).numpy()
SMALL_TOKENWISE = dict(k=12, n_anchors=40, energy_ranks=[1, 2, 4, 8], bootstrap=50, classes=["identity", "global"])


def stream_bound(dtype: str, steps: int) -> float:
    """u·(1 + 3s): the relative deviation from fp32 of the stream after s sublayer steps (module docstring)."""
    return U[dtype] * (1 + 3 * steps)


def rel_dev(a: np.ndarray, ref: np.ndarray) -> float:
    """max |a - ref| / max |ref|."""
    return float(np.abs(np.asarray(a, np.float64) - ref).max() / np.abs(ref).max())


# ---- checkpoints in bf16 / fp16 against fp32 ---------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The tiny llama materialised in each dtype (same seed), its activations, J̄_b and tokenwise numbers."""
    from schema_defaults import SEED

    from layergeom.spectral.jobs.jacobians import boundary_jacobians
    from layergeom.tokenwise.pipeline import fit_layer, kl_checkpoint

    tcfg = {**lgconfig.validate({"models": {"m": dict(TINY["llama"], checkpoints={"c": {}})}})["tokenwise"]}
    tcfg.update(SMALL_TOKENWISE)
    out = {}
    for dt in ("float32", "float16", "bfloat16"):
        d = tmp_path_factory.mktemp(dt)
        info = materialize.materialize("m", "c", dict(TINY["llama"], dtype=dt, checkpoints={"c": {"seed": 3}}), d / "m")
        model = models.load_model(d / "m")  # runs in the dtype it was materialised in
        ad = get_adapter(model)
        run = {"info": info, "param_dtype": next(model.parameters()).dtype, "weights": model.state_dict()}
        st = store.dump_activations(ad, WINDOWS, d / "acts", batch_size=5)
        run["states"] = {n: np.asarray(st.states(n)) for n in st.names}
        files = {"npy": "npy", "groups": "groups.npy", "json": "json", "tsv": "tsv"}
        outputs = {b: {k: d / f"{b}.{s}" for k, s in files.items()} for b in st.boundaries}
        settings = {"n_samples": 12, "samples": "last"}  # the last token of each window, as in context
        boundary_jacobians(ad, st, st.boundaries, outputs, settings, seed=SEED)
        run["J"] = {b: np.load(outputs[b]["npy"]) for b in st.boundaries}  # J̄_b as the job wrote it
        tables, patches = [], []
        for layer in range(ad.n_layers):
            table, p = fit_layer(d / "acts", layer, tcfg, seed=0)
            np.savez(d / f"L{layer}.npz", **p)
            tables.append(table)
            patches.append(d / f"L{layer}.npz")
        kl = kl_checkpoint(d / "m", d / "acts", patches, batch_rows=256)
        import pandas as pd

        df = pd.concat(tables).merge(kl[["layer", "class", "anchor", "kl"]], on=["layer", "class", "anchor"])
        run["tokenwise"] = df.groupby(["layer", "class"])[["relerr", "kl"]].mean()
        run["steps"] = {n: i for i, n in enumerate(st.names)}  # sublayer steps applied after the embedding
        out[dt] = run
    return out


def test_checkpoint_dtype_is_materialised_recorded_and_hashed(runs, tmp_path):
    ref = runs["float32"]["weights"]
    for dt in ("float16", "bfloat16"):
        r = runs[dt]
        assert r["info"]["dtype"] == dt and r["param_dtype"] == models.DTYPES[dt]
        assert r["info"]["weights_sha256"] != runs["float32"]["info"]["weights_sha256"]  # hashes are per dtype
        for name, w in r["weights"].items():  # normal init draws in the dtype = the fp32 draws rounded
            if w.is_floating_point():
                torch.testing.assert_close(w, ref[name].to(w.dtype), rtol=0, atol=0, msg=name)
    # an explicit dtype overrides the stored one (the Jacobians run in fp32)
    models.save_checkpoint(tiny_model("llama", dtype=torch.bfloat16), None, tmp_path, {"model": "t"})
    assert json.loads((tmp_path / "source.json").read_text())["dtype"] == "bfloat16"
    assert next(models.load_model(tmp_path).parameters()).dtype == torch.bfloat16
    assert next(models.load_model(tmp_path, dtype="float32").parameters()).dtype == torch.float32


def test_activations_deviate_from_fp32_by_rounding_only(runs):
    """0 < fp16 deviation < bf16 deviation ≤ u_bf16·(1 + 3s) at every boundary (s = steps after the embedding)."""
    ref = runs["float32"]["states"]
    for name, s in runs["float32"]["steps"].items():
        dev = {dt: rel_dev(runs[dt]["states"][name], ref[name]) for dt in U}
        assert 0 < dev["float16"] < dev["bfloat16"] <= stream_bound("bfloat16", s), (name, dev)
        assert dev["float16"] <= stream_bound("float16", s), (name, dev)


def test_mean_jacobians_deviate_from_fp32_by_rounding_only(runs):
    """J̄_b (computed in fp32 from the rounded weights and states): within the bound after its own step."""
    ref = runs["float32"]["J"]
    for b, J in ref.items():
        s = runs["float32"]["steps"][b] + 1
        dev = {dt: float(np.linalg.norm(runs[dt]["J"][b] - J) / np.linalg.norm(J)) for dt in U}
        assert 0 < dev["float16"] < dev["bfloat16"] <= stream_bound("bfloat16", s), (b, dev)


def test_tokenwise_numbers_track_the_dtype(runs):
    """RelErr and KL (fits on fp32-read states, KL from fp32 logits reduced in fp64) of the classes that are
    smooth in the states (no kNN, no SGD): fp16 closer to fp32 than bf16, neither identical."""
    ref = runs["float32"]["tokenwise"]
    dev = {dt: ((runs[dt]["tokenwise"] - ref).abs() / ref.abs()) for dt in U}
    assert (dev["float16"].to_numpy() > 0).all()
    assert (dev["float16"].to_numpy() < dev["bfloat16"].to_numpy()).all(), dev


# ---- the activation store in reduced precision --------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduced_precision_store_round_trip(tmp_path, dtype):
    """Stored values are the fp32 states rounded to the dtype (torch's round-to-nearest-even), read back as
    float32 by rows; statistics over them stream in float64 exactly as over the rounded array."""
    from layergeom.topology.graphs import streamed_correlation

    ad = get_adapter(tiny_model("llama"))
    st = store.dump_activations(ad, WINDOWS, tmp_path / "acts", batch_size=5, dtype=dtype)
    cap = ad.capture(torch.as_tensor(WINDOWS))
    assert st.dtype == dtype == json.loads((tmp_path / "acts" / "store.json").read_text())["dtype"]
    raw = np.load(tmp_path / "acts" / "L1.attn.npy", mmap_mode="r")
    assert raw.dtype == store.STORE_DTYPES[dtype] and raw.nbytes == len(raw) * ad.d_model * 2
    for name in st.names:
        rounded = cap[name].reshape(-1, ad.d_model).to(getattr(torch, dtype)).float().numpy()  # (n, d)
        v = st.states(name)
        assert v.shape == rounded.shape and v.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(v), rounded)
        rows = np.array([5, 0, 17, 200])
        np.testing.assert_array_equal(v[rows], rounded[rows])
        np.testing.assert_array_equal(v[10:30], rounded[10:30])
        exact = cap[name].reshape(-1, ad.d_model).numpy()
        assert 0 < rel_dev(v[:], exact) <= U[dtype]  # one rounding of each value
    corr = streamed_correlation(st.states("L1.mlp"), st.nonbos, chunk_tokens=7)
    np.testing.assert_allclose(corr, np.corrcoef(np.asarray(st.states("L1.mlp"), np.float64)[st.nonbos].T), atol=1e-12)


def test_bf16_bits_convert_exactly():
    x = torch.tensor([0.0, -0.0, 1.0, -2.5, 3.140625, 1e-30, 3e38, float("inf")], dtype=torch.bfloat16)
    bits = x.view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(store.bf16_bits_to_float32(bits), x.float().numpy())


def test_float16_store_overflow_is_clear(tmp_path):
    model = tiny_model("llama")
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(1e7)  # |states| ~ 1e5 > 65504, finite in fp32
    with pytest.raises(LayergeomError, match=r"exceed the range of a float16 store.*bfloat16"):
        store.dump_activations(get_adapter(model), WINDOWS[:2], tmp_path / "acts", dtype="float16")
    assert not (tmp_path / "acts").exists()
    st = store.dump_activations(get_adapter(model), WINDOWS[:2], tmp_path / "acts", dtype="bfloat16")
    assert np.isfinite(np.asarray(st.states("L0.attn"))).all()


# ---- the activation store with some boundaries -------------------------------------------------------
def test_block_inputs_store_serves_the_tokenwise_stage_and_refuses_the_rest(tmp_path):
    from layergeom.topology.pipeline import store_topology

    ad = get_adapter(tiny_model("llama"))
    full = store.dump_activations(ad, WINDOWS, tmp_path / "full")
    st = store.dump_activations(ad, WINDOWS, tmp_path / "acts", boundaries="block_inputs")
    assert st.names == ["L0.attn", "L1.attn", FINAL] and st.model_boundaries == full.boundaries
    assert st.block_inputs() == full.block_inputs()
    for n in st.names:
        np.testing.assert_array_equal(st.states(n), full.states(n))
    assert sorted(p.name for p in (tmp_path / "acts").glob("*.npy")) == [
        "L0.attn.npy",
        "L1.attn.npy",
        "final.npy",
        "index.npy",
    ]
    with pytest.raises(LayergeomError, match=r"L1\.mlp.*keeps only 2 of 4 boundaries.*block_inputs"):
        st.states("L1.mlp")
    with pytest.raises(LayergeomError, match=r"L0\.mlp is not in the activation store"):
        store_topology(st, "L0.mlp", {}, 0)
    # a store without a block input cannot serve the tokenwise stage
    some = store.dump_activations(ad, WINDOWS, tmp_path / "some", boundaries=["L0.attn", "L0.mlp"])
    assert some.boundaries == ["L0.attn", "L0.mlp"]
    with pytest.raises(LayergeomError, match=r"the tokenwise stage needs L1\.attn"):
        some.block_inputs()
    with pytest.raises(LayergeomError, match=r"\['L7\.mlp'\] are not boundaries"):
        store.dump_activations(ad, WINDOWS, tmp_path / "bad", boundaries=["L0.attn", "L7.mlp"])
    assert not (tmp_path / "bad").exists()
    # the manifest compares the model's boundaries, whatever the store kept, and records what it kept
    src = {"model": "t", "checkpoint": "c", "source": "init", "weights_sha256": "0", "n_layers": 2, "d_model": 32}
    win = {"corpus": "python-docs", "n_windows": 12, "window_tokens": 24}
    man = write_manifest(tmp_path / "m.json", source=src, windows=win, activations=st.path,
                         boundaries=full.boundaries, seed=0)  # fmt: skip
    assert man["activations_boundaries"] == ["L0.attn", "L1.attn"] and man["activations_dtype"] == "float32"


def test_block_inputs_of_a_block_per_layer_family(tmp_path):
    ad = get_adapter(tiny_model("gpt_neox"))  # parallel residual: one boundary L{l}.block per layer
    st = store.dump_activations(ad, WINDOWS[:2], tmp_path / "acts", boundaries="block_inputs")
    assert st.boundaries == st.model_boundaries == ["L0.block", "L1.block"]


def test_activations_settings_validate_and_override_per_model():
    cfg = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    cfg["models"]["tiny-llama"]["overrides"] = {"activations": {"dtype": "bfloat16", "boundaries": ["L0.attn"]}}
    cfg = lgconfig.validate(cfg)
    assert cfg["activations"] == {"batch_size": 8, "dtype": "float32", "boundaries": "all", "keep": True}
    assert lgconfig.model_section(cfg, "tiny-llama", "activations")["dtype"] == "bfloat16"
    assert cfg["models"]["tiny-llama"]["dtype"] == "float32"
    for bad, key in [({"dtype": "float8"}, "activations.dtype"), ({"boundaries": "some"}, "activations.boundaries")]:
        c = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
        c["activations"] = bad
        with pytest.raises(LayergeomError, match=re.escape(key)):
            lgconfig.validate(c)


# ---- the DAG: temp() stores and stages that need boundaries the store did not keep ---------------------
def _dry_run(tmp_path, activations: dict, *targets, overrides: dict | None = None) -> subprocess.CompletedProcess:
    cfg = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    cfg["activations"] = activations
    if overrides:
        cfg["models"]["tiny-llama"]["overrides"] = {"activations": overrides}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-n", "-d", str(tmp_path / "wd"), *targets]
    cmd += ["--configfile", str(tmp_path / "c.yaml")]  # last: it takes every argument after it
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.mark.dag
def test_store_is_temp_only_when_not_kept(tmp_path):
    removed = re.compile(r"Would remove temporary output (results/\S+/activations)$", re.M)
    kept = _dry_run(tmp_path, {})
    assert kept.returncode == 0, kept.stderr[-3000:]
    assert not removed.findall(kept.stdout + kept.stderr)
    dropped = _dry_run(tmp_path, {"keep": False})
    assert dropped.returncode == 0, dropped.stderr[-3000:]
    cfg = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    expect = {f"results/{m}/{c}/activations" for m, mc in cfg["models"].items() for c in mc["checkpoints"]}
    assert set(removed.findall(dropped.stdout + dropped.stderr)) == expect


@pytest.mark.dag
def test_dag_refuses_stages_whose_boundaries_were_not_kept(tmp_path):
    res = _dry_run(tmp_path, {"boundaries": "block_inputs"})
    assert res.returncode != 0
    assert re.search(r"the (spectra|topology) stage reads boundaries \['L0\.mlp', 'L1\.mlp'\]", res.stdout + res.stderr)
    ok = _dry_run(tmp_path, {"boundaries": "block_inputs"}, "results/tiny-llama/init/tokenwise.tsv")
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert re.search(r"^activations\s+1$", ok.stdout, re.M)


@pytest.mark.dag
def test_per_model_store_overrides_build_and_keep_is_global(tmp_path):
    over = _dry_run(tmp_path, {}, "results/tiny-llama/init/activations", overrides={"dtype": "bfloat16"})
    assert over.returncode == 0, over.stderr[-3000:]
    bad = _dry_run(tmp_path, {}, overrides={"keep": False})
    assert bad.returncode != 0
    assert "models.tiny-llama.overrides.activations.keep" in bad.stdout + bad.stderr


def test_kl_accepts_the_rounded_store_of_its_weights_and_refuses_other_weights(tmp_path):
    """The KL job compares one clean pass with the store: a bf16 store of the same weights passes (its rounding,
    ≤ u relative, is allowed for), the store of other weights does not."""
    from layergeom.tokenwise.pipeline import fit_layer, kl_checkpoint

    tcfg = {**lgconfig.validate({"models": {"m": dict(TINY["llama"], checkpoints={"c": {}})}})["tokenwise"]}
    tcfg.update(SMALL_TOKENWISE, classes=["identity"])
    mcfg = dict(TINY["llama"], checkpoints={"a": {"seed": 1}, "b": {"seed": 2}})
    for ck in ("a", "b"):
        materialize.materialize("m", ck, mcfg, tmp_path / ck)
    store.dump_activations(get_adapter(models.load_model(tmp_path / "a")), WINDOWS, tmp_path / "acts", dtype="bfloat16")
    patches = []
    for layer in range(2):
        np.savez(tmp_path / f"L{layer}.npz", **fit_layer(tmp_path / "acts", layer, tcfg, seed=0)[1])
        patches.append(tmp_path / f"L{layer}.npz")
    assert np.isfinite(kl_checkpoint(tmp_path / "a", tmp_path / "acts", patches, batch_rows=256)["kl"]).all()
    with pytest.raises(LayergeomError, match="do not match the weights"):
        kl_checkpoint(tmp_path / "b", tmp_path / "acts", patches, batch_rows=256)
