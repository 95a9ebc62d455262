#!/usr/bin/env bash
# A multi-host SSH test bed on one machine: N hosts, each a network namespace
# with its own network stack, joined to the root namespace by a veth pair on a
# bridge, with its own address (10.201.I.2 .. 10.201.I.(N+1)/24; the head is
# 10.201.I.1 on the bridge) and its own sshd on port 22. Hosts reach each
# other through the bridge. A host can be cut off for real (`exec DIR K ip
# link set eth0 down`), its traffic shaped (tc), its connections reset (ss -K).
# All namespaces share the PID namespace and the file system, so the agent and
# the workers are the ones from the build, and the tests see every process.
# Needs root and `ip netns` (iproute2).
#
#   netns.sh start DIR N [SLOTS] [AGENT]  set up and start; prints the head's address
#   netns.sh stop DIR                     kill every process in the namespaces, remove
#                                         them, their veths and the bridge (safe to
#                                         repeat, and after a failed start or test)
#   netns.sh exec DIR K CMD [ARGS...]     run CMD in host K's namespace (K from 0)
#
# With TB_NETNS_HOST_SYS=1, each host's sshd enters only its network
# namespace (nsenter), so that its sessions see this machine's /sys and its
# cgroups (the container tests: podman's runtime needs them).
#
# With TB_NODE_ROOT=ROOT (a root file system from bare-root.sh), every host
# is a bare node: its sshd runs chrooted into ROOT in a mount namespace of its
# own (bare-node.sh), so that its sessions see none of this machine's
# libraries; DIR/share is its /srv/share, read-only.
#
# DIR gets what tests/testbed/sshd.sh writes (home/.ssh/{id_ed25519,
# known_hosts}; hosts.yaml with transport ssh and, if given, the agent path;
# hostfile.plain; hosts.list; ssh_config, which names that key and known_hosts:
# ssh -F DIR/ssh_config, dlaunch -F DIR/ssh_config), plus nodes (one line
# per host: "K NAMESPACE ADDRESS ROOT_VETH") and netns.state (what stop removes;
# a test that adds a route to the root namespace appends "route PREFIX" there,
# so that stop removes it too, even after the test was killed).
set -euo pipefail

cmd=${1:-}; dir=${2:-}
usage="usage: $0 start DIR N [SLOTS] [AGENT] | stop DIR | exec DIR K CMD [ARGS...]"
[[ -n "$cmd" && -n "$dir" ]] || { echo "$usage" >&2; exit 2; }

# shellcheck source=tests/testbed/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stop() {
  [[ -f "$dir/netns.state" ]] || { tb_kill_pids "$dir/sshd.pids"; return 0; }
  local kind name pid pids
  # Every process in a namespace of ours: sshd, its sessions, anything a
  # failed test left behind there. Then the namespaces (which takes their
  # end of each veth pair, and with it the other end), then the bridge.
  while read -r kind name; do
    [[ "$kind" == ns ]] || continue
    for _ in 1 2 3; do
      pids=$(ip netns pids "$name" 2>/dev/null || true)
      [[ -z "$pids" ]] && break
      for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
      sleep 0.05
    done
  done < "$dir/netns.state"
  tb_kill_pids "$dir/sshd.pids"
  while read -r kind name; do
    case "$kind" in
      ns) ip netns del "$name" 2>/dev/null || true ;;
      veth) ip link del "$name" 2>/dev/null || true ;;
      route) ip route del "$name" 2>/dev/null || true ;;
    esac
  done < "$dir/netns.state"
  while read -r kind name; do
    if [[ "$kind" == bridge ]]; then ip link del "$name" 2>/dev/null || true; fi
  done < "$dir/netns.state"
  rm -f "$dir/netns.state" "$dir/nodes"
}

case "$cmd" in
  stop) stop; exit 0 ;;
  exec)
    k=${3:?K}; shift 3
    [[ -f "$dir/nodes" ]] || { echo "no test bed in $dir" >&2; exit 2; }
    ns=$(awk -v k="$k" '$1 == k { print $2 }' "$dir/nodes")
    [[ -n "$ns" ]] || { echo "no host $k in $dir" >&2; exit 2; }
    exec ip netns exec "$ns" "$@" ;;
  start) ;;
  *) echo "$usage" >&2; exit 2 ;;
esac

