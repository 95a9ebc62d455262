#!/usr/bin/env bash
# A wide loopback SSH test bed: N "hosts" (1024 and more) on one machine. One
# sshd of our own listens on 0.0.0.0 on a free port and so answers for every
# 127.a.b.c; each host is its own address and its own known_hosts entry
# `[127.a.b.c]:PORT`. Logins from anywhere but loopback are refused
# (AllowUsers *@127.*). Nothing outside DIR changes except /run/sshd and,
# as root, the login user `dlbench` (created if missing, login shell /bin/sh:
# root's shell may run slow start-up files for every login).
#
#   wide.sh start DIR N [SLOTS]   set up and start; prints the port
#   wide.sh stop DIR              stop the sshd of DIR
#
# Host i (0-based) is 127.1.(i / 250).(i % 250 + 1): 127.1.0.1 .. 127.1.0.250,
# 127.1.1.1 ... (up to 64000 hosts).
#
# DIR gets: home/.ssh/{id_ed25519,known_hosts} (named by ssh_config), hosts.yaml
# (N nodes x SLOTS, transport ssh, the port and the login user), hosts.list
# (one address a line; pdsh -w ^DIR/hosts.list), hostfile.plain (mpirun),
# ssh_config (for the OpenSSH client: ssh -F DIR/ssh_config), sshd.pids,
# port, user.
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || { echo "usage: $0 start DIR N [SLOTS] | stop DIR" >&2; exit 2; }

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stop() { tb_kill_pids "$dir/sshd.pids"; }

if [[ "$cmd" == stop ]]; then stop; exit 0; fi
[[ "$cmd" == start ]] || { echo "unknown command $cmd" >&2; exit 2; }

n=${3:?N}; slots=${4:-1}
((n >= 1 && n <= 64000)) || { echo "wide.sh: N must be 1 .. 64000" >&2; exit 2; }
sshd_bin=$(tb_sshd_bin) || exit 3
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

user=$(id -un)
if [[ $(id -u) -eq 0 ]]; then
  user=dlbench
  # -p '*': no password, but not a locked account (sshd refuses those).
  id "$user" >/dev/null 2>&1 ||
    useradd --system --create-home --home-dir "/var/lib/$user" --shell /bin/sh -p '*' "$user"
fi

# A port free on every address (the listener takes 0.0.0.0).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("0.0.0.0",0)); print(s.getsockname()[1])')

tb_keys "$dir"
# The login user reads the keys file (sshd reads it with the user's rights).
chmod 755 "$dir"
chmod 644 "$dir/authorized_keys"
hostkey=$(tb_host_key "$dir")

addr() { echo "127.1.$(($1 / 250)).$(($1 % 250 + 1))"; }
{
  printf 'defaults:\n  transport: ssh   # 127.x would be started locally otherwise\n'
  printf '  port: %s\n  user: %s\n  slots: %s\nhosts:\n' "$port" "$user" "$slots"
  for ((i = 0; i < n; i++)); do echo "  - $(addr "$i")"; done
} > "$dir/hosts.yaml"
for ((i = 0; i < n; i++)); do addr "$i"; done > "$dir/hosts.list"
awk -v p="$port" -v k="$hostkey" '{print "[" $0 "]:" p " " k}' "$dir/hosts.list" > "$dir/home/.ssh/known_hosts"
sed "s/\$/ slots=$slots/" "$dir/hosts.list" > "$dir/hostfile.plain"
tb_ssh_config "$dir" "127.1.*" "$port"
echo "  User $user" >> "$dir/ssh_config"
echo "$port" > "$dir/port"
echo "$user" > "$dir/user"

stop
conf="$dir/sshd_config"
# Every login of the bed may be in its handshake at once: no early drops.
TB_SSHD_MAX_STARTUPS="$((n + 64)):100:$((n + 128))" tb_sshd_config "$dir" "$conf" "$port" "$dir/sshd.pid" 0.0.0.0
echo "AllowUsers *@127.*" >> "$conf"
# The listener holds a pipe per login in progress: give it room. It is made a
# child subreaper (prctl PR_SET_CHILD_SUBREAPER, kept across exec): what a
# login leaves running after its session ended (an agent still stopping) is
# reparented to it and reaped by it, so the listener's children's CPU times
# (/proc/PID/stat cutime, cstime) count every process the logins ran.
(ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
 exec python3 -c 'import ctypes, os, sys
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
os.execv(sys.argv[1], sys.argv[1:])' "$sshd_bin" -D -f "$conf" -E "$dir/sshd.log" </dev/null >/dev/null 2>&1) &
echo $! > "$dir/sshd.pids"

# Ready when the first and the last host accept connections, and the pid file
# is there (only one process may listen on a port: a second sshd would exit).
tb_wait_tcp "$(addr 0)" "$port" || { echo "wide.sh: sshd did not start (see $dir/sshd.log)" >&2; exit 1; }
tb_wait_tcp "$(addr $((n - 1)))" "$port" || { echo "wide.sh: sshd did not start" >&2; exit 1; }
for ((t = 0; t < 100; t++)); do [[ -s "$dir/sshd.pid" ]] && break; sleep 0.05; done
[[ -s "$dir/sshd.pid" ]] || { echo "wide.sh: sshd wrote no pid file (see $dir/sshd.log)" >&2; exit 1; }
echo "$port"
