#!/usr/bin/env bash
# A single-host Slurm cluster for tests: munged, slurmctld and slurmd for one
# node (this host), every file they write under DIR, talking over 127.0.0.1.
#
# usage: scripts/slurm-cluster.sh start DIR   # prints `export SLURM_CONF=DIR/slurm.conf`
#        scripts/slurm-cluster.sh stop DIR
#
# start: needs root (SlurmUser=root) and the Debian packages slurm-wlm and munge
#   (scripts/install-deps.sh; this script installs nothing). DIR must be new,
#   empty or made by an earlier start (DIR/.slurm-cluster): it stops whatever
#   that left running and wipes its state, so start can run again on the same
#   DIR. Then:
#   - munge key: /etc/munge/munge.key when present, else DIR/munge/munge.key
#     (1,024 random bytes, owner munge, mode 400);
#   - munged on its own socket, DIR/munge/munge.socket.2 (a munged of the host,
#     if any, is left alone; AuthInfo points Slurm at ours);
#   - DIR/slurm.conf: one node, NodeName=$(hostname -s) CPUs=$(nproc), free ports
#     for slurmctld and slurmd picked now, NodeAddr and SlurmctldHost address
#     127.0.0.1, proctrack/linuxproc, task/none, select/cons_tres, no accounting;
#     state, spool, logs and pid files under DIR;
#   - slurmctld, then slurmd, with SLURM_CONF=DIR/slurm.conf; waits (30 s at
#     most) until sinfo shows the node idle.
#   On success its last line is `export SLURM_CONF=DIR/slurm.conf`. On failure it
#   says which step failed, prints the tail of that daemon's log, stops what it
#   started and exits 1.
# stop: cancels the cluster's jobs, then ends exactly the daemons named by
#   DIR/run/*.pid (checked to be that daemon of this DIR, so a reused pid is
#   never hit), and the slurmstepd processes of this cluster with their tasks
#   when jobs could not be cancelled: SIGTERM, SIGKILL after a 10 s grace.
#   Nothing running is not an error.
set -euo pipefail

GRACE=10
READY_TIMEOUT=30

die() {
  echo "slurm-cluster: $*" >&2
  exit 1
}

usage() {
  echo "usage: $0 start DIR | stop DIR" >&2
  exit 2
}

(($# == 2)) || usage
CMD=$1
DIR=$(realpath -m -- "$2")
CONF=$DIR/slurm.conf
RUN=$DIR/run
LOG=$DIR/log
MUNGE_DIR=$DIR/munge
SOCKET=$MUNGE_DIR/munge.socket.2
MARKER=.slurm-cluster

# ---- processes -------------------------------------------------------------------------------

# Running and not a zombie.
alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $state && $state != Z ]]
}

# True when PID is the daemon NAME of this DIR: its command name, and for munged
# our socket on its command line, for Slurm daemons our SLURM_CONF in its
# environment (both are how this script starts them).
ours() {
  local pid=$1 name=$2
  alive "$pid" || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 1
  if [[ $name == munged ]]; then
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "--socket=$SOCKET"
  else
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF -- "SLURM_CONF=$CONF"
  fi
}

pidfile_pid() {
  local f=$RUN/$1.pid pid
  [[ -f $f ]] || return 1
  pid=$(tr -dc '0-9' <"$f")
  [[ -n $pid ]] || return 1
  echo "$pid"
}

