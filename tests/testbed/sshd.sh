#!/usr/bin/env bash
# A loopback SSH test bed: N "hosts" 127.0.0.2 .. 127.0.0.(N+1), served by
# sshd processes of our own (at most 16 ListenAddress each, sshd's limit) on a
# high port, with generated host and user keys. Nothing outside DIR changes
# except /run/sshd (created when root, as sshd requires).
#
#   sshd.sh start DIR N [PORT] [SLOTS]   set up and start; prints the port
#   sshd.sh stop DIR                     stop every sshd of DIR
#
# DIR gets: home/.ssh/{id_ed25519,known_hosts}, hosts.yaml (N nodes x SLOTS),
# hostfile.plain (mpirun), hosts.list (pdsh -w), ssh_config (naming that key
# and known_hosts: give it to ssh and dlaunch with -F DIR/ssh_config; both
# ignore $HOME), sshd.pids.
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || { echo "usage: $0 start DIR N [PORT] [SLOTS] | stop DIR" >&2; exit 2; }

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stop() { tb_kill_pids "$dir/sshd.pids"; }

if [[ "$cmd" == stop ]]; then stop; exit 0; fi
[[ "$cmd" == start ]] || { echo "unknown command $cmd" >&2; exit 2; }

n=${3:?N}; port=${4:-0}; slots=${5:-2}
sshd_bin=$(tb_sshd_bin) || exit 3
if [[ "$port" == 0 ]]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.2",0)); print(s.getsockname()[1])' 2>/dev/null ||
         echo $((20000 + RANDOM % 20000)))
fi

tb_keys "$dir"
hostkey=$(tb_host_key "$dir")
: > "$dir/home/.ssh/known_hosts"
: > "$dir/hostfile.plain"
: > "$dir/hosts.list"
printf 'defaults:\n  transport: ssh   # 127.x would be started locally otherwise\n  port: %s\n  slots: %s\nhosts:\n' "$port" "$slots" > "$dir/hosts.yaml"
addrs=()
for ((i = 0; i < n; i++)); do
  a="127.0.0.$((i + 2))"
  addrs+=("$a")
  echo "[$a]:$port $hostkey" >> "$dir/home/.ssh/known_hosts"
  echo "  - $a" >> "$dir/hosts.yaml"
  echo "$a slots=$slots" >> "$dir/hostfile.plain"
  echo "$a" >> "$dir/hosts.list"
done

tb_ssh_config "$dir" "127.0.0.*" "$port"

stop
for ((g = 0; g * 16 < n; g++)); do
  conf="$dir/sshd_config.$g"
  tb_sshd_config "$dir" "$conf" "$port" "$dir/sshd.$g.pid" "${addrs[@]:$((g * 16)):16}"
  "$sshd_bin" -D -f "$conf" -E "$dir/sshd.$g.log" </dev/null >/dev/null 2>&1 &
  echo $! >> "$dir/sshd.pids"
done

# Ready when every address accepts connections.
for a in "${addrs[@]}"; do tb_wait_tcp "$a" "$port" || true; done
echo "$port"
