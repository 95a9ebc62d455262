#!/usr/bin/env bash
# A loopback SSH test bed: N "hosts" 127.0.0.2 .. 127.0.0.(N+1), served by
# sshd processes of our own (at most 16 ListenAddress each, sshd's limit) on a
# high port, with generated host and user keys. Nothing outside DIR changes
# except /run/sshd (created when root, as sshd requires).
#
#   sshd.sh start DIR N [PORT] [SLOTS]   set up and start; prints the port
#   sshd.sh stop DIR                     stop every sshd of DIR
#
# DIR gets: home/.ssh/{id_ed25519,known_hosts} (point HOME there), hosts.yaml
# (N nodes x SLOTS), hostfile.plain (mpirun), hosts.list (pdsh -w), ssh_config
# (for the OpenSSH client, which ignores $HOME: ssh -F DIR/ssh_config), sshd.pids.
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || { echo "usage: $0 start DIR N [PORT] [SLOTS] | stop DIR" >&2; exit 2; }

stop() {
  [[ -f "$dir/sshd.pids" ]] || return 0
  while read -r pid; do kill "$pid" 2>/dev/null || true; done < "$dir/sshd.pids"
  rm -f "$dir/sshd.pids"
}

if [[ "$cmd" == stop ]]; then stop; exit 0; fi
[[ "$cmd" == start ]] || { echo "unknown command $cmd" >&2; exit 2; }

n=${3:?N}; port=${4:-0}; slots=${5:-2}
sshd_bin=$(command -v sshd || echo /usr/sbin/sshd)
[[ -x "$sshd_bin" ]] || { echo "sshd not installed (apt-get install openssh-server)" >&2; exit 3; }
if [[ "$port" == 0 ]]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.2",0)); print(s.getsockname()[1])' 2>/dev/null ||
         echo $((20000 + RANDOM % 20000)))
fi

mkdir -p "$dir/home/.ssh"
chmod 700 "$dir/home/.ssh"
[[ -f "$dir/host_key" ]] || ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
[[ -f "$dir/home/.ssh/id_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -f "$dir/home/.ssh/id_ed25519"
cp "$dir/home/.ssh/id_ed25519.pub" "$dir/authorized_keys"
chmod 600 "$dir/authorized_keys"
[[ $(id -u) -eq 0 ]] && mkdir -p /run/sshd

hostkey=$(cut -d' ' -f1,2 "$dir/host_key.pub")
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

cat > "$dir/ssh_config" <<CONF
Host 127.0.0.*
  Port $port
  IdentityFile $dir/home/.ssh/id_ed25519
  UserKnownHostsFile $dir/home/.ssh/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  LogLevel ERROR
CONF

stop
for ((g = 0; g * 16 < n; g++)); do
  conf="$dir/sshd_config.$g"
  {
    echo "Port $port"
    for a in "${addrs[@]:$((g * 16)):16}"; do echo "ListenAddress $a"; done
    echo "HostKey $dir/host_key"
    echo "AuthorizedKeysFile $dir/authorized_keys"
    echo "PidFile $dir/sshd.$g.pid"
    echo "UsePAM no"
    echo "StrictModes no"
    echo "PermitRootLogin prohibit-password"
    echo "PasswordAuthentication no"
    echo "KbdInteractiveAuthentication no"
    echo "MaxStartups 500:30:1000"
    echo "MaxSessions 100"
    echo "LogLevel ERROR"
  } > "$conf"
  "$sshd_bin" -D -f "$conf" -E "$dir/sshd.$g.log" </dev/null >/dev/null 2>&1 &
  echo $! >> "$dir/sshd.pids"
done

# Ready when every address accepts connections.
for a in "${addrs[@]}"; do
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/$a/$port") 2>/dev/null && break
    sleep 0.05
  done
done
echo "$port"
