#!/usr/bin/env bash
# run-slurm.sh - the workflow through a real single-node SLURM cluster (as root, Debian 12):
# start the cluster (fake `gpu` GRES), run a reduced test config with --executor slurm and the CI
# profile in a fresh working directory, check every job against SLURM's records, stop what we started.
#
#   bash tests/cluster/run-slurm.sh [snakemake args, e.g. targets]
#
# Environment:
#   SLURM_TEST_MODELS="tiny-gpt2 tiny-mamba"  models of config/test.yaml to run (a sequential-residual
#                        Transformer and an SSM: both boundary kinds; the whole test config costs ~3x the
#                        jobs, at ~6-8 s of scheduling and nested snakemake start-up each)
#   SLURM_TEST_WORKDIR   working directory (default: a fresh mktemp -d); must not hold an earlier run
#   SLURM_TEST_TIMEOUT=1200  seconds before snakemake is stopped (then SIGKILL 30 s later: it ignores
#                        SIGTERM while it believes jobs are running)
#   PYTHON               interpreter with layergeom's dependencies, snakemake and the SLURM plugin
#                        (default .venv/bin/python)
# Snakemake runs here, on the "login node"; jobs run through sbatch + srun under the same interpreter.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
MODELS=${SLURM_TEST_MODELS:-tiny-gpt2 tiny-mamba}
TIMEOUT=${SLURM_TEST_TIMEOUT:-1200}
WORKDIR=${SLURM_TEST_WORKDIR:-$(mktemp -d /tmp/layergeom-slurm.XXXXXX)}
export SLURM_LOCAL_FAKE_GPUS=${SLURM_LOCAL_FAKE_GPUS:-2}
# finished jobs stay in `squeue --states=all` for an hour, so the check below sees every job of the run
export SLURM_LOCAL_MIN_JOB_AGE=${SLURM_LOCAL_MIN_JOB_AGE:-3600}
# the fake GPUs give jobs CUDA_VISIBLE_DEVICES but no CUDA: let GPU jobs run on the CPU (sbatch exports it)
export LAYERGEOM_ALLOW_CPU_FALLBACK=1

t0=$(date +%s)
say() { echo "[run-slurm $(($(date +%s) - t0))s] $*"; }

[ "$(id -u)" = 0 ] || { echo "run-slurm.sh: must run as root (it starts slurmctld, slurmd, munged)"; exit 1; }
[ -x "$PY" ] || { echo "run-slurm.sh: no interpreter at $PY (bash tools/install.sh, or set PYTHON)"; exit 1; }
"$PY" -c "import snakemake_executor_plugin_slurm" 2>/dev/null \
    || { echo "run-slurm.sh: snakemake-executor-plugin-slurm is not installed for $PY"; exit 1; }
mkdir -p "$WORKDIR"
[ -z "$(ls -A "$WORKDIR")" ] || { echo "run-slurm.sh: $WORKDIR is not empty"; exit 1; }

# stop only the daemons this script started: note which ones run already
DAEMONS=(munged slurmctld slurmd)
BEFORE=" "
for d in "${DAEMONS[@]}"; do pgrep -x "$d" >/dev/null && BEFORE+="$d "; done
cleanup() {
    local rc=$? started=() d
    trap - EXIT INT TERM
    for d in "${DAEMONS[@]}"; do [[ "$BEFORE" == *" $d "* ]] || started+=("$d"); done
    if [[ "$BEFORE" == *" slurmctld "* ]]; then
        # a cluster we did not start: cancel only the jobs of this run (by working directory)
        ids=$(squeue -h -t pending,running,completing -o '%i %Z' 2>/dev/null | awk -v w="$WORKDIR" '$2==w{print $1}')
        # shellcheck disable=SC2086
        [ -z "$ids" ] || scancel $ids || true
    fi
    if [ ${#started[@]} -gt 0 ]; then
        say "stopping the daemons this script started: ${started[*]}"
        bash "$HERE/stop-local-slurm.sh" "${started[@]}" || true
    fi
    say "exit $rc (workdir $WORKDIR)"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "starting the cluster (already running: ${BEFORE# })"
bash "$HERE/start-local-slurm.sh"

# the reduced config: the chosen models of config/test.yaml, unchanged, one thread per job so the
# node's 2 CPUs run two jobs at a time
"$PY" - "$ROOT/config/test.yaml" "$WORKDIR/config.yaml" $MODELS <<'EOF'
import sys, yaml
src, dst, *models = sys.argv[1:]
cfg = yaml.safe_load(open(src))
unknown = [m for m in models if m not in cfg["models"]]
if unknown:
    sys.exit(f"SLURM_TEST_MODELS: {unknown} not in {src}")
cfg["models"] = {m: cfg["models"][m] for m in models}
cfg["threads"] = 1
yaml.safe_dump(cfg, open(dst, "w"), sort_keys=False)
EOF
say "config: models $MODELS of config/test.yaml, threads 1, device auto -> $WORKDIR/config.yaml"

cd "$ROOT"
say "snakemake --executor slurm --profile tests/cluster/profile -d $WORKDIR"
s0=$(date +%s)
set +e
env -u SLURM_JOB_ID timeout --kill-after=30 "$TIMEOUT" \
    "$PY" -m snakemake -s "$ROOT/Snakefile" -d "$WORKDIR" --configfile "$WORKDIR/config.yaml" \
    --config device=auto --executor slurm --profile "$HERE/profile" "$@"
rc=$?
set -e
s1=$(date +%s)
if [ $rc -ne 0 ]; then
    say "FAIL: snakemake exited $rc after $((s1 - s0)) s; SLURM logs:"
    find "$WORKDIR/.snakemake/slurm_logs" -name '*.log' -newer "$WORKDIR/config.yaml" -print0 2>/dev/null \
        | xargs -0 -r tail -n 20
    exit $rc
fi
say "snakemake finished in $((s1 - s0)) s; checking every job against SLURM's records"
"$PY" "$HERE/check_slurm_run.py" "$WORKDIR" --expect-gpu
say "OK: workflow under SLURM in $((s1 - s0)) s (cluster start and checks included: $(($(date +%s) - t0)) s)"
