#!/usr/bin/env bash
# A single-node Slurm on localhost for the Slurm tests: `local-slurm.sh start|stop|status`.
# Installs Debian's slurm-wlm and munge when missing, writes /etc/slurm/slurm.conf (only when its
# content changes), starts munged, slurmctld and slurmd, and waits until the node is idle.
# Idempotent: `start` on a running cluster only reports its status. Needs root.
set -euo pipefail

CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
SPOOL=/var/spool/slurm-local
LOGS=/var/log/slurm-local

log() { echo "local-slurm: $*" >&2; }

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    return
  fi
  log "installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq slurm-wlm munge >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null
    apt-get install -y -qq slurm-wlm munge >/dev/null
  }
}

start_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    pkill -x munged 2>/dev/null || true
    munged --force
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  fi
}

write_config() {
  local host cpus memory wanted
  host=$(hostname -s)
  cpus=$(nproc)
  memory=$(awk '/MemTotal/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
  mkdir -p "$CONF_DIR" "$SPOOL/ctld" "$SPOOL/d" "$LOGS"
  wanted=$(cat <<EOF
# Written by scripts/local-slurm.sh: a single-node cluster on localhost for tests.
ClusterName=local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=600
KillWait=10
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
)
  if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$wanted" ]; then
    echo "$wanted" > "$CONF"
    CONFIG_CHANGED=1
  fi
}

node_ready() {
  sinfo --noheader --format=%t 2>/dev/null | grep -qE '^(idle|mix|alloc)'
}

start_daemons() {
  if [ "${CONFIG_CHANGED:-0}" = 1 ]; then
    stop_daemons
  fi
  pgrep -x slurmctld >/dev/null || slurmctld
  pgrep -x slurmd >/dev/null || slurmd
  for _ in $(seq 60); do
    node_ready && return
    sleep 0.5
  done
  log "the node did not become idle; last log lines:"
  tail -n 20 "$LOGS/slurmctld.log" "$LOGS/slurmd.log" >&2 || true
  exit 1
}

stop_daemons() {
  scontrol shutdown >/dev/null 2>&1 || true
  for _ in $(seq 40); do
    pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || return 0
    sleep 0.25
  done
  pkill -x slurmctld 2>/dev/null || true
  pkill -x slurmd 2>/dev/null || true
}

status() {
  if node_ready; then
    log "running: $(sinfo --noheader --format='%P %t %c CPUs %m MB' | head -n 1); $(sinfo --version)"
  else
    log "not running"
    return 1
  fi
}

case "${1:-}" in
  start)
    if command -v sinfo >/dev/null && node_ready; then status; exit 0; fi
    install_packages
    start_munge
    write_config
    start_daemons
    status
    ;;
  stop)
    stop_daemons
    pkill -x munged 2>/dev/null || true
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
