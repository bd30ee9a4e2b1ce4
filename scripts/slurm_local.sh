#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine, for the SLURM tests (CI) and for trying the profile.
#   bash scripts/slurm_local.sh start   install slurm-wlm + munge if missing, configure one node with every core
#                                       and 2 fake GPUs, start munged/slurmctld/slurmd, wait until the node is idle
#   bash scripts/slurm_local.sh stop    stop only the daemons `start` started, by the PIDs it recorded
# Needs root. It never overwrites a slurm.conf it did not write. Recipe and pitfalls: docs/cluster.md.
set -euo pipefail

STATE=/run/specsweep-slurm          # the PIDs of the daemons this script started, one "name pid" a line
CONF=/etc/slurm/slurm.conf
MARK="# written by specsweep scripts/slurm_local.sh"
WAIT_S=${SLURM_LOCAL_WAIT_S:-60}

die() { echo "slurm_local.sh: $*" >&2; exit 1; }

install_packages() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return
  echo "installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=300 install -y -q slurm-wlm munge >/dev/null 2>&1 || {
    apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null
    apt-get -o DPkg::Lock::Timeout=300 install -y -q slurm-wlm munge >/dev/null
  }
}

configure() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.85}' /proc/meminfo)
  if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
    die "$CONF exists and was not written by this script: stop its cluster and move it away, or use that cluster"
  fi
  # Fake GPUs: SLURM's scheduler needs character devices to count; nothing ever opens them.
  for i in 0 1; do [ -e /dev/nvidia$i ] || mknod /dev/nvidia$i c 195 $i; done
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
  cat > "$CONF" <<EOF
$MARK
ClusterName=specsweep
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SchedulerParameters=sched_interval=2
# squeue is the plugin's status command (no accounting here): a finished job must stay visible long enough
MinJobAge=300
# SIGTERM, then SIGKILL this long after: a server cell must stop its server within it
KillWait=30
GresTypes=gpu
NodeName=$host CPUs=$cpus RealMemory=$mem Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  cat > /etc/slurm/gres.conf <<EOF
$MARK
AutoDetect=off
NodeName=$host Name=gpu File=/dev/nvidia[0-1]
EOF
}

running() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

pid_of() { [ -r "$1" ] && cat "$1" || true; }

start_daemon() {   # name pidfile argv...: start unless one already runs; record the PID only if we started it
  local name=$1 pidfile=$2; shift 2
  if running "$(pid_of "$pidfile")"; then
    echo "$name already runs (pid $(pid_of "$pidfile")): left as it is"
    return
  fi
  "$@"
  local deadline=$((SECONDS + WAIT_S))
  until running "$(pid_of "$pidfile")"; do
    [ $SECONDS -lt $deadline ] || die "$name did not start within ${WAIT_S} s: see /var/log/slurm/ or syslog"
    sleep 0.2
  done
  echo "$name $(pid_of "$pidfile")" >> "$STATE/pids"
}

start() {
  [ "$(id -u)" -eq 0 ] || die "needs root (it installs packages, writes /etc/slurm and starts daemons)"
  install_packages
  configure
  mkdir -p "$STATE"
  install -d -o munge -g munge -m 0755 /run/munge
  start_daemon munged /run/munge/munged.pid runuser -u munge -- /usr/sbin/munged
  start_daemon slurmctld /run/slurmctld.pid /usr/sbin/slurmctld
  start_daemon slurmd /run/slurmd.pid /usr/sbin/slurmd
  local deadline=$((SECONDS + WAIT_S))
  until sinfo -h -o %t 2>/dev/null | grep -qx idle; do
    [ $SECONDS -lt $deadline ] || die "the node is not idle after ${WAIT_S} s: $(sinfo -h -o '%t %E' 2>&1 | head -1)"
    sleep 0.5
  done
  echo "SLURM is up: $(sinfo -h -o '%P %D %t %G')"
}

stop() {
  [ -r "$STATE/pids" ] || { echo "nothing to stop: no daemons recorded in $STATE/pids"; return; }
  # reverse order: slurmd, slurmctld, then munged
  tac "$STATE/pids" | while read -r name pid; do
    if ! running "$pid" || [ "$(cat /proc/$pid/comm 2>/dev/null)" != "$name" ]; then
      echo "$name (pid $pid) is no longer running"
      continue
    fi
    kill -TERM "$pid"
    for _ in $(seq 100); do running "$pid" || break; sleep 0.1; done
    running "$pid" && kill -KILL "$pid"
    echo "stopped $name (pid $pid)"
  done
  rm -f "$STATE/pids"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) die "usage: bash scripts/slurm_local.sh start|stop" ;;
esac
