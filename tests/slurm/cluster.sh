#!/usr/bin/env bash
# A private single-node SLURM for testing jobs/ for real (Debian's slurm-wlm and munge,
# daemons started by hand: no systemd needed).
#
#   tests/slurm/cluster.sh start ROOT    # writes ROOT/slurm.conf, starts munged (if needed),
#                                        # slurmctld and slurmd; prints the SLURM_CONF to export
#   tests/slurm/cluster.sh stop ROOT     # stops the daemons this script started in ROOT
#
# Requeued jobs restart after ~10–16 s (cred_expire=10, sched_interval=5).
set -euo pipefail
action="${1:?usage: cluster.sh start|stop ROOT}"
root="${2:?usage: cluster.sh start|stop ROOT}"
root=$(realpath -m "$root")

stop() {
  for pidfile in "$root/slurmd.pid" "$root/slurmctld.pid"; do
    if [[ -s "$pidfile" ]]; then
      pid=$(cat "$pidfile")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$pidfile"
    fi
  done
  if [[ -s "$root/munged.pid" ]]; then
    kill "$(cat "$root/munged.pid")" 2>/dev/null || true
    rm -f "$root/munged.pid"
  fi
}

case "$action" in
  stop) stop; exit 0 ;;
  start) ;;
  *) echo "cluster.sh: unknown action $action (start or stop)" >&2; exit 2 ;;
esac

for tool in slurmctld slurmd munged sinfo; do
  command -v "$tool" >/dev/null || { echo "cluster.sh: $tool is missing (apt-get install slurm-wlm munge)" >&2; exit 1; }
done
mkdir -p "$root/state" "$root/spool" "$root/log"
host=$(hostname -s)
mem_mb=$(awk '/MemTotal/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
cat > "$root/slurm.conf" <<CONF
ClusterName=tensorfem-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
CredType=cred/munge
StateSaveLocation=$root/state
SlurmdSpoolDir=$root/spool
SlurmctldPidFile=$root/slurmctld.pid
SlurmdPidFile=$root/slurmd.pid
SlurmctldLogFile=$root/log/slurmctld.log
SlurmdLogFile=$root/log/slurmd.log
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=5,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=pmix
ReturnToService=2
KillWait=10
NodeName=$host CPUs=$(nproc) RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$root/slurm.conf"

# munged: one per machine; start it unless one already answers.
if ! munge -n </dev/null >/dev/null 2>&1; then
  install -d -o munge -g munge -m 755 /run/munge
  runuser -u munge -- /usr/sbin/munged
  pgrep -u munge -n munged > "$root/munged.pid"
fi
slurmctld -i
slurmd
for _ in $(seq 100); do
  [[ "$(sinfo -h -o %t 2>/dev/null)" == idle ]] && { echo "SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.1
done
echo "cluster.sh: the node did not become idle within 10 s: see $root/log/" >&2
sinfo >&2 || true
stop
exit 1
