#!/usr/bin/env bash
# A test bed that looks like a user's real cluster behind a bastion: the head
# (this, the root network namespace) reaches one host only, the bastion; N
# GPU nodes sit on a private network that only the bastion and the nodes
# themselves reach, and the user gets there with OpenSSH's ProxyJump, a key of
# a non-default name and a known-hosts file of their own, as users have it.
#
#   bastion.sh start DIR N [BUILD_DIR]   set up, start and check with OpenSSH;
#                                        prints the path of the ssh config
#   bastion.sh stop DIR                  kill every process in the bed's
#                                        namespaces, remove them, their veths,
#                                        the bridges and the route (safe to
#                                        repeat, and after a failed start)
#   bastion.sh exec DIR K CMD [ARGS...]  run CMD in node K's network namespace
#                                        (K = 1..N); `exec DIR bastion CMD...`
#                                        in the bastion's
#
# The network of bed I (I = 0..249: the first free index, so that beds can
# coexist; a subnet that the root namespace already routes is skipped):
#   bridge A dlbxIa, 10.202.I.0/24: the head is 10.202.I.1 (the bridge's own
#     address), the bastion 10.202.I.2 (its eth0).
#   bridge B dlbxIb, 10.203.I.0/24, with NO address in the root namespace and
#     `unreachable 10.203.I.0/24` routed there, so that no packet for the
#     private network leaves the machine (and no IPv6 link-local address on
#     the root's side of B either): the bastion is 10.203.I.1 (its eth1), node
#     K is 10.203.I.(10+K) (its eth0), namespace dlbxI-gpu-K, host name gpu-K.
#   The bastion does not forward packets: the way in is SSH (ProxyJump, -W).
#   Nodes reach each other and the bastion, not the head (no route back, as
#   from a cluster to a user's laptop).
#   Every node and the bastion have a decoy `docker0` bridge, 172.17.0.1/16, up.
# Each host has its own sshd on port 22 (all addresses), its own host key and
# its own UTS namespace (hostname gpu-K, bastion). A node's sshd runs in a
# mount namespace of its own where BUILD_DIR, if given, is an empty tmpfs: its
# sessions see no dlaunch (the rest of the file system is shared); the login
# user's ~/.cache is a tmpfs of that node's own. exec runs
# in the network namespace only (the build folder visible, the machine's
# hostname). Needs root, iproute2, unshare (util-linux), OpenSSH client and
# server.
#
# DIR gets (DIR is made absolute; every path written is absolute):
#   ssh_config                     aliases bastion, gpu-1 .. gpu-N (ProxyJump
#                                  bastion), User root, IdentityFile
#                                  home/.ssh/cluster_key, IdentitiesOnly yes,
#                                  UserKnownHostsFile home/.ssh/cluster_known_hosts
#                                  (for the bastion too); give it to ssh and
#                                  dlaunch with -F: both take ~ from the passwd
#                                  entry, never $HOME, so no HOME can point here
#   home/.ssh/cluster_key{,.pub}   the user's key (no id_* of default names:
#                                  nothing works through OpenSSH's defaults)
#   home/.ssh/cluster_known_hosts  the bastion under 10.202.I.2, node K under
#                                  10.203.I.(10+K): the names OpenSSH checks
#   ssh_config.proxycommand        the same with `ProxyCommand ssh -F <it> -W
#                                  %h:%p bastion` instead of ProxyJump
#   nodes                          one line per node: "K NAMESPACE ADDRESS ALIAS"
#   bed.env                        KEY=VALUE: BED_INDEX, BED_NODES, BED_NET_A,
#                                  BED_NET_B, BED_HEAD, BED_BASTION,
#                                  BED_BASTION_B, BED_BASTION_NS, BED_BRIDGE_A,
#                                  BED_BRIDGE_B, BED_BUILD_DIR
#   bastion.state                  what stop removes ("KIND NAME" lines)
#   hostkeys/, authorized_keys, sshd_config.*, sshd.*.{pid,log}, sshd.pids
set -euo pipefail

cmd=${1:-}; dir=${2:-}
usage="usage: $0 start DIR N [BUILD_DIR] | stop DIR | exec DIR K|bastion CMD [ARGS...]"
[[ -n "$cmd" && -n "$dir" ]] || { echo "$usage" >&2; exit 2; }
dir=$(realpath -m -- "$dir")

