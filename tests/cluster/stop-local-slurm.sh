#!/usr/bin/env bash
# stop-local-slurm.sh - stop the daemons that start-local-slurm.sh started.
#
# Only PIDs recorded in $SLURM_LOCAL_STATE_DIR/<daemon>.pid are signalled, and
# only if that PID is still alive and still has the expected process name.
# Daemons that were already running before start-local-slurm.sh (not recorded)
# are left alone. Jobs still in our cluster are cancelled first (scancel), so
# no slurmstepd/job processes are left behind. Packages, logs and spool
# directories are kept (a later start is then ~2-3 s); the slurm.conf that
# start-local-slurm.sh wrote is removed with the controller it describes: with
# it left behind, every `scontrol show config` waits for the stopped controller
# (~10 s), and Snakemake's SLURM executor plugin runs that at each start.
#
#   stop-local-slurm.sh [DAEMON...]   stop only these (of slurmd slurmctld slurmdbd
#                                     mariadbd munged), e.g. the ones a caller saw
#                                     start; jobs are cancelled only when slurmctld
#                                     is among them. Default: all recorded ones.
set -uo pipefail

STATE_DIR=${SLURM_LOCAL_STATE_DIR:-/run/local-slurm}
log() { echo "[stop-local-slurm] $*"; }

alive() {
    local pid=$1 comm=$2 st
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [ -r "/proc/$pid/stat" ] || return 1
    st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
    [ "$st" != Z ] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ]
}
recorded() { [ -f "$STATE_DIR/$1.pid" ] && tr -dc '0-9' <"$STATE_DIR/$1.pid"; }

stop() {
    local comm=$1 pid
    pid=$(recorded "$comm") || { log "$comm: not started by us - skipped"; return 0; }
    if ! alive "$pid" "$comm"; then
        log "$comm: recorded pid $pid is not running"
        rm -f "$STATE_DIR/$comm.pid"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 150); do alive "$pid" "$comm" || break; sleep 0.1; done
    if alive "$pid" "$comm"; then
        log "$comm: pid $pid ignored SIGTERM for 15 s - SIGKILL"
        kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$STATE_DIR/$comm.pid"
    log "$comm: stopped (pid $pid)"
}

[ -d "$STATE_DIR" ] || { log "nothing to stop ($STATE_DIR does not exist)"; exit 0; }
ALL=(slurmd slurmctld slurmdbd mariadbd munged)
WANT=("$@")
[ ${#WANT[@]} -gt 0 ] || WANT=("${ALL[@]}")
wanted() { local d; for d in "${WANT[@]}"; do [ "$d" = "$1" ] && return 0; done; return 1; }

# cancel the jobs of our own cluster while the controller is still up
ctld=$(recorded slurmctld || true)
if wanted slurmctld && [ -n "$ctld" ] && alive "$ctld" slurmctld; then
    jobs=$(squeue -h -o '%i' 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
        log "cancelling jobs: $jobs"
        # shellcheck disable=SC2086
        scancel $jobs 2>/dev/null
        for _ in $(seq 1 50); do
            [ -z "$(squeue -h -t running,completing -o %i 2>/dev/null)" ] && break
            sleep 0.2
        done
    fi
fi

for d in "${ALL[@]}"; do wanted "$d" && stop "$d"; done
# SLURM_LOCAL_CGROUP=1 leaves empty /sys/fs/cgroup/<ctrl>/slurm_<node> trees
for top in /sys/fs/cgroup/*/"slurm_$(hostname -s)"; do
    [ -d "$top" ] && find "$top" -depth -type d -exec rmdir {} \; 2>/dev/null
done
if wanted slurmctld && [ -n "$ctld" ] && head -n 1 /etc/slurm/slurm.conf 2>/dev/null | grep -q '^# managed by start-local-slurm.sh'; then
    rm -f /etc/slurm/slurm.conf && log "removed /etc/slurm/slurm.conf (ours; the next start writes it again)"
fi
rmdir "$STATE_DIR" 2>/dev/null || true
exit 0
