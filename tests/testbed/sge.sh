#!/usr/bin/env bash
# A single-node Grid Engine cluster for tests: sge_qmaster and sge_execd of
# our own (Debian's gridengine-master, gridengine-exec, gridengine-client),
# with a cell of our own (SGE_ROOT=DIR/root, classic spooling) and every file
# of theirs in DIR; nothing outside DIR changes (the cell Debian's package set
# up in /var/lib/gridengine is not used). Needs root (sge_execd runs jobs as
# their users). One queue, all.q, with SLOTS slots, and a parallel environment
# `dlaunch` (control_slaves TRUE, so `qrsh -inherit` may start tasks;
# allocation_rule $fill_up).
#
#   sge.sh start DIR [SLOTS]   configure, start, wait until the queue takes
#                              jobs; prints the variables qsub/qrsh need
#                              (SGE_ROOT, SGE_CELL, SGE_QMASTER_PORT,
#                              SGE_EXECD_PORT), one NAME=VALUE a line, and
#                              writes them to DIR/env too
#   sge.sh stop DIR            stop the daemons started by `start` (by pid)
#
# Exit status of start: 0 ready; 3 cannot run here (not root, not installed),
# 4 a daemon failed (its log is printed).
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || { echo "usage: $0 start DIR [SLOTS] | stop DIR" >&2; exit 2; }

stop() {
  [[ -f "$dir/daemons.pids" ]] || return 0
  # Jobs still running: SGE ends them (shepherds and all) while it can.
  if [[ -f "$dir/env" ]]; then
    (set -a; . "$dir/env"
     qdel -f -u '*' >/dev/null 2>&1 || true
     for _ in $(seq 50); do [[ -z "$(qstat -u '*' 2>/dev/null)" ]] && break; sleep 0.1; done)
  fi
  local pids=()
  while read -r pid; do pids+=("$pid"); done < "$dir/daemons.pids"
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  # Wait (up to 2 s; sge_qmaster takes longer to shut down than the bed is
  # worth keeping, so it gets SIGKILL then) so the next start does not race
  # the old daemons' ports.
  for _ in $(seq 20); do
    local alive=0
    for pid in "${pids[@]}"; do
      [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" == [^Z]* ]] && alive=1
    done
    [[ $alive == 0 ]] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -f "$dir/daemons.pids" "$dir/env"
}

if [[ "$cmd" == stop ]]; then stop; exit 0; fi
[[ "$cmd" == start ]] || { echo "unknown command $cmd" >&2; exit 2; }

[[ $(id -u) -eq 0 ]] || { echo "SGE test bed needs root (sge_execd runs jobs as their users)" >&2; exit 3; }
for b in /usr/sbin/sge_qmaster /usr/sbin/sge_execd /usr/lib/gridengine/spoolinit \
         /usr/lib/gridengine/spooldefaults qconf qrsh qsub qstat qhost; do
  command -v "$b" >/dev/null ||
    { echo "$b not installed (apt-get install gridengine-master gridengine-exec gridengine-client)" >&2; exit 3; }
done
[[ -d /var/lib/gridengine/bin ]] || { echo "/var/lib/gridengine/bin missing (reinstall gridengine-common)" >&2; exit 3; }

slots=${3:-4}
host=$(hostname -s)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
stop

read -r qmaster_port execd_port < <(python3 - <<'PY' 2>/dev/null || echo "$((20000 + RANDOM % 10000)) $((30000 + RANDOM % 10000))"
import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])
PY
)

# The cell: binaries and helpers from Debian's SGE_ROOT, configuration ours.
root=$dir/root
common=$root/default/common
rm -rf "$root" "$dir/qmaster" "$dir/execd"
mkdir -p "$common" "$dir/qmaster" "$dir/execd"
for l in bin lib utilbin util; do ln -s "/var/lib/gridengine/$l" "$root/$l"; done
cat > "$common/bootstrap" <<CONF
admin_user              none
default_domain          none
ignore_fqdn             true
spooling_method         classic
spooling_lib            libspoolc
spooling_params         $common;$dir/qmaster
binary_path             /usr/sbin
qmaster_spool_dir       $dir/qmaster
security_mode           none
listener_threads        2
worker_threads          2
scheduler_threads       1
CONF
echo "$host" > "$common/act_qmaster"
# This host's other names (127.0.0.1 may resolve back to localhost): one host to SGE.
aliases=$(printf '%s\n' localhost "$(hostname)" "$(hostname -f 2>/dev/null || true)" |
  grep -v -x -e "$host" -e '' | sort -u | tr '\n' ' ')
echo "$host $aliases" > "$common/host_aliases"

