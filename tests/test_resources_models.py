"""The model jobs' requests (activations, Jacobians, tokenwise fits and KL: layergeom.resources): the shapes they
follow, the bytes they count against a measured peak, and the store writer that keeps its RSS to one batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT, load_script

from layergeom.resources import files, margins, model_jobs
from layergeom.resources.model_jobs import model_dims

#: Llama-3.1-8B's config.json (meta-llama/Llama-3.1-8B): 8,030,261,248 parameters, 266,240 of them in the norms
LLAMA_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
            "tie_word_embeddings": False}  # fmt: skip
LLAMA_8B_PARAMS = 8_030_261_248
#: Pythia-1.4B (GPT-NeoX, an ungated MLP of 4·d, tied no): 1,414,647,808 parameters, biases and norms included
PYTHIA_1_4B = {"model_type": "gpt_neox", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
               "num_attention_heads": 16, "vocab_size": 50304, "tie_word_embeddings": False}  # fmt: skip
PYTHIA_1_4B_PARAMS = 1_414_647_808


def test_model_dims_count_the_weights_of_known_models():
    """The parameter count from a config.json equals the published one but for the norms and biases (O(d) per
    block); the estimate from d and n_layers alone (a hub model before its download) bounds it from above."""
    llama = model_dims(LLAMA_8B)
    assert llama["params"] == LLAMA_8B_PARAMS - 266_240
    assert (llama["d_ff"], llama["kv_heads"], llama["gated"], llama["estimated"]) == (14336, 8, True, False)
    pythia = model_dims(PYTHIA_1_4B)
    assert not pythia["gated"]
    assert 0 < PYTHIA_1_4B_PARAMS - pythia["params"] < 24 * 16 * 2048  # biases and norms: a few d per block
    for cfg, true in ((LLAMA_8B, LLAMA_8B_PARAMS), (PYTHIA_1_4B, PYTHIA_1_4B_PARAMS)):
        est = model_dims(None, cfg["hidden_size"], cfg["num_hidden_layers"])
        assert est["estimated"] and true <= est["params"] < 2 * true, (cfg["model_type"], est["params"])
    assert model_dims(None) is None and model_dims(None, None, 32) is None


def test_model_dims_match_a_built_model():
    """The count matches the weights a random model of the config holds (every matrix; the norms are O(d))."""
    from layergeom.models import build_random

    bench = load_script(ROOT / "bench" / "resources_model_rates.py")
    cfg = bench.hf_config(128)
    model = build_random("llama", cfg, seed=0)
    total = sum(p.numel() for p in model.parameters())
    norms = sum(p.numel() for n, p in model.named_parameters() if "norm" in n)
    assert model_dims(cfg)["params"] == total - norms


def test_requests_grow_with_the_width_and_double_on_a_retry():
    """At the papers' width each model job asks for more than at SmolLM2's, and never less than the floor."""
    small, big = (model_dims({**LLAMA_8B, "hidden_size": d, "intermediate_size": 7 * d // 2, "head_dim": d // 32})
                  for d in (576, 4096))  # fmt: skip
    for dims in (small, big):
        assert model_jobs.activations_mem_mb(dims, n_windows=1000, window_tokens=128, batch_size=8, n_names=65,
                                             model_bytes=4, store_bytes=4,
                                             weight_bytes=4 * dims["params"]) >= margins.MIN_MB  # fmt: skip
    fit = dict(n_tokens=128000, n_pool=127000, n_anchors=512, k=64, classes=["diag", "global", "mlp"], store_bytes=4)
    assert model_jobs.tokenwise_fit_mem_mb(4096, **fit) > model_jobs.tokenwise_fit_mem_mb(576, **fit) > margins.MIN_MB
    assert model_jobs.tokenwise_fit_mem_mb(None, **fit) == margins.MIN_MB


def test_store_writer_keeps_one_batch_resident(tmp_path):
    """store.release_rows: a memmap written batch by batch and released keeps its RSS near one batch (200 MB written,
    < 40 MB more resident), the same write without it holds every page; the file's bytes are those written."""
    code = textwrap.dedent(f"""
        import sys, numpy as np
        sys.path.insert(0, {str(ROOT / "src")!r})
        from layergeom.store import release_rows
        def kb(key):
            return int(next(l for l in open("/proc/self/status") if l.startswith(key + ":")).split()[1])
        release = sys.argv[1] == "1"
        mm = np.lib.format.open_memmap(sys.argv[2], mode="w+", dtype=np.float32, shape=(50000, 1000))
        before = kb("VmRSS")
        for a in range(0, 50000, 1000):
            mm[a:a + 1000] = np.arange(a, a + 1000, dtype=np.float32)[:, None]
            if release:
                release_rows(mm, a, a + 1000)
        print((kb("VmHWM") - before) / 1024)
    """)  # fmt: skip
    grown = {}
    for release in (0, 1):
        path = tmp_path / f"x{release}.npy"
        out = subprocess.run([sys.executable, "-c", code, str(release), str(path)], capture_output=True, text=True,
                             check=True)  # fmt: skip
        grown[release] = float(out.stdout.split()[-1])
        import numpy as np

        x = np.load(path, mmap_mode="r")
        assert np.array_equal(x[:, 0], np.arange(50000, dtype=np.float32)) and np.array_equal(x[:, -1], x[:, 0])
    assert grown[0] > 180 and grown[1] < 40, grown


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """The four model jobs at d = 256 on 32 windows, one after the other in one process (bench/resources_model_rates.py
    --child-sequence): each job's peak RSS above the RSS before it, mapped pages included."""
    folder = tmp_path_factory.mktemp("jobs")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1",
           "OMP_WAIT_POLICY": "PASSIVE"}  # fmt: skip
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "resources_model_rates.py"), "--child-sequence",
                          str(folder), "256", "32"], capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), folder


@pytest.mark.slow
@pytest.mark.parametrize("job", ["activations", "tokenwise_fit", "tokenwise_kl", "jacobians"])
def test_counted_bytes_cover_the_measured_peak(measured, job):
    """What each job's memory model counts (before the interpreter's TORCH_BASE_MB and the SAFETY factor) covers the
    RSS the job added at its peak, and is no more than twice it plus a page-cache-sized 64 MB: the count follows
    the arrays the job holds, not a blanket margin."""
    runs, folder = measured
    bench = load_script(ROOT / "bench" / "resources_model_rates.py")
    dims = model_dims(json.loads((folder / "model" / "config.json").read_text()))
    wb = files.safetensors_bytes(folder / "model" / "model.safetensors")
    kw = bench.job_inputs(job, dims, 32, wb, bench.sections())
    counted = bench.counted(job, dims, kw)[0] / 2**20  # MiB, as the peaks
    for r in (r for r in runs if r["job"] == job):
        grown = r["peak_mb"] - r["before_mb"]
        assert grown <= counted <= 2 * grown + 64, (job, grown, counted)
