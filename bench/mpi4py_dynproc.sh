#!/usr/bin/env bash
# mpi4py's dynamic-process calls (bench/mpi4py_dynproc.py, one unittest class
# at a time) under mpirun and under dlaunch --mpi, side by side at 2 and 3
# ranks; prints each rank's summary line and the time of each run. Each run
# is bounded (a spawn that fails on one rank can leave the others of its
# communicator waiting: docs/mpi.md). Needs python3-mpi4py
# (scripts/install-deps.sh bench) and a release build.
#   bench/mpi4py_dynproc.sh [CLASS...]   (default: Names ConnectAccept Join Spawn)
set -uo pipefail
cd "$(dirname "$0")/.."
dlaunch=${DLAUNCH:-build/release/bin/dlaunch}
python=/usr/bin/python3
limit=${DLAUNCH_BENCH_LIMIT:-60}
classes=("$@")
[[ ${#classes[@]} -eq 0 ]] && classes=(Names ConnectAccept Join Spawn)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

run() {  # label, command...
  local label=$1 start end rc out
  shift
  start=$(date +%s.%N)
  out=$(timeout "$limit" "$@" 2>&1)
  rc=$?
  end=$(date +%s.%N)
  printf '%-34s exit %-3s %5.1f s\n' "$label" "$rc" "$(echo "$end - $start" | bc)"
  grep -o -E '(rank [0-9]+/[0-9]+: |second publish: ).*' <<<"$out" | sort | sed 's/^/    /'
  [[ $rc -eq 124 ]] && echo "    (killed after ${limit} s)"
}

for np in 2 3; do
  for c in "${classes[@]}"; do
    run "mpirun -np $np $c" mpirun --oversubscribe -np "$np" "$python" bench/mpi4py_dynproc.py "$c"
    run "dlaunch --mpi -n $np $c" "$dlaunch" -H hostfiles/localhost.yaml -n "$np" --mpi \
      "$python" bench/mpi4py_dynproc.py "$c"
  done
done
