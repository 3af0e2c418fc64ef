#!/usr/bin/env bash
# A single-node Slurm on localhost for the Slurm tests and CI: `local-slurm.sh start|stop|status`.
#
# start   installs Debian's slurm-wlm and munge when missing, creates the munge key when missing,
#         starts munged, writes /etc/slurm/slurm.conf and gres.conf (rewritten, and the daemons
#         restarted, only when their content changes; the node has two stand-in GPUs without
#         CUDA and the feature `testnode`, for the tests of training's Slurm request), starts
#         slurmctld and slurmd and waits until the node is idle.
#         On a running cluster with an unchanged configuration it only reports the status.
# stop    shuts slurmctld, slurmd and munged down; fine when they are not running.
# status  prints the node's state and the versions; exits 1 when the node cannot take jobs.
#
# Needs root. No accounting database: `sacct` does not work here, so status checks go through
# `squeue`, which keeps finished jobs for MinJobAge seconds.
set -euo pipefail

CONF="/etc/slurm/slurm.conf"
GRES_CONF="/etc/slurm/gres.conf"
SPOOL=/var/spool/slurm-local
LOGS=/var/log/slurm-local
MUNGE_KEY=/etc/munge/munge.key
MUNGE_PID=/run/munge/munged.pid
SLURMCTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
READY_TIMEOUT_S=${LOCAL_SLURM_READY_TIMEOUT_S:-60}
HOST=$(hostname -s)

log() { echo "local-slurm: $*" >&2; }
die() { log "error: $*"; exit 1; }

running() {  # running PIDFILE: the daemon whose pid the file holds is alive
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sinfo >/dev/null \
      && command -v munged >/dev/null; then
    return
  fi
  log "installing slurm-wlm and munge with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  local apt_log
  apt_log=$(mktemp)
  if ! apt-get install -y -qq --no-install-recommends slurm-wlm munge >"$apt_log" 2>&1; then
    log "apt-get install failed; running apt-get update first"
    apt-get update -qq >"$apt_log" 2>&1 \
      && apt-get install -y -qq --no-install-recommends slurm-wlm munge >"$apt_log" 2>&1 \
      || { tail -n 20 "$apt_log" >&2; die "could not install slurm-wlm and munge"; }
  fi
  rm -f "$apt_log"
}

munge_works() {
  munge -n 2>/dev/null | unmunge >/dev/null 2>&1
}

start_munge() {
  if [ ! -s "$MUNGE_KEY" ]; then
    log "creating $MUNGE_KEY"
    install -d -m 700 -o munge -g munge /etc/munge
    head -c 1024 /dev/urandom > "$MUNGE_KEY"
  fi
  chown munge:munge "$MUNGE_KEY"
  chmod 400 "$MUNGE_KEY"
  munge_works && return
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown -R munge:munge /run/munge /var/lib/munge /var/log/munge
  if running "$MUNGE_PID"; then kill "$(cat "$MUNGE_PID")"; sleep 0.5; fi
  log "starting munged"
  runuser -u munge -- munged --force
  for _ in $(seq 50); do munge_works && return; sleep 0.1; done
  tail -n 20 /var/log/munge/munged.log >&2 || true
  die "munged does not answer (munge -n | unmunge fails)"
}

