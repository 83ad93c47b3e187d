#!/usr/bin/env bash
# gpu_check.sh - the CUDA path on one GPU in about 10 minutes, results to one Markdown file:
#   1. the whole test config (config/test.yaml, every tiny family) end to end with `device: cuda` and
#      `gpu_min_width: 0`, so that the Paper B analysis jobs (tables, products, Schur, convergence, graphs)
#      compute on the GPU too (they otherwise run on the CPU below 2048 wide);
#   2. float32 vs bfloat16 weights (`models.<m>.dtype`) of two tiny models: how far the result tables move
#      (skipped, with a note, when this version of the workflow has no dtype key);
#   3. bench/gpu_jacobians.py: the exact Jacobians at d=4096 (structured and autodiff, timed, FLOP rate);
#   4. GPU slots: two concurrent jobs on two GPUs get different devices (the physical GPU's UUID as torch sees
#      it in each), and the test config's activation jobs with --resources gpu=2 log both slots (skipped,
#      with a note, on a machine with fewer than two GPUs); on any GPU machine, every model job's log names
#      its device;
#   5. Paper B's spectral and topology stages at d = 4096 on the GPU, one boundary each (bench/bench_long_jobs.py
#      --device cuda: the tables on an attention and an MLP boundary, the Schur prep and one chain of each cost
#      class through four depths), and the projected hours of one Llama-3.1-8B checkpoint's spectral work on this
#      GPU with config/papers.yaml's fan-out (its chain segments' repeated prefixes included).
#
#   bash bench/gpu_check.sh [OUTDIR]       # OUTDIR default: $OUT, else bench/results
#   bash bench/gpu_check.sh --help         # this text
#
# Needs a Python with torch (a CUDA build), transformers, snakemake and the project's other dependencies
# (PYTHON=..., default .venv/bin/python, else python3); it installs nothing (GPU machines may be offline) and
# stops at once with a message when torch, CUDA or snakemake is missing. Each stage has its own time limit
# (GPU_CHECK_E2E_S, GPU_CHECK_DTYPE_S, GPU_CHECK_JAC_S, GPU_CHECK_SLOTS_S, GPU_CHECK_LONG_S seconds); a stage that fails or runs out is reported
# and the next one still runs. Exit status: 0 when every stage that ran passed.
# GPU_CHECK_DEVICE=cpu runs the same stages on the CPU (small Jacobian width, d = 256 for stage 5), to try the
# script without a GPU; GPU_CHECK_STAGES="5" (a list of 1-5, default all) runs only those stages.
set -uo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
    sed -n '2,/^set -uo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUTDIR=${1:-${OUT:-$ROOT/bench/results}}
E2E_S=${GPU_CHECK_E2E_S:-150}
DTYPE_S=${GPU_CHECK_DTYPE_S:-75}
JAC_S=${GPU_CHECK_JAC_S:-90}
SLOTS_S=${GPU_CHECK_SLOTS_S:-120}
LONG_S=${GPU_CHECK_LONG_S:-240}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
STAGES=" ${GPU_CHECK_STAGES:-1 2 3 4 5} "
want() { [[ "$STAGES" == *" $1 "* ]]; }
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python
else PY=$(command -v python3 || true); fi
[ -n "$PY" ] || { echo "gpu_check: no python3 found (set PYTHON)"; exit 2; }
mkdir -p "$OUTDIR"
REPORT=$OUTDIR/gpu_check.md
WORK=$(mktemp -d /tmp/layergeom-gpu-check.XXXXXX)
NCPU=$(nproc 2>/dev/null || echo 4)
t0=$(date +%s)
say() { echo "[gpu_check $(($(date +%s) - t0))s] $*"; }
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT" || exit 2

# ---- 0. what this machine has ----------------------------------------------------------------------
"$PY" - "$REPORT" "$DEVICE" <<'EOF' || exit 2
import importlib.util, platform, subprocess, sys, time
report, device = sys.argv[1:]
missing = [m for m in ("torch", "transformers", "snakemake", "yaml", "jsonschema", "scipy", "pandas")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_check: {sys.executable} lacks {', '.join(missing)}: install the project first "
             "(LAYERGEOM_TORCH=cuda bash tools/install.sh) or set PYTHON")
