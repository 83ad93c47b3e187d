#!/usr/bin/env bash
# start-local-slurm.sh - a real single-node SLURM cluster from Debian packages,
# for CI / local testing (Debian 12 bookworm, root, no systemd needed).
# layergeom's copy of the project's SLURM-in-CI recipe (the findings behind each setting
# are in the comments below); added here: SLURM_LOCAL_MIN_JOB_AGE.
#
# Idempotent: installs what is missing, (re)writes the configs, starts only the
# daemons that are not already running (restarts its own daemons if the config
# changed), waits until `sinfo` shows the node up, and exits 0.
# Everything it starts is recorded in $SLURM_LOCAL_STATE_DIR/*.pid;
# stop-local-slurm.sh stops exactly those PIDs and nothing else.
#
# Options (environment variables):
#   SLURM_LOCAL_FAKE_GPUS=2      fake "gpu" GRES on the node (0 = none). Jobs can
#                                request --gpus=N / --gres=gpu:N; they get
#                                CUDA_VISIBLE_DEVICES, but there is no real GPU.
#   SLURM_LOCAL_CGROUP=0         1 = proctrack/cgroup + task/cgroup (cgroup v1
#                                only): real CPU/memory/device enforcement,
#                                OOM -> OUT_OF_MEMORY. 0 = proctrack/linuxproc +
#                                task/affinity (no cgroup writes at all).
#   SLURM_LOCAL_ACCOUNTING=0     1 = also install MariaDB + slurmdbd so that
#                                `sacct`/`sacctmgr` work (adds 20 packages).
#   SLURM_LOCAL_CLUSTER=localci  ClusterName
#   SLURM_LOCAL_PARTITION=debug  name of the single (default) partition
#   SLURM_LOCAL_TIMEOUT=60       seconds to wait for the node to become idle
#   SLURM_LOCAL_MIN_JOB_AGE=300  seconds finished jobs stay visible to `squeue
#                                --states=all` (MinJobAge); tests/cluster/run-slurm.sh
#                                raises it so that a whole workflow's jobs can be
#                                checked against SLURM's own records at the end
#   SLURM_LOCAL_STATE_DIR=/run/local-slurm
#
# Network: the node, controller and slurmdbd addresses are 127.0.0.1; MariaDB
# runs with --skip-networking (unix socket only).
set -euo pipefail

FAKE_GPUS=${SLURM_LOCAL_FAKE_GPUS:-2}
USE_CGROUP=${SLURM_LOCAL_CGROUP:-0}
ACCOUNTING=${SLURM_LOCAL_ACCOUNTING:-0}
CLUSTER=${SLURM_LOCAL_CLUSTER:-localci}
PARTITION=${SLURM_LOCAL_PARTITION:-debug}
TIMEOUT=${SLURM_LOCAL_TIMEOUT:-60}
MIN_JOB_AGE=${SLURM_LOCAL_MIN_JOB_AGE:-300}
STATE_DIR=${SLURM_LOCAL_STATE_DIR:-/run/local-slurm}

ETC=/etc/slurm
CTLD_SPOOL=/var/spool/slurmctld
SLURMD_SPOOL=/var/spool/slurmd
LOGDIR=/var/log/slurm
RUNDIR=/run/slurm
FAKEGPU_DIR=$SLURMD_SPOOL/fakegpu
DB_PASS=slurm-local-ci   # only reachable through the local unix socket
MARKER="# managed by start-local-slurm.sh"

T_START=$(date +%s%3N)
log() {
    local ms=$(($(date +%s%3N) - T_START))
    printf '[start-local-slurm %4d.%01ds] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$*"
}
die() {
    log "ERROR: $*"
    for f in "$LOGDIR"/slurmctld.log "$LOGDIR"/slurmd.log "$LOGDIR"/slurmdbd.log; do
        [ -f "$f" ] && { echo "---- tail $f"; tail -n 15 "$f"; }
    done
    exit 1
}

[ "$(id -u)" = 0 ] || die "must run as root"

