"""Rates and peak memory of the model jobs (activations, Jacobians, tokenwise fits and KL), for their `runtime` and
`mem_mb` (run by hand).

``layergeom.resources`` (the ``*_bytes`` counts and the ``*_work`` terms) cites this bench; its fitted rates are not
used yet (the model jobs' runtimes are the profile's). On a random Llama-shaped checkpoint
at each width of `--dims` (d_ff = 3.5·d, heads of 64 with 4 query heads per key-value head, 2 blocks, a vocabulary
of 8192: the papers' 8B shapes scaled down) and each corpus size of `--windows` (windows of 128 random tokens), each
job's own function runs in a fresh process with the schema's default settings, one after the other, as the
workflow runs them: ``store.dump_activations``, ``tokenwise.pipeline.write_fits`` (layers 0 and 1),
``tokenwise.pipeline.write_kl``, ``spectral.jobs.jacobians.boundary_jacobians`` (every boundary). Per job:

- its process's wall seconds (imports included, as Snakemake's benchmark counts them) and CPU seconds, fitted as a
  start plus seconds per unit of each of its work terms (``layergeom.resources.model_jobs.*_work``; non-negative
  least squares on relative errors), then **anchored**: a job measured at the papers' width (`--anchor-run`, a run of
  bench/configs/papers_shape.yaml: Llama-3.1-8B's shapes with 2 blocks) that took longer than the fit says gets
  its largest term's rate raised to reach that time (a job that asks for less than it takes is killed at its limit);
- its peak RSS (``ru_maxrss``: the kernel's high-water mark, mapped file pages included) and largest anonymous RSS
  (sampled every 50 ms), against the bytes ``layergeom.resources`` counts for it and its request.

Writes bench/results/resources_model_rates.json. Threads: one (THREAD_VARS, ``torch.set_num_threads(1)``), as
bench/resources_rates.py: a job with more runs faster than its runtime says.

    OMP_WAIT_POLICY=PASSIVE python bench/resources_model_rates.py [--dims 256 512 1024] [--windows 32 96] \\
        [--extra 2048:32] [--anchor-run /work/runs/papers_shape]
    python bench/resources_model_rates.py --refit [--anchor-run DIR] [--compare RUN=CONFIG ...]   # from the stored
    #   timings: the rates again, the counts of this checkout, and finished runs' jobs against their requests
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness import RESULTS, ROOT, machine, parser, status_kb, write_json

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
RESULT = RESULTS / "resources_model_rates.json"
PAPERS_SHAPE = ROOT / "bench" / "configs" / "papers_shape.yaml"
T = 128  # tokens per window
VOCAB = 8192
JOBS = ("activations", "tokenwise_fit", "tokenwise_kl", "jacobians")
#: the papers-shape run's benchmark files of each job (their largest wall time anchors the rates)
ANCHOR_GLOBS = {
    "activations": "benchmarks/activations/*/*.tsv",
    "tokenwise_fit": "benchmarks/tokenwise_fit/*/*/L*.tsv",
    "tokenwise_kl": "benchmarks/tokenwise_kl/*/*.tsv",
    "jacobians": "benchmarks/spectra_jacobians/*/*.tsv",
}


def hf_config(d: int) -> dict:
    """Llama-3.1-8B's shapes at width d: d_ff = 3.5·d (a multiple of 64), heads of 64, 4 query heads per key-value
    head, 2 blocks, untied embeddings."""
    heads = max(4, d // 64)
    return {"model_type": "llama", "vocab_size": VOCAB, "hidden_size": d, "intermediate_size": 64 * round(3.5 * d / 64),
            "num_hidden_layers": 2, "num_attention_heads": heads, "num_key_value_heads": heads // 4, "head_dim": d // heads,
            "hidden_act": "silu", "rms_norm_eps": 1e-5, "max_position_embeddings": 4096, "tie_word_embeddings": False}  # fmt: skip


def sections(cfg_model: dict | None = None, extra: dict | None = None) -> dict:
    """The schema defaults of the tokenwise, spectra and activations sections (a validated one-model config)."""
    from layergeom import config as lgconfig

    model = cfg_model or {"source": "config", "family": "llama", "hf_config": hf_config(64),
                          "checkpoints": {"init": {"init": True}}, "tokenizer": {"train_bpe": True}}  # fmt: skip
    cfg = lgconfig.validate({"corpus": {"source": "python-docs"}, "models": {"m": model}, **(extra or {})})
    return {s: lgconfig.model_section(cfg, "m", s) for s in ("tokenwise", "spectra", "activations")} | {"config": cfg}


# ---- the job processes --------------------------------------------------------------------------------------
def child(job: str, folder: str) -> None:
    """One job in this process (one thread): prints {"base_mb", "base_anon_mb", "seconds"} as its last line."""
    import numpy as np  # noqa: F401
    import torch
    import transformers  # noqa: F401
    from transformers import LlamaForCausalLM  # noqa: F401

    from layergeom import models, store  # noqa: F401
    from layergeom.adapters import get_adapter  # noqa: F401
    from layergeom.spectral.jobs import common, convergence, cumulative, jacobians, schur, table  # noqa: F401
    from layergeom.tokenwise.pipeline import write_fits, write_kl  # noqa: F401

    torch.set_num_threads(1)
    base, base_anon = status_kb("self", "VmRSS") / 1024, status_kb("self", "RssAnon") / 1024  # MiB
    t = time.perf_counter()
    run_job(job, Path(folder))
    print(json.dumps({"base_mb": base, "base_anon_mb": base_anon, "seconds": time.perf_counter() - t}))


def run_job(job: str, f: Path) -> None:
    """One job's function on the model, windows and store in folder f, with the schema's default settings."""
    import numpy as np

    from layergeom import models, store
    from layergeom.adapters import get_adapter
    from layergeom.spectral.jobs.jacobians import boundary_jacobians
    from layergeom.tokenwise.pipeline import write_fits, write_kl

    s = sections()
    if job == "activations":
        windows = np.load(f / "windows.npy")
        st = s["activations"]
        store.dump_activations(get_adapter(models.load_model(f / "model")), windows, f / "store",
                               batch_size=st["batch_size"], dtype=st["dtype"], boundaries=st["boundaries"],
                               snapshot_s=600.0, resume_inputs=[f / "model" / "model.safetensors", f / "windows.npy"])  # fmt: skip
    elif job.startswith("tokenwise_fit"):
        layer = int(job.rsplit("_", 1)[1][1:])
        write_fits(f / "store", layer, s["tokenwise"], seed=0, device="cpu", out_table=f / f"L{layer}.tsv",
                   out_patches=f / f"L{layer}.patches.npz")  # fmt: skip
    elif job == "tokenwise_kl":
        write_kl(f / "model", f / "store", [f / "L0.patches.npz", f / "L1.patches.npz"], device="cpu",
                 batch_rows=s["tokenwise"]["kl_batch_rows"], out=f / "kl.tsv", snapshot_s=600.0)  # fmt: skip
    elif job == "jacobians":
        names = ["L0.attn", "L0.mlp", "L1.attn", "L1.mlp"]
        out = {n: {k: f / "jac" / f"{n}.{k}" for k in ("npy", "groups", "json", "tsv")} for n in names}
        boundary_jacobians(get_adapter(models.load_model(f / "model")), store.ActivationStore(f / "store"),
                           names, out, dict(s["spectra"]), seed=0, weights=f / "model" / "model.safetensors")  # fmt: skip
    else:
        raise SystemExit(f"unknown job {job}")


def _reset_peak() -> None:
    """Free what is freed (the garbage collector, glibc's heap) and reset the kernel's peak RSS to the RSS now."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    Path("/proc/self/clear_refs").write_text("5")


def child_sequence(folder: str, d: int, n_windows: int) -> None:
    """The four jobs one after the other in this process, on a model and store made here (a cheaper measurement
    than a process per job, for the tests): per job, its peak RSS above the RSS before it (the kernel's high-water
    mark reset in between; MALLOC_MMAP_THRESHOLD_ set by the caller returns freed arrays at once). Prints a JSON
    list as its last line."""
    import numpy as np
    import torch
    import transformers.models.llama.modeling_llama  # noqa: F401  (imported before the first job is measured)

    import layergeom.spectral.jobs.common  # noqa: F401
    import layergeom.spectral.jobs.convergence  # noqa: F401
    import layergeom.spectral.jobs.cumulative  # noqa: F401
    import layergeom.spectral.jobs.jacobians  # noqa: F401
    import layergeom.spectral.jobs.schur  # noqa: F401
    import layergeom.spectral.jobs.table  # noqa: F401
    import layergeom.tokenwise.fits  # noqa: F401
    import layergeom.tokenwise.kl  # noqa: F401
    from layergeom import models

    torch.set_num_threads(1)
    f = Path(folder)
    model = models.build_random("llama", hf_config(d), seed=0)
    model.save_pretrained(f / "model", safe_serialization=True, max_shard_size="1000GB")
    del model
    np.save(f / "windows.npy", np.random.default_rng(0).integers(0, VOCAB, size=(n_windows, T)))
    out = []
    for job in ("activations", "tokenwise_fit_L0", "tokenwise_fit_L1", "tokenwise_kl", "jacobians"):
        _reset_peak()
        before = status_kb("self", "VmRSS") / 1024
        run_job(job, f)
        out.append({"job": job.rsplit("_L", 1)[0], "d": d, "n_windows": n_windows, "before_mb": before,
                    "peak_mb": status_kb("self", "VmHWM") / 1024})  # fmt: skip
    print(json.dumps(out))


def run_child(job: str, folder: Path) -> dict:
    """The job in a fresh process: its wall and CPU seconds, peak RSS (ru_maxrss) and largest anonymous RSS (MiB)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_WAIT_POLICY": "PASSIVE", **{k: "1" for k in THREAD_VARS}}
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, __file__, "--child", job, str(folder)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    anon, stop = [0], threading.Event()

    def sample():
        while not stop.is_set():
            anon[0] = max(anon[0], status_kb(p.pid, "RssAnon") or 0)  # 0 once the process is gone
            stop.wait(0.05)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    streams = {}
    readers = [threading.Thread(target=lambda k=k: streams.__setitem__(k, getattr(p, k).read()), daemon=True)
               for k in ("stdout", "stderr")]  # fmt: skip
    for r in readers:
        r.start()
    _, status, ru = os.wait4(p.pid, 0)  # the child's own rusage: its CPU time and peak RSS
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    stop.set()
    for r in readers:
        r.join()
    if p.returncode != 0:
        raise RuntimeError(f"{job} failed:\n{streams['stderr'][-3000:]}")
    rec = json.loads(streams["stdout"].strip().splitlines()[-1])
    return rec | {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_mb": ru.ru_maxrss / 1024,
                  "anon_peak_mb": anon[0] / 1024}  # fmt: skip


# ---- what layergeom.resources counts for a run ----------------------------------------------------------------
def job_inputs(job: str, dims: dict, n_windows: int, weight_bytes: float, s: dict) -> dict:
    """The keyword arguments of the job's ``*_bytes`` and ``*_work`` functions in layergeom.resources (what
    rules/common.smk passes them), for a store of n_windows windows of T tokens."""
    from layergeom.resources import model_jobs

    tw, sp, act = s["tokenwise"], s["spectra"], s["activations"]
    N = n_windows * T
    if job == "activations":
        return {"n_windows": n_windows, "window_tokens": T, "batch_size": act["batch_size"],
                "n_names": model_jobs.store_names(2 * dims["n_layers"]), "model_bytes": 4, "store_bytes": 4,
                "weight_bytes": weight_bytes}  # fmt: skip
    if job == "tokenwise_fit":
        return {"n_tokens": N, "n_pool": n_windows * (T - 1), "n_anchors": tw["n_anchors"], "k": tw["k"],
                "classes": tw["classes"], "store_bytes": 4}  # fmt: skip
    if job == "tokenwise_kl":
        return {"n_windows": n_windows, "window_tokens": T, "n_anchors": tw["n_anchors"],
                "n_classes": len(tw["classes"]), "batch_rows": tw["kl_batch_rows"], "model_bytes": 4,
                "weight_bytes": weight_bytes}  # fmt: skip
    n_samples, _ = model_jobs.jacobian_sample_count(n_windows, T, sp)
    return {"n_samples": n_samples, "n_tokens": N, "window_tokens": T, "n_groups": min(sp["n_groups"], n_windows),
            "spectra": sp, "store_bytes": 4, "model_bytes": 4, "weight_bytes": weight_bytes}  # fmt: skip


def counted(job: str, dims: dict, kw: dict) -> tuple[float, int, dict]:
    """(counted bytes, request MB, work terms) of a job."""
    from layergeom.resources import model_jobs

    kinds = ["attn", "mlp"] * dims["n_layers"]
    if job == "activations":
        return (
            model_jobs.activations_bytes(dims, **kw),
            model_jobs.activations_mem_mb(dims, **kw),
            model_jobs.activations_work(dims, **kw),
        )
    if job == "tokenwise_fit":
        d = dims["d"]
        return (
            model_jobs.tokenwise_fit_bytes(d, **kw),
            model_jobs.tokenwise_fit_mem_mb(d, **kw),
            model_jobs.tokenwise_fit_work(d, **kw),
        )
    if job == "tokenwise_kl":
        return (
            model_jobs.tokenwise_kl_bytes(dims, **kw),
            model_jobs.tokenwise_kl_mem_mb(dims, **kw),
            model_jobs.tokenwise_kl_work(dims, **kw),
        )
    return (model_jobs.jacobians_bytes(dims, kinds, **kw), model_jobs.jacobians_mem_mb(dims, kinds, **kw),
            model_jobs.jacobians_work(dims, kinds, **kw))  # fmt: skip


# ---- fits --------------------------------------------------------------------------------------------------
def fit(runs: list[dict]) -> tuple[dict, float]:
    """Seconds = start + Σ rate·work over the runs: non-negative least squares on relative errors, then every rate
    × the largest measured/fitted ratio of the runs (the machine's load varies from run to run: the rates cover
    every run, an upper envelope), rounded up to 3 significant digits. Returns the rates and that factor."""
    import numpy as np
    from scipy.optimize import nnls

    keys = sorted({k for r in runs for k, v in r["work"].items() if v > 0})
    A = np.array([[1.0] + [r["work"].get(k, 0.0) for k in keys] for r in runs])
    t = np.array([r["wall_s"] for r in runs])
    scale = A.max(axis=0)
    scale[scale == 0] = 1.0
    x, _ = nnls(A / scale / t[:, None], np.ones_like(t))
    x = x / scale
    cover = max(1.0, float(np.max(t / (A @ x))))
    return {"start": _ceil3(x[0] * cover)} | {k: _ceil3(v * cover) for k, v in zip(keys, x[1:])}, cover


def _ceil3(x: float) -> float:
    if x <= 0:
        return 0.0
    from math import ceil, floor, log10

    e = floor(log10(x)) - 2
    return ceil(x / 10**e) * 10**e


#: the rates this run fitted (``rates_from``), per job: what ``compare`` predicts with
FITTED: dict[str, dict[str, float]] = {}


def job_seconds(rates: dict, work: dict) -> float:
    """Expected seconds of a model job from its work terms at `rates` (start + Σ rate·work), no margin."""
    return rates.get("start", 0.0) + sum(rates.get(k, 0.0) * v for k, v in work.items())


def anchor(rates: dict, work: dict, seconds: float, runs: list[dict]) -> tuple[dict, str | None]:
    """The rates with one term's rate raised so that start + Σ rate·work reaches `seconds` (unchanged when it already
    does): the term that grows most from the bench's runs to the anchor's (its work there over its largest in the
    runs), the one whose rate the small widths pin down least; also the term raised."""
    predicted = job_seconds(rates, work)
    if predicted >= seconds:
        return rates, None
    top = max(
        (k for k in work if work[k] > 0), key=lambda k: work[k] / max(max(r["work"].get(k, 0.0) for r in runs), 1e-300)
    )
    rest = predicted - rates.get(top, 0.0) * work[top]
    return rates | {top: _ceil3((seconds - rest) / work[top])}, top


def compare(run: Path, configfile: Path) -> list[dict]:
    """Each model job of a finished (or running) run against what this checkout would ask for it: the job's wall and
    CPU seconds and peak RSS (the larger of Snakemake's sampled max_rss and the papers-shape monitor's VmHWM, MiB;
    bench/papers_shape.py), and its mem_mb and runtime from layergeom.resources with the run's config, the
    materialised checkpoint's config.json and safetensors header (and the expected seconds without SAFETY)."""
    import papers_shape as ps
    import yaml

    from layergeom import config as lgconfig
    from layergeom.names import boundaries_for, kept_boundaries
    from layergeom.resources import files, model_jobs

    jobs = ps.read_jobs(run)
    ps.attach(jobs, {}, ps.read_peaks(run))
    cfg = lgconfig.validate(yaml.safe_load(configfile.read_text()))
    n, T = cfg["corpus"]["n_windows"], cfg["corpus"]["window_tokens"]
    rows = []
    for j in jobs:
        kind = "jacobians" if j.rule.startswith("spectra_jacobians_") else j.rule
        if kind not in JOBS:
            continue
        parts = Path(j.bench).parts  # benchmarks/<rule>/<model>/<checkpoint>[/L<l>].tsv
        m, c = parts[2], parts[3].removesuffix(".tsv")
        sec = {k: lgconfig.model_section(cfg, m, k) for k in ("tokenwise", "spectra", "activations")}
        mc = cfg["models"][m]
        folder = run / "resources" / "models" / m / c
        dims = model_jobs.model_dims(
            json.loads((folder / "config.json").read_text()), mc.get("d_model"), mc.get("n_layers")
        )
        b, sb = files.DTYPE_BYTES[mc["dtype"]], files.DTYPE_BYTES[sec["activations"]["dtype"]]
        wb = files.safetensors_bytes(folder / "model.safetensors")
        names = boundaries_for(mc["family"], dims["n_layers"])
        tw, sp = sec["tokenwise"], sec["spectra"]
        if kind == "activations":
            kw = dict(n_windows=n, window_tokens=T, batch_size=sec["activations"]["batch_size"],
                      n_names=model_jobs.store_names(len(kept_boundaries(names, sec["activations"]["boundaries"]))),
                      model_bytes=b, store_bytes=sb, weight_bytes=wb)  # fmt: skip
            mem, work = model_jobs.activations_mem_mb(dims, **kw), model_jobs.activations_work(dims, **kw)
        elif kind == "tokenwise_fit":
            kw = dict(n_tokens=n * T, n_pool=n * (T - 1), n_anchors=tw["n_anchors"], k=tw["k"], classes=tw["classes"],
                      store_bytes=sb)  # fmt: skip
            mem, work = model_jobs.tokenwise_fit_mem_mb(dims["d"], **kw), model_jobs.tokenwise_fit_work(dims["d"], **kw)
        elif kind == "tokenwise_kl":
            kw = dict(n_windows=n, window_tokens=T, n_anchors=tw["n_anchors"], n_classes=len(tw["classes"]),
                      batch_rows=tw["kl_batch_rows"], model_bytes=b, weight_bytes=wb)  # fmt: skip
            mem, work = model_jobs.tokenwise_kl_mem_mb(dims, **kw), model_jobs.tokenwise_kl_work(dims, **kw)
        else:
            ns, wins = model_jobs.jacobian_sample_count(n, T, sp)
            kinds = [x.split(".")[1] for x in names]
            kw = dict(n_samples=ns, n_tokens=n * T, window_tokens=T, n_groups=min(sp["n_groups"], wins), spectra=sp,
                      store_bytes=sb, model_bytes=b)  # fmt: skip
            mem, work = (
                model_jobs.jacobians_mem_mb(dims, kinds, weight_bytes=wb, **kw),
                model_jobs.jacobians_work(dims, kinds, **kw),
            )
        rec = {"job": kind, "file": j.bench, "d": dims["d"], "wall_s": j.seconds, "cpu_s": j.cpu, "peak_mib": j.peak,
               "anon_mib": None if j.anon != j.anon else j.anon, "mem_mb": mem, "work": work}  # fmt: skip
        if kind in FITTED:
            rec["expected_s"] = job_seconds(FITTED[kind], work)
        rows.append(rec)
    return rows