n=${3:?N}; slots=${4:-2}; agent=${5:-}
(( n >= 1 && n <= 250 )) || { echo "N must be 1..250" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "netns.sh needs root (network namespaces)" >&2; exit 3; }
if ! command -v ip >/dev/null; then
  "$(dirname "${BASH_SOURCE[0]}")/../../scripts/install-deps.sh" >&2 || true
  command -v ip >/dev/null || { echo "netns.sh needs iproute2 (scripts/install-deps.sh)" >&2; exit 3; }
fi
sshd_bin=$(tb_sshd_bin) || exit 3

mkdir -p "$dir"
stop  # a bed left in DIR by an earlier run
: > "$dir/netns.state"
# On any failure from here on, take down what was made.
on_exit() { local rc=$?; if [[ $rc -ne 0 ]]; then stop; fi; }
trap on_exit EXIT

# A free bridge name picks the subnet: two beds at once never collide.
idx=""
for ((i = 1; i <= 250; i++)); do
  if ip link add "dlfm$i" type bridge 2>/dev/null; then idx=$i; break; fi
done
[[ -n "$idx" ]] || { echo "netns.sh: cannot create a bridge (is this root with CAP_NET_ADMIN?)" >&2; exit 3; }
br="dlfm$idx"
net="10.201.$idx"
echo "bridge $br" >> "$dir/netns.state"
ip addr add "$net.1/24" dev "$br"
ip link set "$br" up

tb_keys "$dir"
hostkey=$(tb_host_key "$dir")
: > "$dir/home/.ssh/known_hosts"
: > "$dir/hostfile.plain"
: > "$dir/hosts.list"
: > "$dir/nodes"
{
  printf 'defaults:\n  transport: ssh\n  port: 22\n  slots: %s\n' "$slots"
  [[ -n "$agent" ]] && printf '  agent: %s\n' "$agent"
  printf 'hosts:\n'
} > "$dir/hosts.yaml"

addrs=()
for ((k = 0; k < n; k++)); do
  ns="dlfm$idx-$k"
  veth="dlfm${idx}v$k"
  a="$net.$((k + 2))"
  addrs+=("$a")
  ip netns add "$ns"
  echo "ns $ns" >> "$dir/netns.state"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  echo "veth $veth" >> "$dir/netns.state"
  ip link set "$veth" master "$br" up
  ip -n "$ns" addr add "$a/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  echo "$k $ns $a $veth" >> "$dir/nodes"
  echo "$a $hostkey" >> "$dir/home/.ssh/known_hosts"
  echo "  - $a" >> "$dir/hosts.yaml"
  echo "$a slots=$slots" >> "$dir/hostfile.plain"
  echo "$a" >> "$dir/hosts.list"

  conf="$dir/sshd_config.$k"
  tb_sshd_config "$dir" "$conf" 22 "$dir/sshd.$k.pid"
  # Like a fresh host, the bed runs no shell startup file of the user: bash
  # sources ~/.bashrc for commands run by sshd unless it is a nested shell.
  # (Here root's ~/.bashrc runs `pyenv init`: a fifth of a second per login,
  # and a lock left behind for every later login when a fault test kills a
  # login half-way.)
  echo "SetEnv SHLVL=1" >> "$conf"
  # ip netns exec execs sshd: $! is sshd's pid.
  if [[ -n "${TB_NODE_ROOT:-}" ]]; then
    # A bare node: its sshd chrooted into that root file system
    # (bare-node.sh; the root from bare-root.sh).
    ip netns exec "$ns" unshare -m --propagation private \
      "$(dirname "${BASH_SOURCE[0]}")/bare-node.sh" "$TB_NODE_ROOT" "$dir" "$k" \
      </dev/null >/dev/null 2>&1 &
  elif [[ -n "${TB_NETNS_HOST_SYS:-}" ]]; then
    # The namespace's network only: its sessions keep this machine's /sys,
    # cgroups included, as on a real node (a container runtime needs them);
    # `ip netns exec` mounts a /sys of the namespace without /sys/fs/cgroup.
    nsenter --net="/run/netns/$ns" "$sshd_bin" -D -f "$conf" -E "$dir/sshd.$k.log" </dev/null >/dev/null 2>&1 &
  else
    ip netns exec "$ns" "$sshd_bin" -D -f "$conf" -E "$dir/sshd.$k.log" </dev/null >/dev/null 2>&1 &
  fi
  echo $! >> "$dir/sshd.pids"
done
tb_ssh_config "$dir" "$net.*" 22

for a in "${addrs[@]}"; do
  tb_wait_tcp "$a" 22 200 || { echo "netns.sh: sshd on $a did not come up" >&2; cat "$dir"/sshd.*.log >&2 || true; exit 1; }
done
echo "$net.1"