wanted_config() {
  local cpus memory_mb
  cpus=$(nproc)
  memory_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
  cat <<EOF
# Written by scripts/local-slurm.sh: a single-node Slurm on localhost for tests and CI.
ClusterName=local
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# A requeued job waits cred_expire seconds (default 120) before it can start again, then for
# the main scheduler's next pass (sched_interval, default 60 s): together about 15 s here.
AuthInfo=cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without it a job that asks for no memory is given the whole node's, and runs alone.
DefMemPerCPU=$((memory_mb / cpus))
ReturnToService=2
# Finished jobs stay visible to squeue for 10 minutes (status checks without sacct).
MinJobAge=600
SchedulerParameters=sched_interval=5
# Time limits are checked every 30 s: a job gets its --signal=SIG@D at the first check at which
# it has run at least TimeLimit - D - 30 s (right at its start when D >= TimeLimit - 30 s), and
# SIGTERM at the first check past its limit, then SIGKILL KillWait seconds later.
KillWait=10
OverTimeLimit=0
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d
SlurmctldPidFile=$SLURMCTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# Two GPUs without devices (gres.conf) and a node feature, so that the tests can check that a
# training job's --gpus-per-node and --constraint reach Slurm (scontrol show job).
GresTypes=gpu
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory_mb Gres=gpu:2 Features=testnode State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

wanted_gres_config() {
  # Slurm's gpu plugin counts device files; /dev/null and /dev/zero stand in for two GPUs (no
  # CUDA here: jobs get CUDA_VISIBLE_DEVICES and run on the CPU).
  echo "# Written by scripts/local-slurm.sh: two stand-in GPUs for the tests' GPU requests."
  echo "AutoDetect=off"
  echo "NodeName=$HOST Name=gpu File=/dev/null"
  echo "NodeName=$HOST Name=gpu File=/dev/zero"
}

write_file() {  # write_file PATH CONTENT: sets CONFIG_CHANGED=1 when PATH had to be (re)written
  if [ ! -f "$1" ] || [ "$(cat "$1")" != "$2" ]; then
    log "writing $1"
    printf '%s\n' "$2" > "$1"
    CONFIG_CHANGED=1
  fi
}

write_config() {  # sets CONFIG_CHANGED=1 when slurm.conf or gres.conf had to be (re)written
  mkdir -p "$(dirname "$CONF")" "$SPOOL/ctld" "$SPOOL/d" "$LOGS"
  write_file "$CONF" "$(wanted_config)"
  write_file "$GRES_CONF" "$(wanted_gres_config)"
}

node_state() {  # the node's long state (idle, mixed, allocated, drained, down*...), empty if no answer
  { sinfo --noheader --nodes="$HOST" --format=%T 2>/dev/null || true; } | head -n 1
}

node_ready() {
  [[ "$(node_state)" =~ ^(idle|mixed|allocated)$ ]]
}

daemons_running() {
  running "$SLURMCTLD_PID" && running "$SLURMD_PID"
}

slurmd_start_time() {  # when the node's slurmd last registered, as 2026-01-31T12:00:00
  { scontrol --oneliner show node "$HOST" 2>/dev/null || true; } \
    | sed -n 's/.*SlurmdStartTime=\([^ ]*\).*/\1/p'
}

start_daemons() {
  if [ "${CONFIG_CHANGED:-0}" = 1 ]; then stop_daemons; fi
  local launched
  launched=$(date +%Y-%m-%dT%H:%M:%S)
  running "$SLURMCTLD_PID" || { log "starting slurmctld"; slurmctld; }
  if running "$SLURMD_PID"; then launched=""; else log "starting slurmd"; slurmd; fi
  # A restarted slurmctld reports the node's saved state before slurmd registers: wait for both.
  local deadline=$((SECONDS + READY_TIMEOUT_S)) state=""
  while [ $SECONDS -lt $deadline ]; do
    state=$(node_state)
    case "$state" in
      idle | mixed | allocated)
        [[ ! "$(slurmd_start_time)" < "$launched" ]] && return ;;
      drained | draining | down)  # e.g. left drained by an earlier run's kill failure
        log "node $HOST is $state ($(sinfo --noheader --format=%E --nodes="$HOST")); resuming it"
        scontrol update NodeName="$HOST" State=RESUME || true ;;
    esac
    sleep 0.5
  done
  log "error: node $HOST is not idle after ${READY_TIMEOUT_S} s (sinfo: '${state:-no answer}'); last log lines:"
  tail -n 25 "$LOGS/slurmctld.log" "$LOGS/slurmd.log" >&2 || true
  exit 1
}

stop_daemons() {  # scontrol shutdown stops slurmctld and slurmd; wait until both pids are gone
  local pids=() pid alive
  for pidfile in "$SLURMCTLD_PID" "$SLURMD_PID"; do
    if running "$pidfile"; then pids+=("$(cat "$pidfile")"); fi
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  scontrol shutdown >/dev/null 2>&1 || kill "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 60); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.25
  done
  log "slurmctld/slurmd (pids ${pids[*]}) did not stop after scontrol shutdown; killing them"
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

stop_munge() {
  if running "$MUNGE_PID"; then
    kill "$(cat "$MUNGE_PID")"
    for _ in $(seq 40); do running "$MUNGE_PID" || return 0; sleep 0.25; done
    die "munged (pid $(cat "$MUNGE_PID")) did not stop"
  fi
}

status() {
  local state=""
  if running "$SLURMCTLD_PID"; then state=$(node_state); fi
  if [[ "$state" =~ ^(idle|mixed|allocated)$ ]]; then
    log "running: node $HOST $state in partition $(sinfo --noheader --format='%P, %c CPUs, %m MB' | head -n 1);" \
      "$(sinfo --version), $(munged --version 2>&1 | awk '{ print $1; exit }')"
  else
    log "not running (node $HOST: ${state:-no answer from slurmctld})"
    return 1
  fi
}

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts daemons)"
case "${1:-}" in
  start)
    started_ms=$(($(date +%s%N) / 1000000))
    install_packages
    start_munge
    write_config
    if [ "${CONFIG_CHANGED:-0}" = 0 ] && daemons_running && node_ready; then
      status
      exit 0
    fi
    start_daemons
    elapsed_ms=$(($(date +%s%N) / 1000000 - started_ms))
    log "started in $((elapsed_ms / 1000)).$(printf %03d $((elapsed_ms % 1000))) s"
    status
    ;;
  stop)
    stop_daemons
    stop_munge
    log "stopped"
    ;;
  status)
    status
    ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