# shellcheck source=tests/testbed/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stop() {
  local kind name pid pids
  # sshd first, politely (it removes its pid file as it exits); then every
  # process left in a namespace of ours: sessions, anything a failed test
  # left there. Then the root's ends of the veth pairs (which takes the other
  # ends at once, rather than when the namespace is reclaimed), the
  # namespaces, the bridges, the route.
  tb_kill_pids "$dir/sshd.pids"
  [[ -f "$dir/bastion.state" ]] || return 0
  while read -r kind name; do
    [[ "$kind" == ns ]] || continue
    for _ in 1 2 3 4 5; do
      pids=$(ip netns pids "$name" 2>/dev/null || true)
      [[ -z "$pids" ]] && break
      for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
      sleep 0.05
    done
  done < "$dir/bastion.state"
  for k in veth ns bridge route; do
    while read -r kind name; do
      [[ "$kind" == "$k" ]] || continue
      case "$kind" in
        veth | bridge) ip link del "$name" 2>/dev/null || true ;;
        ns) ip netns del "$name" 2>/dev/null || true ;;
        route) ip route del unreachable "$name" 2>/dev/null || true ;;
      esac
    done < "$dir/bastion.state"
  done
  rm -f "$dir/bastion.state" "$dir/nodes" "$dir/bed.env" "$dir"/sshd.*.pid
}

case "$cmd" in
  stop) stop; exit 0 ;;
  exec)
    k=${3:?K}; shift 3
    [[ $# -gt 0 ]] || { echo "$usage" >&2; exit 2; }
    [[ -f "$dir/nodes" && -f "$dir/bed.env" ]] || { echo "no test bed in $dir" >&2; exit 2; }
    if [[ "$k" == bastion ]]; then
      ns=$(sed -n 's/^BED_BASTION_NS=//p' "$dir/bed.env")
    else
      ns=$(awk -v k="$k" '$1 == k { print $2 }' "$dir/nodes")
    fi
    [[ -n "$ns" ]] || { echo "no host $k in $dir" >&2; exit 2; }
    exec ip netns exec "$ns" "$@" ;;
  start) ;;
  *) echo "$usage" >&2; exit 2 ;;
esac

n=${3:?N}; build=${4:-}
if ! [[ "$n" =~ ^[0-9]+$ ]] || (( n < 1 || n > 200 )); then echo "N must be 1..200" >&2; exit 2; fi
[[ $(id -u) -eq 0 ]] || { echo "bastion.sh needs root (network namespaces)" >&2; exit 3; }
for tool in ip unshare ssh ssh-keygen hostname; do
  command -v "$tool" >/dev/null ||
    { echo "bastion.sh needs $tool (iproute2, util-linux, openssh-client, hostname)" >&2; exit 3; }
done
sshd_bin=$(tb_sshd_bin) || exit 3
if [[ -n "$build" ]]; then
  [[ -d "$build" ]] || { echo "bastion.sh: BUILD_DIR $build is not a folder" >&2; exit 2; }
  build=$(realpath -- "$build")
  # The nodes' sshd reads its config and keys from DIR after BUILD_DIR is
  # hidden: DIR must not be inside it.
  [[ "$build" != / && "$dir/" != "$build/"* ]] ||
    { echo "bastion.sh: DIR $dir must not be inside BUILD_DIR $build" >&2; exit 2; }
fi

mkdir -p "$dir"
stop  # a bed left in DIR by an earlier run
: > "$dir/bastion.state"
# On any failure from here on, take down what was made.
on_exit() { local rc=$?; if [[ $rc -ne 0 ]]; then stop; fi; }
trap on_exit EXIT
fail() { echo "bastion.sh: $*" >&2; exit 1; }