export SGE_ROOT=$root SGE_CELL=default SGE_QMASTER_PORT=$qmaster_port SGE_EXECD_PORT=$execd_port
{
  /usr/lib/gridengine/spoolinit classic libspoolc "$common;$dir/qmaster" init
  /usr/lib/gridengine/spooldefaults configuration /usr/share/gridengine/default-configuration
  /usr/lib/gridengine/spooldefaults complexes /usr/share/gridengine/util/resources/centry
  /usr/lib/gridengine/spooldefaults usersets /usr/share/gridengine/util/resources/usersets
  /usr/lib/gridengine/spooldefaults managers root
  /usr/lib/gridengine/spooldefaults adminhosts "$host"
} > "$dir/init.log" 2>&1 || { echo "SGE spool initialisation failed:" >&2; cat "$dir/init.log" >&2; exit 4; }
# Jobs of root (min_uid 0), the execd's spool in DIR, no mail.
sed -i -e "s|^execd_spool_dir .*|execd_spool_dir              $dir/execd|" \
  -e 's/^min_uid .*/min_uid                      0/' -e 's/^min_gid .*/min_gid                      0/' \
  -e 's|^mailer .*|mailer                       /bin/true|' "$common/configuration"

: > "$dir/daemons.pids"
SGE_ND=1 setsid /usr/sbin/sge_qmaster >>"$dir/qmaster.out" 2>&1 < /dev/null &
echo $! >> "$dir/daemons.pids"
ready=0
for _ in $(seq 100); do
  qconf -sh >/dev/null 2>&1 && { ready=1; break; }
  kill -0 "$(head -n1 "$dir/daemons.pids")" 2>/dev/null || break
  sleep 0.1
done
[[ $ready == 1 ]] || {
  echo "sge_qmaster does not answer:" >&2
  tail -n 20 "$dir/qmaster.out" "$dir/qmaster/messages" >&2 2>/dev/null || true
  stop; exit 4; }

# Scheduling every second, this host a submit and execution host, the
# parallel environment and the queue.
conf() { "$@" >> "$dir/config.log" 2>&1 || { echo "'$*' failed:" >&2; tail -n 5 "$dir/config.log" >&2; stop; exit 4; }; }
qconf -ssconf | sed -e 's/^schedule_interval .*/schedule_interval 0:0:1/' \
  -e 's/^flush_submit_sec .*/flush_submit_sec 1/' -e 's/^flush_finish_sec .*/flush_finish_sec 1/' \
  -e 's/^job_load_adjustments .*/job_load_adjustments NONE/' \
  -e 's/^load_adjustment_decay_time .*/load_adjustment_decay_time 0:0:0/' > "$dir/sched.conf"
conf qconf -Msconf "$dir/sched.conf"
conf qconf -as "$host"
printf '%s\n' "hostname $host" "load_scaling NONE" "complex_values NONE" "user_lists NONE" \
  "xuser_lists NONE" "projects NONE" "xprojects NONE" "usage_scaling NONE" \
  "report_variables NONE" > "$dir/exechost.conf"
conf qconf -Ae "$dir/exechost.conf"
cat > "$dir/pe.conf" <<'CONF'
pe_name            dlaunch
slots              999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    $fill_up
control_slaves     TRUE
job_is_first_task  FALSE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
CONF
conf qconf -Ap "$dir/pe.conf"
qconf -sq | sed -e 's/^qname .*/qname all.q/' -e "s/^hostlist .*/hostlist $host/" \
  -e "s/^slots .*/slots $slots/" -e 's/^pe_list .*/pe_list dlaunch/' -e 's|^shell .*|shell /bin/sh|' \
  -e 's/^load_thresholds .*/load_thresholds NONE/' -e 's|^tmpdir .*|tmpdir /tmp|' > "$dir/queue.conf"
conf qconf -Aq "$dir/queue.conf"

SGE_ND=1 setsid /usr/sbin/sge_execd >>"$dir/execd.out" 2>&1 < /dev/null &
echo $! >> "$dir/daemons.pids"

# Ready when the host reports its load (the queue then takes jobs); give up
# after 30 s.
for _ in $(seq 300); do
  load=$(qhost -h "$host" 2>/dev/null | awk -v h="$host" '$1 == h {print $7}')
  if [[ -n "$load" && "$load" != "-" ]]; then
    printf '%s\n' "SGE_ROOT=$SGE_ROOT" "SGE_CELL=$SGE_CELL" "SGE_QMASTER_PORT=$SGE_QMASTER_PORT" \
      "SGE_EXECD_PORT=$SGE_EXECD_PORT" | tee "$dir/env"
    exit 0
  fi
  while read -r pid; do
    kill -0 "$pid" 2>/dev/null || {
      echo "an SGE daemon exited at start:" >&2
      tail -n 20 "$dir"/*.out "$dir/qmaster/messages" >&2 2>/dev/null || true
      stop; exit 4; }
  done < "$dir/daemons.pids"
  sleep 0.1
done
echo "SGE host '$host' reports no load:" >&2
tail -n 20 "$dir"/*.out "$dir/qmaster/messages" >&2 2>/dev/null || true
stop
exit 4