# ---------------------------------------------------------------- helpers ---
# alive PID COMM: process exists, is not a zombie, and has the expected name
alive() {
    local pid=$1 comm=$2 st
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [ -r "/proc/$pid/stat" ] || return 1
    st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
    [ "$st" != Z ] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ]
}
pidfile_pid() { [ -f "$1" ] && tr -dc '0-9' <"$1" || true; }
# running COMM DAEMON_PIDFILE -> prints pid of a live daemon (ours or not)
running() {
    local p
    p=$(pidfile_pid "$2")
    if alive "$p" "$1"; then echo "$p"; return 0; fi
    p=$(pidfile_pid "$STATE_DIR/$1.pid")
    if alive "$p" "$1"; then echo "$p"; return 0; fi
    return 1
}
ours() { # ours COMM PID -> we started it (recorded in our state dir)
    [ "$(pidfile_pid "$STATE_DIR/$1.pid")" = "$2" ]
}
# wait_pidfile COMM PIDFILE SECONDS -> record the daemon's pid as ours
wait_pidfile() {
    local comm=$1 pf=$2 n=$(($3 * 10)) p
    for _ in $(seq 1 "$n"); do
        p=$(pidfile_pid "$pf")
        if alive "$p" "$comm"; then echo "$p" >"$STATE_DIR/$comm.pid"; return 0; fi
        sleep 0.1
    done
    return 1
}
stop_ours() { # stop_ours COMM : stop a daemon we started (used on config change)
    local p
    p=$(pidfile_pid "$STATE_DIR/$1.pid")
    if alive "$p" "$1"; then
        log "stopping our $1 (pid $p) to apply the new configuration"
        kill -TERM "$p" 2>/dev/null || true
        for _ in $(seq 1 100); do alive "$p" "$1" || break; sleep 0.1; done
        alive "$p" "$1" && kill -KILL "$p" 2>/dev/null || true
    fi
    rm -f "$STATE_DIR/$1.pid"
}
# install_if_changed SRC DST MODE OWNER -> returns 0 if DST changed
install_if_changed() {
    if [ -f "$2" ] && cmp -s "$1" "$2"; then rm -f "$1"; return 1; fi
    if [ -f "$2" ] && ! grep -qF "$MARKER" "$2"; then
        cp -a "$2" "$2.orig-$(date +%Y%m%d%H%M%S)"   # keep a foreign config
    fi
    install -m "$3" -o "${4%:*}" -g "${4#*:}" "$1" "$2"
    rm -f "$1"
    return 0
}

# ------------------------------------------------------------- packages ---
PKGS=(munge slurmctld slurmd slurm-client)
[ "$ACCOUNTING" = 1 ] && PKGS+=(slurmdbd mariadb-server)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    log "packages installed"
else
    log "packages already installed"
fi
SLURM_VERSION=$(dpkg-query -W -f='${Version}' slurmctld)

# -------------------------------------------------------- dirs and munge ---
mkdir -p "$STATE_DIR" "$ETC" "$CTLD_SPOOL" "$SLURMD_SPOOL" "$LOGDIR" "$RUNDIR" /run/munge
chown munge:munge /run/munge && chmod 755 /run/munge
chown slurm:slurm "$CTLD_SPOOL" "$LOGDIR" "$RUNDIR"
if [ ! -s /etc/munge/munge.key ]; then
    log "creating munge key"
    runuser -u munge -- mungekey -c -k /etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key

NODE=$(hostname -s)
[ -n "$NODE" ] || die "hostname -s is empty"

# --------------------------------------------------------- node hardware ---
# `slurmd -C` prints the topology slurmd will report; copy it verbatim so the
# node is never INVAL, and keep RealMemory ~10% below what is there.
HW=$(slurmd -C | head -1)
field() { sed -n "s/.*[[:space:]]$1=\([0-9]*\).*/\1/p" <<<"$HW"; }
CPUS=$(field CPUs); BOARDS=$(field Boards); SPB=$(field SocketsPerBoard)
CPS=$(field CoresPerSocket); TPC=$(field ThreadsPerCore); MEM=$(field RealMemory)
[ -n "$CPUS" ] && [ -n "$MEM" ] || die "could not parse 'slurmd -C': $HW"
REALMEM=$((MEM * 9 / 10))
DEFMEM=$((REALMEM / CPUS < 1024 ? REALMEM / CPUS : 1024))

