#!/usr/bin/env bash
# Start-up overhead of --container-image (docs/containers.md): the same job,
# 2 logical nodes x 2 ranks of `true` on hostfiles/localhost.yaml, run
# natively and in a podman container per node, alternately, R times each;
# and `podman run --rm` of the same image by hand (one container, one `true`)
# for scale. Wall time of each run (median, min, max). The podman is the
# test bed's (tests/testbed/podman.sh: its own storage in a temp folder, an
# image made from busybox-static): root and podman needed.
#
#   bench/containers.sh [--runs 10] [--build build/release]
set -euo pipefail
cd "$(dirname "$0")/.."

runs=10; build=build/release
while [[ $# -gt 0 ]]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
dlaunch=$build/bin/dlaunch
[[ -x $dlaunch && -x $build/bin/dlaunch-keepalive ]] || { echo "build dlaunch and dlaunch-agent first" >&2; exit 1; }

bed=$(mktemp -d /tmp/dlaunch-podman-bench-XXXXXX)
trap 'tests/testbed/podman.sh stop "$bed"' EXIT
# shellcheck disable=SC2046
export $(tests/testbed/podman.sh start "$bed")
image=localhost/dlaunch-test:latest

# Seconds of wall time of one command, its output discarded; fails the bench if it fails.
seconds() {
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
  end=$(date +%s.%N)
  echo "$end - $start" | bc -l
}

native=() contained=() by_hand=()
for ((i = 0; i < runs; i++)); do
  native+=("$(seconds "$dlaunch" -H hostfiles/localhost.yaml true)")
  contained+=("$(seconds "$dlaunch" -H hostfiles/localhost.yaml --container-image "$image" true)")
  by_hand+=("$(seconds podman run --rm --network host --ipc host --pid host "$image" true)")
done

stats() {
  printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {
    m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2
    printf "%8.3f %8.3f %8.3f", m, v[1], v[NR] }'
}
echo "runs: $runs each, $(nproc) CPUs, podman $(podman version --format '{{.Client.Version}}')"
printf '%-52s %8s %8s %8s\n' "what (wall seconds)" median min max
printf '%-52s %s\n' "dlaunch, 2 nodes x 2 ranks of true, native" "$(stats "${native[@]}")"
printf '%-52s %s\n' "dlaunch, same, --container-image (podman)" "$(stats "${contained[@]}")"
printf '%-52s %s\n' "podman run --rm IMAGE true (one container, by hand)" "$(stats "${by_hand[@]}")"
