#!/usr/bin/env bash
# Rootless podman for a user who is not root (docs/containers.md, "Rootless"):
# the container tests run dlaunch as that user, whose podman keeps its
# configuration, images and state in DIR, with the bed's busybox image.
#
#   rootless.sh start DIR   as root: the user (dlaunch-rootless, made if
#                           missing, with subordinate ids for its user
#                           namespace), its podman in DIR, the image
#                           localhost/dlaunch-rootless:test; prints NAME=VALUE
#                           lines: USER, UID, and the variables to run its
#                           podman (and dlaunch) with
#   rootless.sh stop DIR    its containers and images removed, DIR too (the
#                           user stays: a later run takes it again)
#
# What this host needs besides (docs/testbeds.md): newuidmap/newgidmap
# (Debian's uidmap), and /dev/mqueue, which rootless podman bind-mounts for
# --ipc host and this sandbox does not mount (a real machine does): mounted
# here when missing. Exit 3 (the reason on stderr) when something of that
# cannot be had: not root, no podman, runc or uidmap.
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || { echo "usage: $0 start DIR | stop DIR" >&2; exit 2; }
user=dlaunch-rootless
image=localhost/dlaunch-rootless:test

env_of() {
  echo "CONTAINERS_CONF=$dir/containers.conf"
  echo "CONTAINERS_STORAGE_CONF=$dir/storage.conf"
  echo "CONTAINERS_REGISTRIES_CONF=$dir/registries.conf"
  echo "XDG_RUNTIME_DIR=$dir/xdg"
  echo "HOME=$dir/home"
}

as_user() {
  # shellcheck disable=SC2046
  runuser -u "$user" -- env -i PATH=/usr/bin:/bin $(env_of) "$@"
}

stop() {
  if [[ -f "$dir/containers.conf" ]] && id "$user" >/dev/null 2>&1; then
    as_user podman rm -af -t 0 >/dev/null 2>&1 || true
    as_user podman rmi -af >/dev/null 2>&1 || true
  fi
  # Rootless podman keeps a process of its own per user (its user namespace
  # holder) after its last container: nothing of the bed's user may stay.
  # (By its uid: the bed's user is the bed's alone.)
  local uid p
  if uid=$(id -u "$user" 2>/dev/null); then
    for p in /proc/[0-9]*; do
      if [[ "$(stat -c %u "$p" 2>/dev/null)" == "$uid" ]]; then kill -KILL "${p#/proc/}" 2>/dev/null || true; fi
    done
  fi
  rm -rf "$dir"
}

start() {
  [[ $(id -u) -eq 0 ]] || { echo "rootless.sh start needs root (it makes the user)" >&2; exit 3; }
  local need
  for need in podman runc newuidmap newgidmap; do
    command -v "$need" >/dev/null ||
      { echo "$need is not installed (scripts/install-deps.sh: podman runc uidmap)" >&2; exit 3; }
  done
  [[ -x /bin/busybox ]] || { echo "busybox-static is not installed" >&2; exit 3; }
  id "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /bin/sh "$user"
  # 65536 subordinate ids past anything else's.
  local f
  for f in /etc/subuid /etc/subgid; do
    touch "$f"
    grep -q "^$user:" "$f" || echo "$user:300000:65536" >>"$f"
  done
  if [[ ! -d /dev/mqueue ]] || ! mountpoint -q /dev/mqueue; then
    mkdir -p /dev/mqueue
    mount -t mqueue none /dev/mqueue
  fi
  mkdir -p "$dir"/{home,xdg,tmp,graph,run}
  dir=$(cd "$dir" && pwd)
  chmod 755 "$dir"
  cat >"$dir/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$dir/tmp"
CONF
  cat >"$dir/storage.conf" <<CONF
[storage]
driver = "vfs"
graphroot = "$dir/graph"
runroot = "$dir/run"
CONF
  echo 'unqualified-search-registries = []' >"$dir/registries.conf"
  local root=$dir/rootfs
  mkdir -p "$root"/{bin,etc,tmp,proc,sys,dev}
  chmod 1777 "$root/tmp"
  cp /bin/busybox "$root/bin/busybox"
  local a
  for a in sh id cat ls echo true sleep touch test stat; do ln -sf busybox "$root/bin/$a"; done
  echo dlaunch-rootless-image >"$root/etc/dlaunch-image"
  tar -C "$root" -cf "$dir/rootfs.tar" .
  chown -R "$user:" "$dir"
  chmod 700 "$dir/xdg"
  as_user podman import -q --change 'ENV PATH=/bin' "$dir/rootfs.tar" "$image" >/dev/null
  echo "USER=$user"
  echo "UID=$(id -u "$user")"
  env_of
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start DIR | stop DIR" >&2; exit 2 ;;
esac