# ------------------------------------------------------------- fake GPUs ---
# gres/gpu drops entries without File= ("Removing file-less GPU"), and File=
# must be a character/block device. We create char devices with an unused
# major from the LOCAL/EXPERIMENTAL range 120-127 (no driver: open() -> ENXIO),
# so the devices cgroup can allow/deny them per job. Fallback: symlinks to
# /dev/null (then ConstrainDevices must stay off, else /dev/null is denied).
GRES_NODE=""
GPU_DEVS_REAL=0
if [ "$FAKE_GPUS" -gt 0 ]; then
    mkdir -p "$FAKEGPU_DIR"
    major=""
    for m in 120 121 122 123 124 125 126 127; do
        if ! awk -v m="$m" '/^Block/{exit} $1==m{f=1} END{exit !f}' /proc/devices; then major=$m; break; fi
    done
    GPU_DEVS_REAL=1
    for i in $(seq 0 $((FAKE_GPUS - 1))); do
        dev=$FAKEGPU_DIR/gpu$i
        if [ -c "$dev" ] && [ ! -L "$dev" ] && [ "$(stat -c %t "$dev")" = "$(printf %x "${major:-0}")" ]; then continue; fi
        rm -f "$dev"
        if [ -z "$major" ] || ! mknod -m 666 "$dev" c "$major" "$i" 2>/dev/null; then
            ln -sf /dev/null "$dev"; GPU_DEVS_REAL=0
        fi
    done
    for f in "$FAKEGPU_DIR"/gpu*; do  # remove surplus devices from a larger earlier setting
        n=${f##*/gpu}; [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge "$FAKE_GPUS" ] && rm -f "$f"
    done
    [ -L "$FAKEGPU_DIR/gpu0" ] && GPU_DEVS_REAL=0
    GRES_NODE=" Gres=gpu:$FAKE_GPUS"
fi

# --------------------------------------------------------------- plugins ---
if [ "$USE_CGROUP" = 1 ]; then
    [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ] \
        || die "SLURM_LOCAL_CGROUP=1 needs cgroup v1 (this host has pure cgroup v2: untested with Slurm 22.05 without systemd)"
    for c in freezer cpuset memory devices; do
        [ -d "/sys/fs/cgroup/$c" ] || die "SLURM_LOCAL_CGROUP=1: /sys/fs/cgroup/$c (cgroup v1) is not mounted"
        mkdir "/sys/fs/cgroup/$c/slurm_probe_$$" 2>/dev/null && rmdir "/sys/fs/cgroup/$c/slurm_probe_$$" \
            || die "SLURM_LOCAL_CGROUP=1: cannot create cgroups under /sys/fs/cgroup/$c"
    done
    PROCTRACK=proctrack/cgroup
    TASKPLUGIN=task/cgroup,task/affinity
    JOBACCT=jobacct_gather/cgroup
    CONSTRAIN=yes
    CONSTRAIN_DEV=$([ "$GPU_DEVS_REAL" = 1 ] && echo yes || echo no)
else
    PROCTRACK=proctrack/linuxproc
    TASKPLUGIN=task/affinity   # task/none works too, but then the plugin's
                               # `srun --cpu-bind=q` prints a warning per job
    JOBACCT=jobacct_gather/linux
    CONSTRAIN=no
    CONSTRAIN_DEV=no
fi
if [ "$ACCOUNTING" = 1 ]; then
    ACCT_LINES="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu"
else
    ACCT_LINES="AccountingStorageType=accounting_storage/none"
fi

# --------------------------------------------------------------- configs ---
CHANGED=0
tmp=$(mktemp)
cat >"$tmp" <<EOF
$MARKER (Slurm $SLURM_VERSION) - regenerated on every start, do not edit
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$CTLD_SPOOL
SlurmdSpoolDir=$SLURMD_SPOOL
SlurmctldPidFile=$RUNDIR/slurmctld.pid
SlurmdPidFile=$RUNDIR/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MpiDefault=none
ProctrackType=$PROCTRACK
TaskPlugin=$TASKPLUGIN
ReturnToService=2
SchedulerType=sched/backfill
# start batch jobs at once (default: up to 3 s later) - submit->start 0.2-0.9 s
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# jobs without --mem would otherwise get the whole node and run one at a time
DefMemPerCPU=$DEFMEM
# finished jobs stay visible to squeue (--states=all) this long; the Snakemake
# SLURM plugin needs >= 3 x its first status-check delay to use squeue
MinJobAge=$MIN_JOB_AGE
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
JobAcctGatherType=$JOBACCT
JobAcctGatherFrequency=30
$ACCT_LINES
# one line per finished job, also without slurmdbd
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGDIR/jobcomp.log
$([ "$FAKE_GPUS" -gt 0 ] && echo "GresTypes=gpu")
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS Boards=$BOARDS SocketsPerBoard=$SPB CoresPerSocket=$CPS ThreadsPerCore=$TPC RealMemory=$REALMEM$GRES_NODE State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
install_if_changed "$tmp" "$ETC/slurm.conf" 644 root:root && CHANGED=1

tmp=$(mktemp)
{
    echo "$MARKER"
    echo "AutoDetect=off"
    [ "$FAKE_GPUS" -gt 0 ] && echo "NodeName=$NODE Name=gpu File=$FAKEGPU_DIR/gpu[0-$((FAKE_GPUS - 1))]"
} >"$tmp"
install_if_changed "$tmp" "$ETC/gres.conf" 644 root:root && CHANGED=1

tmp=$(mktemp)
cat >"$tmp" <<EOF
$MARKER
CgroupPlugin=autodetect
ConstrainCores=$CONSTRAIN
ConstrainRAMSpace=$CONSTRAIN
ConstrainDevices=$CONSTRAIN_DEV
EOF
install_if_changed "$tmp" "$ETC/cgroup.conf" 644 root:root && CHANGED=1

if [ "$ACCOUNTING" = 1 ]; then
    tmp=$(mktemp)
    cat >"$tmp" <<EOF
$MARKER
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=slurm
LogFile=$LOGDIR/slurmdbd.log
PidFile=$RUNDIR/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
    install_if_changed "$tmp" "$ETC/slurmdbd.conf" 600 slurm:slurm && CHANGED=1
fi
# a different ClusterName in old state makes slurmctld refuse to start
if [ -f "$CTLD_SPOOL/clustername" ] && [ "$(cat "$CTLD_SPOOL/clustername")" != "$CLUSTER" ]; then
    rm -f "$CTLD_SPOOL/clustername"
fi
log "config: node=$NODE cpus=$CPUS realmem=${REALMEM}MB gpus=$FAKE_GPUS (real char devs: $GPU_DEVS_REAL) proctrack=$PROCTRACK accounting=$ACCOUNTING changed=$CHANGED"

# --------------------------------------------------------------- daemons ---
# munged
if pid=$(running munged /run/munge/munged.pid); then
    log "munged already running (pid $pid)"
else
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged --force
    wait_pidfile munged /run/munge/munged.pid 10 || die "munged did not start (see /var/log/munge/munged.log)"
    log "munged started (pid $(cat "$STATE_DIR/munged.pid"))"
fi
munge -n | unmunge >/dev/null || die "munge self-test failed"

# MariaDB + slurmdbd (optional)
if [ "$ACCOUNTING" = 1 ]; then
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
    if pid=$(running mariadbd /run/mysqld/mysqld.pid); then
        log "mariadbd already running (pid $pid)"
    else
        if [ ! -d /var/lib/mysql/mysql ]; then
            mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db >/dev/null
        fi
        rm -f /run/mysqld/mysqld.pid
        setsid -f /usr/sbin/mariadbd --user=mysql --skip-networking \
            --socket=/run/mysqld/mysqld.sock --pid-file=/run/mysqld/mysqld.pid \
            --log-error="$LOGDIR/mariadb.err" </dev/null >/dev/null 2>&1
        wait_pidfile mariadbd /run/mysqld/mysqld.pid 30 || die "mariadbd did not start (see $LOGDIR/mariadb.err)"
        for _ in $(seq 1 100); do mariadb-admin ping >/dev/null 2>&1 && break; sleep 0.2; done
        log "mariadbd started (pid $(cat "$STATE_DIR/mariadbd.pid"), unix socket only)"
    fi
    mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
                GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
    if pid=$(running slurmdbd "$RUNDIR/slurmdbd.pid"); then
        if [ "$CHANGED" = 1 ] && ours slurmdbd "$pid"; then stop_ours slurmdbd; fi
    fi
    if pid=$(running slurmdbd "$RUNDIR/slurmdbd.pid"); then
        log "slurmdbd already running (pid $pid)"
    else
        rm -f "$RUNDIR/slurmdbd.pid"
        /usr/sbin/slurmdbd
        wait_pidfile slurmdbd "$RUNDIR/slurmdbd.pid" 30 || die "slurmdbd did not start"
        log "slurmdbd started (pid $(cat "$STATE_DIR/slurmdbd.pid"))"
    fi
    for _ in $(seq 1 100); do sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 0.2; done
    sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" \
        || sacctmgr -i add cluster "$CLUSTER" >/dev/null
    sacctmgr -n -P show account format=account | grep -qx ci \
        || sacctmgr -i add account ci Cluster="$CLUSTER" Description=ci Organization=ci >/dev/null
    sacctmgr -n -P show assoc user=root format=account | grep -qx ci \
        || sacctmgr -i add user root Account=ci DefaultAccount=ci Cluster="$CLUSTER" >/dev/null
    log "accounting ready: cluster=$CLUSTER account=ci user=root"
fi

# slurmctld / slurmd: restart our own instances if the config changed
for d in slurmd slurmctld; do
    if pid=$(running "$d" "$RUNDIR/$d.pid"); then
        if [ "$CHANGED" = 1 ]; then
            ours "$d" "$pid" || die "$d (pid $pid) is running but was not started by this script; stop it first"
            stop_ours "$d"
        fi
    fi
done
if pid=$(running slurmctld "$RUNDIR/slurmctld.pid"); then
    log "slurmctld already running (pid $pid)"
else
    rm -f "$RUNDIR/slurmctld.pid"
    runuser -u slurm -- /usr/sbin/slurmctld
    wait_pidfile slurmctld "$RUNDIR/slurmctld.pid" 30 || die "slurmctld did not start"
    log "slurmctld started (pid $(cat "$STATE_DIR/slurmctld.pid"))"
fi
for _ in $(seq 1 100); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.2; done
scontrol ping | grep -q 'is UP' || die "slurmctld does not answer 'scontrol ping'"
if pid=$(running slurmd "$RUNDIR/slurmd.pid"); then
    log "slurmd already running (pid $pid)"
else
    rm -f "$RUNDIR/slurmd.pid"
    /usr/sbin/slurmd
    wait_pidfile slurmd "$RUNDIR/slurmd.pid" 30 || die "slurmd did not start"
    log "slurmd started (pid $(cat "$STATE_DIR/slurmd.pid"))"
    SMOKE=1
fi

# ------------------------------------------------------ wait for the node ---
deadline=$(($(date +%s) + TIMEOUT))
resumed=0
while :; do
    state=$(sinfo -h -n "$NODE" -o '%T' 2>/dev/null | head -1 || true)
    case "$state" in
        idle | mixed | allocated | completing | planned) break ;;
        *drain* | down* | inval* | fail*)
            # a DRAIN/DOWN reason can survive restarts in StateSaveLocation
            if [ $resumed -lt 3 ]; then
                reason=$(sinfo -h -n "$NODE" -o '%E' 2>/dev/null || true)
                log "node is '$state' (reason: $reason) - resuming"
                scontrol update nodename="$NODE" state=resume 2>/dev/null || true
                resumed=$((resumed + 1)); sleep 1
            fi ;;
    esac
    [ "$(date +%s)" -lt $deadline ] || die "node $NODE not idle after ${TIMEOUT}s (state: '${state:-?}')"
    sleep 0.2
done
# end-to-end smoke test after a (re)start: a real job step through slurmd
if [ "${SMOKE:-0}" = 1 ]; then
    out=$(cd /tmp && timeout 60 srun --immediate=30 -N1 -n1 -t 1 --mem=10 hostname 2>&1) \
        || die "smoke test 'srun hostname' failed: $out"
    log "smoke test: srun hostname -> $out"
fi
log "node $NODE is $state - cluster ready (Slurm $SLURM_VERSION)"
sinfo -o '%P %a %l %D %T %N %G'
exit 0
