#!/usr/bin/env bash
# all_reduce bandwidth through comm::ProcessGroup (MPI backend) vs raw
# MPI_Allreduce on MPI_COMM_WORLD, same world size, same program
# (examples/allreduce_bench, --raw for the latter), under mpirun. The two
# modes alternate (comm first on even runs, raw first on odd ones) and each
# size's median over the runs goes in a markdown table with the ratio.
# A second table compares them inside one run (allreduce_bench --compare:
# same processes, timed blocks of the two modes interleaved, --rounds blocks
# each, medians), which is less at the mercy of a shared or oversubscribed
# machine than separate runs.
#
#   bench/allreduce.sh [--np 4] [--runs 6] [--rounds 6] [--min-bytes 1K] [--max-bytes 64M]
#                      [--iters 20] [--build-dir build/release] [--out FILE]
#
# Builds allreduce_bench in --build-dir if needed (configuring the release
# preset there when it does not exist; JOBS=N limits the build's jobs).
# MPIRUN_ARGS adds options to every mpirun. Checks the results of both modes
# once (--check) before timing.
set -euo pipefail
cd "$(dirname "$0")/.."

np=4; runs=6; rounds=6; min=1K; max=64M; iters=20; bdir=build/release; out=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --np) np=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --min-bytes) min=$2; shift 2 ;;
    --max-bytes) max=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --build-dir) bdir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

if [[ ! -f $bdir/build.ninja ]]; then
  if [[ $bdir == build/release ]]; then
    cmake --preset release >/dev/null
  else
    cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
fi
cmake --build "$bdir" -j"${JOBS:-$(nproc)}" --target allreduce_bench >/dev/null
bin=$bdir/bin/allreduce_bench

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
read -r -a extra <<<"${MPIRUN_ARGS:-}"
mpi=(mpirun -np "$np" --oversubscribe "${extra[@]}")
range=(--min-bytes "$min" --max-bytes "$max")
tmp=$(mktemp -d /tmp/dlaunch-allreduce.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# Correctness first, once per mode.
for mode in "" --raw; do
  "${mpi[@]}" "$bin" "${range[@]}" --iters 1 --warmup 0 --check $mode >"$tmp/check" ||
    { cat "$tmp/check" >&2; echo "allreduce_bench --check $mode failed" >&2; exit 1; }
done

for ((r = 0; r < runs; r++)); do
  if ((r % 2 == 0)); then order=(comm raw); else order=(raw comm); fi
  for mode in "${order[@]}"; do
    flag=""; [[ $mode == raw ]] && flag=--raw
    # Data lines: size count type redop time(us) algbw busbw #wrong
    "${mpi[@]}" "$bin" "${range[@]}" --iters "$iters" $flag |
      awk -v run="$r" '!/^#/ && NF >= 7 { print $1, $5, $7, run }' >>"$tmp/$mode"
  done
done

# median of column `col` for each size: "size median"
medians() {
  local file=$1 col=$2
  awk -v c="$col" '{ print $1, $c }' "$file" | sort -k1,1n -k2,2g |
    awk '{ v[$1] = v[$1] " " $2 } END {
      for (s in v) { n = split(v[s], a, " "); m = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2; print s, m }
    }' | sort -k1,1n
}
"${mpi[@]}" "$bin" "${range[@]}" --iters "$iters" --compare --rounds "$rounds" >"$tmp/compare"

medians "$tmp/comm" 3 >"$tmp/comm.bw"; medians "$tmp/raw" 3 >"$tmp/raw.bw"
medians "$tmp/comm" 2 >"$tmp/comm.t"; medians "$tmp/raw" 2 >"$tmp/raw.t"

cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)
os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
ompi=$(mpirun --version 2>/dev/null | head -n1)
cxx=$(c++ --version 2>/dev/null | head -n1)
cores=$(nproc)
{
  echo "## all_reduce: comm vs raw MPI_Allreduce"
  echo
  echo "- machine: ${cpu:-unknown CPU}, $cores cores, $(free -g | awk '/^Mem:/ { print $2 }') GiB; $os, Linux $(uname -r)"
  echo "- $ompi; $cxx; dlaunch $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo '+changes')"
  echo "- mpirun -np $np --oversubscribe${extra[*]:+ ${extra[*]}} ($np ranks on $cores cores), float32 sum in place, $iters iterations per size after 5 warm-up; median of $runs runs per mode, modes alternating"
  echo "- busbw = algbw * 2(n-1)/n; ratio = comm busbw / raw busbw (1.00: comm costs nothing)"
  echo
  echo "| size | comm time (us) | raw time (us) | comm busbw (GB/s) | raw busbw (GB/s) | ratio |"
  echo "|-----:|---------------:|--------------:|------------------:|-----------------:|------:|"
  awk 'FILENAME ~ /comm.bw$/ { cb[$1] = $2; sizes[$1] = 1 }
       FILENAME ~ /raw.bw$/ { rb[$1] = $2 }
       FILENAME ~ /comm.t$/ { ct[$1] = $2 }
       FILENAME ~ /raw.t$/ { rt[$1] = $2 }
       END { for (s in sizes) print s, cb[s], rb[s], ct[s], rt[s] }' \
    "$tmp/comm.bw" "$tmp/raw.bw" "$tmp/comm.t" "$tmp/raw.t" | sort -k1,1n |
    awk 'function human(b) {
           if (b >= 1048576) return sprintf("%d MiB", b / 1048576)
           if (b >= 1024) return sprintf("%d KiB", b / 1024)
           return b " B"
         }
         { printf "| %s | %.1f | %.1f | %.3f | %.3f | %.3f |\n", human($1), $4, $5, $2, $3, ($3 > 0 ? $2 / $3 : 0) }'
  echo
  echo "Same processes, interleaved (allreduce_bench --compare --rounds $rounds: per size, $rounds timed blocks of $iters ops per mode, alternating which goes first; medians):"
  echo
  echo "| size | comm time (us) | raw time (us) | comm busbw (GB/s) | raw busbw (GB/s) | ratio |"
  echo "|-----:|---------------:|--------------:|------------------:|-----------------:|------:|"
  # Data lines: size count type redop comm_time comm_busbw raw_time raw_busbw ratio #wrong
  awk 'function human(b) {
         if (b >= 1048576) return sprintf("%d MiB", b / 1048576)
         if (b >= 1024) return sprintf("%d KiB", b / 1024)
         return b " B"
       }
       !/^#/ && NF >= 9 { printf "| %s | %.1f | %.1f | %.3f | %.3f | %.3f |\n", human($1), $5, $7, $6, $8, $9 }' \
    "$tmp/compare"
} | tee ${out:+"$out"}
