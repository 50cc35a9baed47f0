#!/usr/bin/env bash
# A one-node Slurm cluster on this machine for the launcher tests, from Debian's slurm-wlm:
# munged, slurmctld and slurmd started as root with a slurm.conf written into a scratch
# directory (their own ports, sockets, spool and logs there; nothing under /etc changes but
# reading munge's key), and stopped again.
#   tests/launchers/slurm_cluster.sh start DIR   # prints what to export: SLURM_CONF=DIR/slurm.conf
#   tests/launchers/slurm_cluster.sh stop DIR
# start exits 77 with the reason where the daemons cannot run here (not root, no slurm-wlm or
# munge, a daemon that does not come up), so a test skips with a clear message.
set -euo pipefail
action=${1:?start or stop}
dir=${2:?scratch directory}

stop() {
  for name in slurmd slurmctld munged; do
    if [ -f "$dir/$name.pid" ]; then
      kill "$(cat "$dir/$name.pid")" 2>/dev/null || true
    fi
  done
  sleep 0.5
  for name in slurmd slurmctld munged; do
    if [ -f "$dir/$name.pid" ]; then
      kill -9 "$(cat "$dir/$name.pid")" 2>/dev/null || true
      rm -f "$dir/$name.pid"
    fi
  done
}

skip() {
  echo "slurm cluster: $1: skipped"
  [ -d "$dir" ] && stop
  exit 77
}

if [ "$action" = stop ]; then
  stop
  exit 0
fi
[ "$action" = start ] || { echo "slurm_cluster.sh: start or stop, not $action" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || skip "the daemons need root"
for program in munged slurmctld slurmd srun sbatch sinfo scontrol; do
  command -v "$program" >/dev/null || skip "no $program (apt install slurm-wlm munge)"
done
[ -r /etc/munge/munge.key ] || skip "no /etc/munge/munge.key"
mkdir -p "$dir/state" "$dir/spool"
host=$(hostname -s)
cpus=$(nproc)
memory=$(awk '/MemTotal/ { printf "%d", $2 / 1024 / 2 }' /proc/meminfo)
# Ports of our own, so that a system Slurm (or another test run) does not collide.
base=$((20000 + $$ % 20000))
cat >"$dir/slurm.conf" <<CONF
ClusterName=cctest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
KillWait=5
InactiveLimit=0
MinJobAge=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
munged --force --socket="$dir/munge.socket" --key-file=/etc/munge/munge.key \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" ||
  skip "munged did not start ($(tail -1 "$dir/munged.log" 2>/dev/null))"
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$dir/slurm.conf" || skip "slurmctld did not start ($(tail -1 "$dir/slurmctld.log" 2>/dev/null))"
slurmd -f "$dir/slurm.conf" || skip "slurmd did not start ($(tail -1 "$dir/slurmd.log" 2>/dev/null))"
for _ in $(seq 60); do
  state=$(sinfo -h -n "$host" -o %t 2>/dev/null || true)
  case "$state" in
    idle*|mix*|alloc*) echo "SLURM_CONF=$dir/slurm.conf"; exit 0 ;;
  esac
  sleep 0.5
done
skip "node $host not up after 30 s (state '${state:-none}'; $(tail -1 "$dir/slurmd.log" 2>/dev/null))"
