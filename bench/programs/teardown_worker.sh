#!/bin/sh
# Worker of the teardown benchmark (bench/bench.py): every rank marks itself
# started in DIR; the last rank waits until all WORLD ranks have, then writes
# the time (seconds since the epoch) to DIR/failed and exits 1. The others
# sleep until the launcher stops them (they honour SIGTERM), after writing
# DIR/pid.RANK ("PID STARTTIME").
#   teardown_worker.sh DIR WORLD
dir=$1; world=$2
rank=${RANK:-${OMPI_COMM_WORLD_RANK:-0}}
: > "$dir/started.$rank"
if [ "$rank" -eq $((world - 1)) ]; then
  while [ "$(ls "$dir" | grep -c '^started\.')" -lt "$world" ]; do sleep 0.05; done
  sleep 0.2
  date +%s.%N > "$dir/failed.tmp" && mv "$dir/failed.tmp" "$dir/failed"
  exit 1
fi
# Our pid and start time (they survive the exec): the benchmark finds and ends
# what was left behind by these, never by a name or a pattern, which could hit
# another user's processes.
echo "$$ $(cut -d' ' -f22 /proc/$$/stat)" > "$dir/pid.$rank"
exec sleep 3599