import torch
if device == "cuda" and not torch.cuda.is_available():
    sys.exit(f"gpu_check: torch {torch.__version__} (CUDA build: {torch.version.cuda}) sees no CUDA device")
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60).stdout.strip()
except (OSError, subprocess.SubprocessError):
    smi = ""
with open(report, "w") as fh:
    fh.write(f"# GPU check ({time.strftime('%Y-%m-%d %H:%M')})\n\n"
             f"- device {device}: "
             f"{torch.cuda.get_device_name(0) if device == 'cuda' else 'CPU'} ({smi or 'no nvidia-smi'})\n"
             f"- python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
             f"{platform.machine()}, {__import__('os').cpu_count()} CPUs\n\n")
print(open(report).read())
EOF
status=0
note() { echo "$*" >>"$REPORT"; }

# ---- 1. the test config end to end on the GPU -------------------------------------------------------
if want 1; then
# Tiny models: several GPU jobs share the one GPU (--resources gpu=8 lifts the one-job-per-GPU default).
say "1. config/test.yaml end to end with device=$DEVICE (limit ${E2E_S}s)"
s=$(date +%s)
timeout --kill-after=20 "$E2E_S" "$PY" -m snakemake -s "$ROOT/Snakefile" -d "$WORK/e2e" --cores "$NCPU" \
    --resources gpu=8 --configfile config/test.yaml --config device="$DEVICE" gpu_min_width=0 -q >"$WORK/e2e.log" 2>&1
