#!/usr/bin/env bash
# The job's store next to a connection flood (issue 15 item 2): the store as
# it is and as it was (no caps on connections still in the challenge, ten
# seconds to answer it, no look at who connects, the common soft descriptor
# limit of 1024), each through the same phases in one run: quiet, one core
# busy, a flood of held connections, a reconnect storm, and the same storm at
# another port (the floor). As root the flood comes from another user
# (nobody), as a hostile user of the machine would. See
# tests/unit/store/store_flood_bench.cpp.
#
#   bench/store-flood.sh [--rounds 300] [--flood 1100] [--build build/release]
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=300; flood=1100; build=build/release
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --flood) flood=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "bench/store-flood.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
bin=$build/bin/store_flood_bench
if [[ ! -x $bin ]]; then
  [[ $build == build/release ]] || { echo "$bin not built" >&2; exit 1; }
  cmake --preset release >/dev/null
  cmake --build build/release --target store_flood_bench >/dev/null
fi
echo "== $(nproc) cores; $(uname -r)"
rc=0
"$bin" --rounds "$rounds" --flood "$flood" || rc=1
# As it was: the soft limit a login shell usually has.
(ulimit -Sn 1024 && "$bin" --rounds "$rounds" --flood "$flood" --before) || true
exit $rc
