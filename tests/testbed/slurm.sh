#!/usr/bin/env bash
# A single-node Slurm cluster for tests: munged, slurmctld and slurmd of our
# own, with every file of theirs (sockets, state, logs) in DIR; nothing outside
# DIR changes. Needs root (slurmd runs jobs as their users) and Debian's
# slurm-wlm and munge.
#
#   slurm.sh start DIR [CPUS]   configure, start, wait until the node is idle;
#                               prints SLURM_CONF=DIR/slurm.conf
#   slurm.sh stop DIR           stop the daemons started by `start` (by pid)
#
# Exit status of start: 0 ready; 3 cannot run here (not root, not installed),
# 4 a daemon failed (its log is printed). Point SLURM_CONF at DIR/slurm.conf
# for salloc/srun/sinfo.
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || { echo "usage: $0 start DIR [CPUS] | stop DIR" >&2; exit 2; }

stop() {
  [[ -f "$dir/daemons.pids" ]] || return 0
  local pids=()
  while read -r pid; do pids+=("$pid"); done < "$dir/daemons.pids"
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  # Wait (up to 5 s) so the next start does not race the old daemons' ports.
  for _ in $(seq 50); do
    local alive=0
    for pid in "${pids[@]}"; do
      # A zombie counts as gone (an init that does not reap leaves them).
      [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" == [^Z]* ]] && alive=1
    done
    [[ $alive == 0 ]] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -f "$dir/daemons.pids"
}

if [[ "$cmd" == stop ]]; then stop; exit 0; fi
[[ "$cmd" == start ]] || { echo "unknown command $cmd" >&2; exit 2; }

[[ $(id -u) -eq 0 ]] || { echo "slurm test bed needs root (slurmd runs jobs as their users)" >&2; exit 3; }
for b in slurmctld slurmd munged munge unmunge setpriv salloc srun sinfo; do
  command -v "$b" >/dev/null || [[ -x /usr/sbin/$b ]] ||
    { echo "$b not installed (apt-get install slurm-wlm munge)" >&2; exit 3; }
done
[[ -r /etc/munge/munge.key ]] || { echo "/etc/munge/munge.key missing (reinstall munge)" >&2; exit 3; }

cpus=${3:-$(nproc)}
host=$(hostname -s)
mkdir -p "$dir/spool" "$dir/state"
dir=$(cd "$dir" && pwd)

# Two free ports (slurmctld, slurmd) from the kernel.
read -r ctld_port slurmd_port < <(python3 - <<'PY' 2>/dev/null || echo "$((20000 + RANDOM % 10000)) $((30000 + RANDOM % 10000))"
import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])
PY
)

# munge: a daemon of our own, its socket in DIR (AuthInfo below), so nothing
# of the system's munge is touched and `stop` ends it with the others.
stop
: > "$dir/daemons.pids"
mkdir -p "$dir/munge"
chown munge:munge "$dir/munge"
chmod 0755 "$dir/munge"  # munged wants others to reach its socket
munge_socket=$dir/munge/munge.socket
setsid setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged -F \
  --socket="$munge_socket" --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
  --seed-file="$dir/munge/munged.seed" >>"$dir/munged.out" 2>&1 < /dev/null &
munged_pid=$!
echo $munged_pid >> "$dir/daemons.pids"
for _ in $(seq 50); do
  munge -S "$munge_socket" -n </dev/null 2>/dev/null | unmunge -S "$munge_socket" >/dev/null 2>&1 && break
  kill -0 $munged_pid 2>/dev/null || break
  sleep 0.1
done
munge -S "$munge_socket" -n </dev/null 2>/dev/null | unmunge -S "$munge_socket" >/dev/null 2>&1 ||
  { echo "munged does not answer:" >&2; tail -n 5 "$dir/munged.out" "$dir/munge/munged.log" >&2 2>/dev/null; stop; exit 4; }

cat > "$dir/slurm.conf" <<CONF
ClusterName=dlaunchtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$munge_socket
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmdParameters=config_overrides  # CPUS may exceed the cores (slots for oversubscribed tests)
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmdSpoolDir=$dir/spool
StateSaveLocation=$dir/state
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldTimeout=10
SlurmdTimeout=10
InactiveLimit=0
KillWait=2
MinJobAge=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
export SLURM_CONF=$dir/slurm.conf

setsid /usr/sbin/slurmctld -D -i -f "$SLURM_CONF" >>"$dir/slurmctld.out" 2>&1 < /dev/null &
echo $! >> "$dir/daemons.pids"
setsid /usr/sbin/slurmd -D -f "$SLURM_CONF" >>"$dir/slurmd.out" 2>&1 < /dev/null &
echo $! >> "$dir/daemons.pids"

# Ready when the node is idle (about 1 s); give up after 20 s.
for _ in $(seq 200); do
  state=$(sinfo -h -n "$host" -o %t 2>/dev/null || true)
  [[ "$state" == idle ]] && { echo "SLURM_CONF=$SLURM_CONF"; exit 0; }
  [[ "$state" == inval || "$state" == drain* ]] && break  # a config error: it stays so
  while read -r pid; do
    kill -0 "$pid" 2>/dev/null || {
      echo "a slurm daemon exited at start:" >&2
      tail -n 20 "$dir"/slurmctld.out "$dir"/slurmd.out "$dir"/*.log >&2 2>/dev/null || true
      stop; exit 4; }
  done < "$dir/daemons.pids"
  sleep 0.1
done
echo "slurm node '$host' not idle (state '${state:-?}'):" >&2
tail -n 20 "$dir"/*.log >&2 2>/dev/null || true
stop
exit 4