rc=$?
e=$(($(date +%s) - s))
n_tables=$(find "$WORK/e2e/results" -name '*.tsv' 2>/dev/null | wc -l)
n_gpu_logs=$(grep -rl "cuda_visible_devices=[0-9]" "$WORK/e2e/logs" 2>/dev/null | wc -l)
n_analysis_gpu=$(grep -l "device: $DEVICE" "$WORK"/e2e/logs/{spectra_table,spectra_cumulative,spectra_schur,spectra_convergence,topology_graph}/*/* 2>/dev/null | wc -l)
note "## 1. config/test.yaml end to end, device: $DEVICE"
note ""
if [ $rc -eq 0 ]; then
    note "OK in ${e} s on ${NCPU} CPUs: ${n_tables} tables; ${n_gpu_logs} job logs show a visible GPU, ${n_analysis_gpu} of them Paper B analysis jobs computing on $DEVICE."
    note ""
    "$PY" bench/e2e_summary.py "$WORK/e2e" --out "$WORK/e2e.md" --wall "$e" >/dev/null 2>&1 \
        && sed -n '/^|/p' "$WORK/e2e.md" >>"$REPORT"
else
    status=1
    note "FAILED (exit $rc$([ $rc -ge 124 ] && echo ', time limit') after ${e} s). Last lines:"
    note '```'
    tail -n 30 "$WORK/e2e.log" >>"$REPORT"
    grep -rl "Error\|error" "$WORK/e2e/logs" 2>/dev/null | head -3 | xargs -r tail -n 15 >>"$REPORT"
    note '```'
fi
note ""
say "   exit $rc in ${e}s"

fi

# ---- 2. float32 vs bfloat16 weights -----------------------------------------------------------------
if want 2; then
say "2. float32 vs bfloat16 (limit ${DTYPE_S}s)"
note "## 2. float32 vs bfloat16 weights (tiny-llama, tiny-gpt2; device $DEVICE)"
note ""
if ! "$PY" -c "
import sys, yaml
m = yaml.safe_load(open('config/schema/config.schema.yaml'))['\$defs']['model']['properties']
sys.exit(0 if 'dtype' in m else 1)"; then
    note "Skipped: this version of the workflow has no \`models.<m>.dtype\` key."
    say "   skipped (no models.<m>.dtype)"
else
    for dt in float32 bfloat16; do
        "$PY" - "$dt" "$WORK/dtype-$dt.yaml" "$DEVICE" <<'EOF'
import sys, yaml
dt, dst, device = sys.argv[1:]
cfg = yaml.safe_load(open("config/test.yaml"))
cfg["models"] = {m: {**cfg["models"][m], "dtype": dt} for m in ("tiny-llama", "tiny-gpt2")}
cfg["device"] = device
yaml.safe_dump(cfg, open(dst, "w"), sort_keys=False)
EOF
    done
    s=$(date +%s)
    targets=()
    for m in tiny-llama tiny-gpt2; do
        targets+=("results/$m/init/spectra.tsv" "results/$m/init/tokenwise.tsv" "results/$m/init/cumulative.tsv")
    done
    pids=()
    for dt in float32 bfloat16; do
        timeout --kill-after=20 "$DTYPE_S" "$PY" -m snakemake "${targets[@]}" -s "$ROOT/Snakefile" \
            -d "$WORK/$dt" --cores $((NCPU / 2 > 1 ? NCPU / 2 : 1)) --resources gpu=4 \
            --configfile "$WORK/dtype-$dt.yaml" -q >"$WORK/$dt.log" 2>&1 &
        pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    e=$(($(date +%s) - s))
    if [ $rc -eq 0 ]; then
        note "Both runs in ${e} s. Weights are rounded to bfloat16 (a relative 2^-9 per weight), the Jacobians, fits"
        note "and KL compute in float32 in both runs:"
        note ""
        "$PY" bench/dtype_agreement.py "$WORK/float32" "$WORK/bfloat16" --labels float32 bfloat16 \
            --out "$REPORT" >/dev/null || status=1
    else
        status=1
        note "FAILED (exit $rc after ${e} s). Last lines:"
        note '```'
        tail -n 15 "$WORK/float32.log" "$WORK/bfloat16.log" >>"$REPORT"
        note '```'
    fi
    say "   exit $rc in ${e}s"
fi
note ""

fi

# ---- 3. the Jacobian bench at d=4096 ----------------------------------------------------------------
if want 3; then
say "3. bench/gpu_jacobians.py at d=4096 (limit ${JAC_S}s)"
note "## 3. Exact Jacobians (bench/gpu_jacobians.py: d=4096 on the GPU)"
note ""
s=$(date +%s)
jac_args=(--budget-s $((JAC_S - 30)) --out "$OUTDIR")
[ "$DEVICE" = cuda ] || jac_args+=(--device cpu --d 256 --n-samples 8)
timeout --kill-after=20 "$JAC_S" "$PY" bench/gpu_jacobians.py "${jac_args[@]}" >"$WORK/jac.log" 2>&1
rc=$?
e=$(($(date +%s) - s))
note '```'
if [ $rc -eq 0 ]; then
    grep '^\[' "$WORK/jac.log" | cut -c1-400 >>"$REPORT"  # one progress line per stage
else
    status=1
    tail -n 40 "$WORK/jac.log" >>"$REPORT"
fi
note '```'
note ""
if [ $rc -eq 0 ]; then
    note "In ${e} s; all numbers in gpu_jacobians.json next to this report."
else
    note "FAILED (exit $rc$([ $rc -ge 124 ] && echo ', time limit') after ${e} s)."
fi
say "   exit $rc in ${e}s"

fi

# ---- 4. GPU slots: concurrent jobs on different GPUs -------------------------------------------------------
if want 4; then
say "4. GPU slots (limit ${SLOTS_S}s)"
note "## 4. GPU slots: one device per concurrent GPU job"
note ""
n_dev_logs=$(grep -rl "device: $DEVICE" "$WORK/e2e/logs" 2>/dev/null | wc -l)
note "Stage 1: ${n_dev_logs} job logs name their device, e.g. \`$(grep -rh "device: $DEVICE" "$WORK/e2e/logs" 2>/dev/null | head -1 | sed 's/^.*INFO //')\`."
note ""
n_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$DEVICE" != cuda ] || [ "${n_gpus:-0}" -lt 2 ]; then
    note "Two concurrent jobs on two GPUs: skipped (${n_gpus:-0} GPU(s) on this machine, device $DEVICE)."
    say "   skipped (${n_gpus:-0} GPUs)"
else
    s=$(date +%s)
    export LAYERGEOM_GPU_LOCK_DIR="$WORK/slots"
    pids=()
    for j in a b; do  # each takes a slot as a job does, then reports the GPU torch sees and holds it
        timeout --kill-after=10 "$SLOTS_S" env -u CUDA_VISIBLE_DEVICES "$PY" - "$WORK/slot-$j" "$WORK" <<'EOF' &
import os, sys, time
from pathlib import Path
from layergeom.runtime import claim_gpus
claim_gpus(1)
import torch
p = torch.cuda.get_device_properties(0)
Path(sys.argv[1]).write_text(f"{os.environ['CUDA_VISIBLE_DEVICES']} {p.uuid} {p.name}")
while len(list(Path(sys.argv[2]).glob("slot-?"))) < 2:  # both hold their slot at once
    time.sleep(0.1)
time.sleep(1)
EOF
        pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    a=$(cat "$WORK/slot-a" 2>/dev/null); b=$(cat "$WORK/slot-b" 2>/dev/null)
    if [ $rc -eq 0 ] && [ -n "$a" ] && [ -n "$b" ] && [ "${a#* }" != "${b#* }" ]; then
        note "Two concurrent jobs: \`$a\` and \`$b\` (CUDA_VISIBLE_DEVICES, UUID, name): different GPUs."
    else
        status=1
        note "FAILED (exit $rc): the two concurrent jobs saw \`${a:-nothing}\` and \`${b:-nothing}\`."
    fi
    # the workflow: the activation jobs of the test config, two GPU jobs at a time
    timeout --kill-after=20 "$SLOTS_S" "$PY" -m snakemake -s "$ROOT/Snakefile" -d "$WORK/slots-wf" \
        --cores "$NCPU" --resources gpu=2 --configfile config/test.yaml --config device=cuda -q \
        --until activations >"$WORK/slots-wf.log" 2>&1
    rc=$?
    used=$(grep -rhoE "cuda_visible_devices=[0-9]+" "$WORK/slots-wf/logs/activations" 2>/dev/null | sort | uniq -c \
        | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')
    if [ $rc -eq 0 ] && [ "$(echo "$used" | tr ',' '\n' | grep -c x)" -ge 2 ]; then
        note "Workflow, activation jobs with --resources gpu=2: slots used ${used}."
    else
        status=1
        note "Workflow, activation jobs with --resources gpu=2: exit $rc, slots used: ${used:-none}."
    fi
    note ""
    say "   done in $(($(date +%s) - s))s"
fi

fi

# ---- 5. Paper B's spectral stages at d=4096 on the GPU --------------------------------------------------
if want 5; then
say "5. bench/bench_long_jobs.py on $DEVICE (limit ${LONG_S}s)"
note "## 5. Paper B's analysis stages, one boundary each, on $DEVICE (bench/bench_long_jobs.py)"
note ""
s=$(date +%s)
long_args=(--device "$DEVICE" --out "$OUTDIR/long_jobs_$DEVICE" --jobs spectra cumulative convergence schur_chains topology)
if [ "$DEVICE" = cuda ]; then long_args+=(--d 4096 --small-d 4096 --tokens 32768)
else long_args+=(--d 256 --small-d 256 --tokens 4096); fi
timeout --kill-after=20 "$LONG_S" "$PY" bench/bench_long_jobs.py "${long_args[@]}" >"$WORK/long.log" 2>&1
rc=$?
e=$(($(date +%s) - s))
if [ $rc -eq 0 ]; then
    sed -n '/^One .* checkpoint: /p;/^| job/,/^$/p' "$OUTDIR/long_jobs_$DEVICE/long_jobs.md" >>"$REPORT"
    note "In ${e} s; the whole report in long_jobs_$DEVICE/long_jobs.md next to this one. The target: one 8B"
    note "checkpoint's spectral work in at most 1 h on one H100/H200-class GPU."
else
    status=1
    note "FAILED (exit $rc$([ $rc -ge 124 ] && echo ', time limit') after ${e} s). Last lines:"
    note '```'
    tail -n 30 "$WORK/long.log" >>"$REPORT"
    note '```'
fi
note ""
say "   exit $rc in ${e}s"
fi

note ""
note "Total $(($(date +%s) - t0)) s; work directory $WORK; exit status $status."

say "report: $REPORT (exit $status)"
exit $status