def papers_shape_anchors(run: Path) -> dict:
    """Per job of a papers-shape run (bench/configs/papers_shape.yaml): its slowest instance's wall seconds and work."""
    out = {}
    for r in compare(run, PAPERS_SHAPE):
        if r["job"] not in out or r["wall_s"] > out[r["job"]]["wall_s"]:
            out[r["job"]] = {k: r[k] for k in ("file", "d", "wall_s", "cpu_s", "work")}
    return out


def rates_from(timings: dict, anchors: dict) -> tuple[dict, dict]:
    """Per job: the rates (``fit``, then ``anchor``) and how they were made (the envelope factor, the term raised to
    the papers' width and by how much)."""
    rates, how = {}, {}
    for job in JOBS:
        runs = timings.get(job, [])
        if not runs:
            continue
        rates[job], cover = fit(runs)
        how[job] = {"envelope": round(cover, 3)}
        if job in anchors:
            before = rates[job]
            rates[job], top = anchor(before, anchors[job]["work"], anchors[job]["wall_s"], runs)
            if top:
                how[job] |= {"raised": top, "from": before[top], "to": rates[job][top]}
    return rates, how


def main():
    ap = parser()
    ap.add_argument("--dims", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--windows", type=int, nargs="+", default=[32, 96])
    ap.add_argument("--extra", nargs="*", default=["2048:32"], help="more width:windows pairs")
    ap.add_argument("--anchor-run", type=Path, help="a run of bench/configs/papers_shape.yaml (its benchmarks/)")
    ap.add_argument(
        "--compare",
        nargs="*",
        default=[],
        metavar="RUN=CONFIG",
        help="runs whose model jobs to set against their requests (a run directory and its config file)",
    )
    ap.add_argument("--child", nargs=2)
    ap.add_argument("--child-sequence", nargs=3, metavar=("FOLDER", "D", "WINDOWS"))
    ap.add_argument("--refit", action="store_true", help="the rates again from the result file's timings")
    ap.add_argument("--runs-log", type=Path, help="take the runs from the JSON lines an interrupted bench printed")
    a = ap.parse_args()
    if a.child:
        return child(*a.child)
    if a.child_sequence:
        return child_sequence(a.child_sequence[0], int(a.child_sequence[1]), int(a.child_sequence[2]))
    import numpy as np

    from layergeom import models
    from layergeom.resources import files, model_jobs

    if a.refit:
        out = json.loads(RESULT.read_text())
    elif a.runs_log:  # the runs an interrupted bench printed, one JSON line each
        lines = [x for x in a.runs_log.read_text().splitlines() if x.startswith('{"base_mb"')]
        out = {"machine": machine("cpus", "platform", "torch"),
               "settings": {"window_tokens": T, "vocab": VOCAB, "threads": 1, "model": "hf_config(d) of this bench",
                            "tokenwise": "schema defaults", "spectra": "schema defaults", "runs_log": str(a.runs_log)},
               "runs": [json.loads(x) for x in lines]}  # fmt: skip
    else:
        out = {"machine": machine("cpus", "platform", "torch", load_start="load_average"),
               "settings": {"window_tokens": T, "vocab": VOCAB, "threads": 1, "model": "hf_config(d) of this bench",
                            "tokenwise": "schema defaults", "spectra": "schema defaults"},
               "runs": []}  # fmt: skip
        s = sections()
        grid = [(d, n) for d in a.dims for n in a.windows] + [tuple(map(int, x.split(":"))) for x in a.extra]
        for d, n in grid:
            with tempfile.TemporaryDirectory() as tmp:
                f = Path(tmp)
                model = models.build_random("llama", hf_config(d), seed=0)
                model.save_pretrained(f / "model", safe_serialization=True, max_shard_size="1000GB")
                del model
                np.save(f / "windows.npy", np.random.default_rng(0).integers(0, VOCAB, size=(n, T)))
                dims = model_jobs.model_dims(json.loads((f / "model" / "config.json").read_text()))
                wb = files.safetensors_bytes(f / "model" / "model.safetensors")
                for job in ("activations", "tokenwise_fit_L0", "tokenwise_fit_L1", "tokenwise_kl", "jacobians"):
                    r = run_child(job, f)
                    kind = job.rsplit("_L", 1)[0]
                    kw = job_inputs(kind, dims, n, wb, s)
                    b, req, work = counted(kind, dims, kw)
                    rec = r | {"job": kind, "d": d, "n_windows": n, "work": work, "counted_mb": b / 1e6,
                               "request_mb": req}  # fmt: skip
                    print(json.dumps(rec), flush=True)
                    out["runs"].append(rec)
        out["machine"]["load_end"] = os.getloadavg()
    s = sections()
    for r in out["runs"]:  # what this checkout counts for each run (the counts may have changed since it ran)
        dims = model_jobs.model_dims(hf_config(r["d"]))
        wb = 4 * (dims["params"] + (2 * dims["n_layers"] + 1) * r["d"])  # the safetensors: every matrix and norm
        r["counted_mb"], r["request_mb"], r["work"] = counted(
            r["job"], dims, job_inputs(r["job"], dims, r["n_windows"], wb, s)
        )
        r["counted_mb"] /= 1e6
        r["covered"] = r["peak_mb"] * 2**20 / 1e6 <= r["counted_mb"] + model_jobs.TORCH_BASE_MB  # before SAFETY
    if a.anchor_run:
        out["anchors"] = papers_shape_anchors(a.anchor_run) | {"run": str(a.anchor_run)}
    anchors = {k: v for k, v in out.get("anchors", {}).items() if k in JOBS}
    timings = {job: [r for r in out["runs"] if r["job"] == job] for job in JOBS}
    out["rates"], out["anchored"] = rates_from(timings, anchors)
    FITTED.update(out["rates"])
    for pair in a.compare:  # each model job of a run against what this checkout asks for it, with these rates
        run, configfile = pair.split("=", 1)
        out.setdefault("compare", {})[run] = {"config": configfile, "jobs": compare(Path(run), Path(configfile))}
    write_json(RESULT, out, indent=1)
    print(json.dumps(out["rates"], indent=1))


if __name__ == "__main__":
    main()
