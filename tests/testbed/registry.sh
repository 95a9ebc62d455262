#!/usr/bin/env bash
# A container registry of the tests' own (tests/integration/container_test.cpp):
# Debian's docker-registry (the CNCF distribution registry, what registries
# run), listening on a loopback port the kernel chose, its storage in DIR, so
# that a node's pull of its image is a real pull that never leaves this
# machine. Plain HTTP: the podman bed marks the address insecure in its
# registries.conf, as a site does for its own registry.
#
#   registry.sh start DIR   start it; prints REGISTRY=127.0.0.1:PORT
#   registry.sh stop DIR    stop it and remove DIR (safe to repeat, and after
#                           a failed start)
#
# Exit 3: docker-registry or ss is not installed (the reason on stderr).
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || { echo "usage: $0 start DIR | stop DIR" >&2; exit 2; }

stop() {
  if [[ -f "$dir/pid" ]]; then
    local pid
    pid=$(cat "$dir/pid")
    # Only if it is still the registry this folder started.
    if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$dir/config.yml"; then
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  rm -rf "$dir"
}

start() {
  local need
  for need in docker-registry ss; do
    command -v "$need" >/dev/null || { echo "$need is not installed (scripts/install-deps.sh)" >&2; exit 3; }
  done
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)
  cat >"$dir/config.yml" <<CONF
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $dir/data
http:
  addr: 127.0.0.1:0
CONF
  # Its own session, and none of our descriptors: the caller's pipes close
  # when this script ends.
  setsid docker-registry serve "$dir/config.yml" </dev/null >"$dir/log" 2>&1 &
  local pid=$!
  echo "$pid" >"$dir/pid"
  local port="" i
  for ((i = 0; i < 100; i++)); do
    port=$(ss -Hltnp 2>/dev/null | grep "pid=$pid," | grep -o '127\.0\.0\.1:[0-9]*' | head -1 || true)
    [[ -n "$port" ]] && break
    kill -0 "$pid" 2>/dev/null || { echo "docker-registry ended: $(cat "$dir/log")" >&2; exit 1; }
    sleep 0.1
  done
  [[ -n "$port" ]] || { echo "docker-registry did not listen in 10 s: $(cat "$dir/log")" >&2; exit 1; }
  echo "REGISTRY=$port"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start DIR | stop DIR" >&2; exit 2 ;;
esac