# SIGTERM to the PIDs, then SIGKILL to those still alive after GRACE seconds.
terminate() {
  (($# > 0)) || return 0
  local pid deadline left
  kill -TERM "$@" 2>/dev/null || true
  deadline=$((SECONDS + GRACE))
  while ((SECONDS < deadline)); do
    left=()
    for pid in "$@"; do alive "$pid" && left+=("$pid"); done
    ((${#left[@]} == 0)) && return 0
    sleep 0.2
  done
  for pid in "$@"; do
    if alive "$pid"; then
      echo "slurm-cluster: pid $pid ($(cat "/proc/$pid/comm" 2>/dev/null)) ignored SIGTERM for ${GRACE}s; SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

# The slurmstepd processes of this cluster (our slurmd's children; they outlive
# it), each followed by its descendants (the job's tasks), one pid a line.
stepd_trees() {
  local p pid ppid stat
  local -A children=()
  local -a stepds=() queue=()
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    stat=$(cat "$p/stat" 2>/dev/null) || continue
    stat=${stat##*) } # fields after "(comm) ": state ppid ...
    read -r _ ppid _ <<<"$stat"
    children[$ppid]+=" $pid"
    [[ $(cat "$p/comm" 2>/dev/null) == slurmstepd ]] && ours "$pid" slurmstepd && stepds+=("$pid")
  done
  queue=("${stepds[@]}")
  while ((${#queue[@]} > 0)); do
    pid=${queue[0]}
    queue=("${queue[@]:1}")
    echo "$pid"
    for p in ${children[$pid]-}; do queue+=("$p"); done
  done
}

stop_cluster() {
  local pid name pids=() stopped=()
  # Running jobs first, while slurmctld can still end them cleanly.
  if pid=$(pidfile_pid slurmctld) && ours "$pid" slurmctld; then
    SLURM_CONF=$CONF timeout 10 scancel --full --quiet --user=root 2>/dev/null || true
    local deadline=$((SECONDS + GRACE))
    while ((SECONDS < deadline)) &&
      [[ -n $(SLURM_CONF=$CONF timeout 5 squeue -h -o %i 2>/dev/null || true) ]]; do
      sleep 0.3
    done
  fi
  for name in slurmd slurmctld; do
    if pid=$(pidfile_pid "$name") && ours "$pid" "$name"; then
      pids+=("$pid")
      stopped+=("$name($pid)")
    fi
  done
  terminate "${pids[@]}"
  # Job steps whose jobs slurmctld could not cancel (it was not running):
  # slurmstepd ignores SIGTERM, so its job's processes are ended with it.
  mapfile -t pids < <(stepd_trees)
  if ((${#pids[@]} > 0)); then
    stopped+=("slurmstepd-and-tasks(${pids[*]})")
    terminate "${pids[@]}"
  fi
  if pid=$(pidfile_pid munged) && ours "$pid" munged; then
    stopped+=("munged($pid)")
    terminate "$pid"
  fi
  rm -f "$RUN"/*.pid
  if ((${#stopped[@]} > 0)); then
    echo "slurm-cluster: stopped ${stopped[*]} of $DIR"
  else
    echo "slurm-cluster: nothing of $DIR was running"
  fi
}

# ---- start -----------------------------------------------------------------------------------

# The last lines of each FILE that exists and is not empty.
show_logs() {
  local f
  for f in "$@"; do
    [[ -s $f ]] || continue
    echo "---- last lines of $f" >&2
    tail -n 25 "$f" >&2
  done
}

# A step failed: why, the daemon's log, then stop everything this start began.
fail() {
  local why=$1
  shift
  echo "slurm-cluster: start failed: $why" >&2
  show_logs "$@"
  stop_cluster >&2 || true
  exit 1
}

free_ports() {
  python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))'
}

# Waits until the daemon NAME wrote its pid file and is running; 1 as soon as
# the pid it wrote is gone, or after 10 s without one.
wait_pid() {
  local name=$1 deadline=$((SECONDS + 10)) pid
  while ((SECONDS < deadline)); do
    if pid=$(pidfile_pid "$name"); then
      ours "$pid" "$name" && return 0
      alive "$pid" || return 1
    fi
    sleep 0.2
  done
  return 1
}

write_conf() {
  local host=$1 cpus=$2 ctld_port=$3 slurmd_port=$4
  : >"$DIR/plugstack.conf" # no SPANK plugins of the host
  cat >"$CONF" <<EOF
# Written by scripts/slurm-cluster.sh: a one-node test cluster, all state under
# $DIR.
ClusterName=saturate-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCKET
CredType=cred/munge
PlugStackConfig=$DIR/plugstack.conf
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd-%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SwitchType=switch/none
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
KillWait=5
MailProg=/bin/true
MinJobAge=60
NodeName=$host NodeAddr=127.0.0.1 NodeHostname=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start_cluster() {
  local cmd host cpus ports key state deadline
  ((EUID == 0)) || die "start needs root (the test cluster runs its daemons as SlurmUser=root)"
  for cmd in munged munge unmunge slurmctld slurmd sinfo scontrol squeue scancel python3; do
    command -v "$cmd" >/dev/null 2>&1 ||
      die "no '$cmd' on PATH: install the Debian packages slurm-wlm and munge (scripts/install-deps.sh)"
  done

  # DIR is new, empty, or one this script made (its marker): never wipe anything else.
  if [[ -e $DIR && ! -e $DIR/$MARKER && -n $(ls -A -- "$DIR" 2>/dev/null) ]] &&
    ! head -n 1 "$CONF" 2>/dev/null | grep -q "^# Written by scripts/slurm-cluster.sh"; then
    die "$DIR is not empty and was not made by this script (no $MARKER); use a new or empty DIR"
  fi
  mkdir -p "$DIR"
  touch "$DIR/$MARKER"
  # A previous run in DIR: end what it left running, then start clean.
  if [[ -d $RUN ]]; then stop_cluster >&2; fi
  rm -rf "$DIR/state" "$DIR/spool" "$LOG" "$RUN" "$MUNGE_DIR" "$CONF"
  mkdir -p "$DIR/state" "$DIR/spool" "$LOG" "$RUN" "$MUNGE_DIR"
  chmod 755 "$MUNGE_DIR"

  key=/etc/munge/munge.key
  if [[ ! -f $key ]]; then
    key=$MUNGE_DIR/munge.key
    (umask 077 && head -c 1024 /dev/urandom >"$key")
    if id munge >/dev/null 2>&1; then chown munge:munge "$key"; fi
    chmod 400 "$key"
  fi
  # --force: munged runs as root here and accepts the key owned by munge.
  munged --force --socket="$SOCKET" --key-file="$key" --pid-file="$RUN/munged.pid" \
    --log-file="$LOG/munged.log" --seed-file="$MUNGE_DIR/munged.seed" \
    2>"$LOG/munged.stderr" || fail "munged exited with status $?" "$LOG/munged.stderr" "$LOG/munged.log"
  wait_pid munged || fail "munged is not running" "$LOG/munged.stderr" "$LOG/munged.log"
  munge -n -S "$SOCKET" | unmunge -S "$SOCKET" >/dev/null 2>"$LOG/unmunge.stderr" ||
    fail "a munge credential did not decode on $SOCKET" "$LOG/unmunge.stderr" "$LOG/munged.log"

  host=$(hostname -s)
  cpus=$(nproc)
  read -r -a ports < <(free_ports) || die "no free ports on 127.0.0.1"
  write_conf "$host" "$cpus" "${ports[0]}" "${ports[1]}"
  export SLURM_CONF=$CONF

  slurmctld 2>"$LOG/slurmctld.stderr" ||
    fail "slurmctld exited with status $?" "$LOG/slurmctld.stderr" "$LOG/slurmctld.log"
  wait_pid slurmctld || fail "slurmctld is not running" "$LOG/slurmctld.stderr" "$LOG/slurmctld.log"
  deadline=$((SECONDS + READY_TIMEOUT))
  until timeout 5 scontrol ping 2>/dev/null | grep -q "is UP"; do
    ((SECONDS < deadline)) ||
      fail "slurmctld does not answer 'scontrol ping' after ${READY_TIMEOUT}s" \
        "$LOG/slurmctld.stderr" "$LOG/slurmctld.log"
    ours "$(pidfile_pid slurmctld)" slurmctld ||
      fail "slurmctld died" "$LOG/slurmctld.stderr" "$LOG/slurmctld.log"
    sleep 0.3
  done

  slurmd 2>"$LOG/slurmd.stderr" || fail "slurmd exited with status $?" "$LOG/slurmd.stderr" "$LOG/slurmd.log"
  wait_pid slurmd || fail "slurmd is not running" "$LOG/slurmd.stderr" "$LOG/slurmd.log"
  deadline=$((SECONDS + READY_TIMEOUT))
  while :; do
    state=$(timeout 5 sinfo -h -N -n "$host" -o %T 2>/dev/null || true)
    [[ $state == idle ]] && break
    ((SECONDS < deadline)) ||
      fail "node $host is '${state:-not listed}', not idle, after ${READY_TIMEOUT}s" \
        "$LOG/slurmd.stderr" "$LOG/slurmd.log" "$LOG/slurmctld.log"
    ours "$(pidfile_pid slurmd)" slurmd || fail "slurmd died" "$LOG/slurmd.stderr" "$LOG/slurmd.log"
    sleep 0.3
  done
  echo "slurm-cluster: node $host idle ($cpus CPUs), slurmctld :${ports[0]}, slurmd :${ports[1]}, state in $DIR"
  echo "export SLURM_CONF=$CONF"
}

case $CMD in
  start) start_cluster ;;
  stop) stop_cluster ;;
  *) usage ;;
esac
