#!/usr/bin/env bash
# A podman of the tests' own (docs/containers.md, tests/integration/
# container_test.cpp): its configuration, storage and state all in DIR, so
# that the tests neither see nor touch the machine's images and containers,
# and an image made here from the static busybox of busybox-static, never
# pulled from anywhere.
#
#   podman.sh start DIR    configure, import the image; prints the variables
#                          to run podman (and dlaunch) with: NAME=VALUE lines
#   podman.sh stop DIR     remove every container of DIR's podman and DIR's
#                          storage (safe to repeat, and after a failed start)
#   podman.sh import DIR ROOT NAME
#                          an image NAME in DIR's podman (started) of the root
#                          file system ROOT (one of tests/testbed/bare-root.sh,
#                          made by mmdebstrap from Debian's packages), with
#                          /etc/dlaunch-image saying NAME; ROOT is not changed
#
# The configuration is what this host needs (docs/testbeds.md): the runc
# runtime (crun refuses the cgroups v1 "hybrid" layout), cgroupfs (no
# systemd), container limits lowered, never raised (no CAP_SYS_RESOURCE).
# The image, localhost/dlaunch-test:latest, holds busybox with its applets
# in /bin, and /etc/dlaunch-image (a file only the image has) saying
# "dlaunch-test-image"; its ENV sets DLAUNCH_IMAGE_VAR=from-image.
# Exit 3: podman, runc or busybox-static is not installed (the reason on stderr).
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || { echo "usage: $0 start DIR | stop DIR" >&2; exit 2; }
image=localhost/dlaunch-test:latest

env_of() {
  echo "CONTAINERS_CONF=$dir/containers.conf"
  echo "CONTAINERS_STORAGE_CONF=$dir/storage.conf"
  echo "CONTAINERS_REGISTRIES_CONF=$dir/registries.conf"
}

stop() {
  [[ -f "$dir/containers.conf" ]] || { rm -rf "$dir"; return 0; }
  # shellcheck disable=SC2046
  export $(env_of)
  podman rm -af -t 0 >/dev/null 2>&1 || true
  # Not `podman system reset`: it would also remove the machine's networks.
  podman rmi -af >/dev/null 2>&1 || true
  rm -rf "$dir"
}

start() {
  local need
  for need in podman runc; do
    command -v "$need" >/dev/null || { echo "$need is not installed (scripts/install-deps.sh)" >&2; exit 3; }
  done
  [[ -x /bin/busybox ]] || { echo "busybox-static is not installed (scripts/install-deps.sh)" >&2; exit 3; }
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  cat >"$dir/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$dir/tmp"
[network]
network_config_dir = "$dir/networks"
CONF
  # vfs: works on any file system under DIR; the image is 2 MB.
  cat >"$dir/storage.conf" <<CONF
[storage]
driver = "vfs"
graphroot = "$dir/graph"
runroot = "$dir/run"
CONF
  # No registry to search for short names: nothing is ever pulled from outside.
  echo 'unqualified-search-registries = []' >"$dir/registries.conf"
  local root=$dir/rootfs
  rm -rf "$root"
  mkdir -p "$root"/{bin,etc,tmp,proc,sys,dev,root}
  chmod 1777 "$root/tmp"
  cp /bin/busybox "$root/bin/busybox"
  local a
  for a in sh id cat ls env echo true false sleep kill printenv pwd test readlink stat grep; do
    ln -s busybox "$root/bin/$a"
  done
  echo dlaunch-test-image >"$root/etc/dlaunch-image"
  echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
  echo 'root:x:0:' >"$root/etc/group"
  tar -C "$root" -cf "$dir/rootfs.tar" .
  # shellcheck disable=SC2046
  export $(env_of)
  podman import -q --change 'ENV PATH=/bin' --change 'ENV DLAUNCH_IMAGE_VAR=from-image' \
    "$dir/rootfs.tar" "$image" >/dev/null
  env_of
}

import_root() {
  local root=${3:-} name=${4:-}
  [[ -d "$root" && -n "$name" ]] || { echo "usage: $0 import DIR ROOT NAME" >&2; exit 2; }
  [[ -f "$dir/containers.conf" ]] || { echo "no podman bed in $dir (podman.sh start)" >&2; exit 2; }
  local extra=$dir/import-extra
  rm -rf "$extra"
  mkdir -p "$extra/etc"
  echo "$name" >"$extra/etc/dlaunch-image"
  # shellcheck disable=SC2046
  export $(env_of)
  # The root as it is, then the marker over it; the bare root's sshd keys and
  # the like come along (nothing in the container runs sshd).
  tar -C "$root" -c --exclude=./.complete --exclude=./.packages . -C "$extra" ./etc/dlaunch-image |
    podman import -q --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' - "$name" >/dev/null
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  import) import_root "$@" ;;
  *) echo "usage: $0 start DIR | stop DIR | import DIR ROOT NAME" >&2; exit 2 ;;
esac