# True when the root namespace routes nothing inside or around the /24 NET
# (other than the default route): its addresses are nobody's.
subnet_free() {
  [[ -z "$(ip -4 route show table all root "$1"; ip -4 route show table all match "$1" |
    grep -v '^default ')" ]]
}

# A free bridge name picks the index (creating it is the lock: two starts at
# once never pick the same), and with it the two subnets.
idx=""
for ((i = 0; i < 250; i++)); do
  ip link add "dlbx${i}a" type bridge 2>/dev/null || continue
  if subnet_free "10.202.$i.0/24" && subnet_free "10.203.$i.0/24"; then idx=$i; break; fi
  ip link del "dlbx${i}a"
done
[[ -n "$idx" ]] || fail "no free bed index: bridges dlbx0a .. dlbx249a exist, or the root" \
  "namespace already routes 10.202.I.0/24 or 10.203.I.0/24 for every I (is this root with" \
  "CAP_NET_ADMIN?)"
p="dlbx$idx"
br_a="${p}a"; br_b="${p}b"
net_a="10.202.$idx"; net_b="10.203.$idx"
head_a="$net_a.1"; bastion_a="$net_a.2"; bastion_b="$net_b.1"
echo "bridge $br_a" >> "$dir/bastion.state"
ip addr add "$head_a/24" dev "$br_a"
ip link set "$br_a" up

ip link add "$br_b" type bridge
echo "bridge $br_b" >> "$dir/bastion.state"
ip link set "$br_b" addrgenmode none  # no IPv6 link-local: the root has no leg on B
ip link set "$br_b" up
ip route add unreachable "$net_b.0/24"
echo "route $net_b.0/24" >> "$dir/bastion.state"

# new_ns NS HOSTNAME: a namespace with lo up and a decoy docker0.
new_ns() {
  ip netns add "$1"
  echo "ns $1" >> "$dir/bastion.state"
  ip -n "$1" link set lo up
  ip -n "$1" link add docker0 type bridge
  ip -n "$1" addr add 172.17.0.1/16 dev docker0
  ip -n "$1" link set docker0 up
}
# leg NS IFNAME ROOT_VETH BRIDGE ADDRESS: a veth from NS's IFNAME to BRIDGE.
leg() {
  ip link add "$3" type veth peer name "$2" netns "$1"
  echo "veth $3" >> "$dir/bastion.state"
  ip link set "$3" addrgenmode none
  ip link set "$3" master "$4" up
  ip -n "$1" addr add "$5/24" dev "$2"
  ip -n "$1" link set "$2" up
}

bns="$p-bastion"
new_ns "$bns"
leg "$bns" eth0 "${p}ba" "$br_a" "$bastion_a"
leg "$bns" eth1 "${p}bb" "$br_b" "$bastion_b"
: > "$dir/nodes"
for ((k = 1; k <= n; k++)); do
  new_ns "$p-gpu-$k"
  leg "$p-gpu-$k" eth0 "${p}n$k" "$br_b" "$net_b.$((10 + k))"
  echo "$k $p-gpu-$k $net_b.$((10 + k)) gpu-$k" >> "$dir/nodes"
done
cat > "$dir/bed.env" <<ENV
BED_INDEX=$idx
BED_NODES=$n
BED_NET_A=$net_a.0/24
BED_NET_B=$net_b.0/24
BED_HEAD=$head_a
BED_BASTION=$bastion_a
BED_BASTION_B=$bastion_b
BED_BASTION_NS=$bns
BED_BRIDGE_A=$br_a
BED_BRIDGE_B=$br_b
BED_BUILD_DIR=$build
ENV

# Keys: the user's under a name OpenSSH does not try by itself, one host key
# per host (kept across restarts in the same DIR).
ssh_dir="$dir/home/.ssh"
mkdir -p "$ssh_dir" "$dir/hostkeys"
chmod 700 "$dir/home/.ssh"
rm -f "$ssh_dir"/id_rsa "$ssh_dir"/id_ecdsa "$ssh_dir"/id_ed25519 "$ssh_dir"/id_*.pub
if [[ ! -f "$ssh_dir/cluster_key" ]]; then
  ssh-keygen -q -t ed25519 -N '' -C bastion-bed -f "$ssh_dir/cluster_key"
fi
cp "$ssh_dir/cluster_key.pub" "$dir/authorized_keys"
chmod 600 "$dir/authorized_keys"
mkdir -p /run/sshd
hosts=(bastion)
for ((k = 1; k <= n; k++)); do hosts+=("gpu-$k"); done
for h in "${hosts[@]}"; do
  [[ -f "$dir/hostkeys/$h" ]] || ssh-keygen -q -t ed25519 -N '' -C "$h" -f "$dir/hostkeys/$h"
done
known="$ssh_dir/cluster_known_hosts"
echo "$bastion_a $(cut -d' ' -f1,2 "$dir/hostkeys/bastion.pub")" > "$known"
while read -r k ns a alias; do
  echo "$a $(cut -d' ' -f1,2 "$dir/hostkeys/$alias.pub")" >> "$known"
done < "$dir/nodes"

# ssh_config FILE HOW: the user's config; HOW is how a node is reached
# through the bastion ("ProxyJump bastion", or a ProxyCommand).
ssh_config() {
  {
    echo "# A cluster behind a bastion (tests/testbed/bastion.sh, bed $idx)."
    echo "Host bastion"
    echo "  HostName $bastion_a"
    while read -r k ns a alias; do
      echo ""
      echo "Host $alias"
      echo "  HostName $a"
      echo "  $2"
    done < "$dir/nodes"
    echo ""
    echo "Host *"
    echo "  User root"
    echo "  IdentityFile $ssh_dir/cluster_key"
    echo "  IdentitiesOnly yes"
    echo "  UserKnownHostsFile $known"
  } > "$1"
}
ssh_config "$dir/ssh_config" "ProxyJump bastion"
rm -f "$ssh_dir/config"  # beds before -F: nothing may read it by accident
ssh_config "$dir/ssh_config.proxycommand" \
  "ProxyCommand ssh -F $dir/ssh_config.proxycommand -W %h:%p bastion"

# sshd, one per host. `ip netns exec` execs unshare, unshare sh, sh sshd: $!
# is sshd's pid, and its command line names DIR (tb_kill_pids).
start_sshd() {  # HOST NS [BUILD_DIR [CACHE_DIR]]
  local conf="$dir/sshd_config.$1"
  TB_HOST_KEY="$dir/hostkeys/$1" tb_sshd_config "$dir" "$conf" 22 "$dir/sshd.$1.pid"
  # Like a fresh host, the bed runs no shell startup file of the user (see
  # netns.sh: root's ~/.bashrc here is slow).
  echo "SetEnv SHLVL=1" >> "$conf"
  # What fails before sshd logs (unshare, mount) goes to its log too.
  # shellcheck disable=SC2016,SC2094  # $1.. expanded by that sh; both append
  ip netns exec "$2" unshare -m -u --propagation private sh -c \
    'hostname "$1" && { [ -z "$2" ] || mount -t tmpfs -o size=1m,mode=755 none "$2"; } &&
     { [ -z "$6" ] || mount -t tmpfs -o size=128m,mode=700 none "$6"; } &&
     exec "$3" -D -f "$4" -E "$5"' \
    sh "$1" "${3:-}" "$sshd_bin" "$conf" "$dir/sshd.$1.log" "${4:-}" \
    </dev/null >/dev/null 2>>"$dir/sshd.$1.log" &
  sshd_pid[$1]=$!
  echo $! >> "$dir/sshd.pids"
}
declare -A sshd_pid
rm -f "$dir"/sshd.*.log
start_sshd bastion "$bns"
# Each node's login user gets a ~/.cache of its own (empty at start, gone at
# stop), as on separate machines: what dlaunch copies there stays per node.
login_home=$(getent passwd "$(id -un)" | cut -d: -f6)
mkdir -p "$login_home/.cache"
while read -r k ns a alias; do start_sshd "$alias" "$ns" "$build" "$login_home/.cache"; done < "$dir/nodes"

# Up when each has written its pid file (after it listens).
for h in "${hosts[@]}"; do
  for ((t = 0; t < 200; t++)); do
    [[ -s "$dir/sshd.$h.pid" ]] && break
    tb_alive "${sshd_pid[$h]}" || break
    sleep 0.05
  done
  if [[ ! -s "$dir/sshd.$h.pid" ]]; then
    how="still starting after 10 s"
    if ! tb_alive "${sshd_pid[$h]}"; then
      rc=0
      wait "${sshd_pid[$h]}" || rc=$?
      how="its process ended with status $rc"
    fi
    fail "the sshd of $h did not come up ($how): $(cat "$dir/sshd.$h.log" 2>/dev/null)"
  fi
done

# Check the bed with OpenSSH itself, as a user would reach it: every alias
# through ProxyJump (answering with its own name, and without the build
# folder), one through the ProxyCommand variant; and that the head has no way
# to the private network but SSH.
ip route get "$net_b.11" >/dev/null 2>&1 && fail "the root namespace routes $net_b.11"
remote="hostname"
[[ -z "$build" ]] || remote+="; ls -A $(printf %q "$build")"
ssh_check() {  # OUT CONFIG ALIAS
  env -u SSH_AUTH_SOCK ssh -F "$2" -o BatchMode=yes -o ConnectTimeout=10 "$3" \
    "$remote" > "$1" 2>&1
}
check_pids=()
while read -r k ns a alias; do
  ssh_check "$dir/check.$alias" "$dir/ssh_config" "$alias" &
  check_pids+=($!)
done < "$dir/nodes"
ssh_check "$dir/check.proxycommand" "$dir/ssh_config.proxycommand" "gpu-$n" &
check_pids+=($!)
bad=""
for pid in "${check_pids[@]}"; do wait "$pid" || bad=1; done
while read -r k ns a alias; do
  [[ "$(cat "$dir/check.$alias")" == "$alias" ]] ||
    fail "ssh -F $dir/ssh_config $alias (ProxyJump through $bastion_a to $a) answered," \
      "expected '$alias' only: $(cat "$dir/check.$alias")"
done < "$dir/nodes"
[[ "$(cat "$dir/check.proxycommand")" == "gpu-$n" ]] ||
  fail "ssh -F $dir/ssh_config.proxycommand gpu-$n (ProxyCommand) answered, expected" \
    "'gpu-$n' only: $(cat "$dir/check.proxycommand")"
[[ -z "$bad" ]] || fail "an ssh check failed"
rm -f "$dir"/check.*
echo "$dir/ssh_config"
