#!/usr/bin/env bash
# Fuzzes every decoder of hostile input (tests/fuzz/) with libFuzzer under
# ASan+UBSan, leak detection on:
#   scripts/fuzz.sh [SECONDS]   build build/fuzz with clang, run each target
#                               for SECONDS (default 60)
#   scripts/fuzz.sh build       only build them
# Each target starts from its committed seeds (tests/fuzz/corpus/<target>,
# never written to) plus a scratch corpus that is emptied on every run. Exits
# non-zero on any crash, leak, timeout, out-of-memory or sanitizer report,
# naming the target and the reproducer; rerun one with
#   build/fuzz/bin/<target> <reproducer>
# Environment: DLAUNCH_FUZZ_BUILD_DIR (default build/fuzz), DLAUNCH_JOBS
# (parallel compile jobs, default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
build_only=0
if [[ "$seconds" == build ]]; then
  build_only=1
elif [[ ! "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS|build]" >&2
  exit 2
fi
build_dir=${DLAUNCH_FUZZ_BUILD_DIR:-build/fuzz}
jobs=${DLAUNCH_JOBS:-$(nproc 2>/dev/null || echo 2)}
targets=(hostfile_fuzz envfile_fuzz ssh_config_fuzz protocol_fuzz store_fuzz)

for tool in clang clang++; do
  if ! command -v "$tool" >/dev/null; then
    echo "fuzz: $tool not found (scripts/install-deps.sh installs it)" >&2
    exit 1
  fi
done

# -O1 -g with asserts on: libFuzzer's recommended build; tests are not needed here.
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DDLAUNCH_FUZZ=ON -DDLAUNCH_WERROR=ON \
  -DDLAUNCH_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" >/dev/null
cmake --build "$build_dir" --target fuzz_targets -j"$jobs"
[[ $build_only == 0 ]] || exit 0

work="$build_dir/fuzz-run"
rm -rf "$work"
mkdir -p "$work"
export ASAN_OPTIONS=detect_leaks=1:symbolize=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
symbolizer=$(command -v llvm-symbolizer || true)
[[ -n "$symbolizer" ]] && export ASAN_SYMBOLIZER_PATH="$symbolizer"

failed=()
printf '%-16s %8s %12s %12s %s\n' target seconds executions corpus result >&2
for t in "${targets[@]}"; do
  seeds="tests/fuzz/corpus/$t"
  scratch="$work/$t/corpus"
  artifacts="$work/$t/artifacts/"
  log="$work/$t/log"
  mkdir -p "$scratch" "$artifacts"
  start=$(date +%s)
  rc=0
  # New inputs land in the first directory only: the committed seeds stay as they are.
  "$build_dir/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -detect_leaks=1 -print_final_stats=1 -artifact_prefix="$artifacts" \
    "$scratch" "$seeds" >"$log" 2>&1 || rc=$?
  took=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 || true)
  # libFuzzer's last status line: "#N DONE cov: C ft: F corp: UNITS/BYTES ..."
  corpus=$(grep -o 'corp: [0-9]*/[0-9a-zA-Z]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  reproducers=$(find "$artifacts" -type f 2>/dev/null)
  # A sanitizer report that did not end the run (it should) counts as well.
  report='^(==[0-9]+==ERROR|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer)|runtime error:'
  if [[ $rc -ne 0 || -n "$reproducers" ]] || grep -qE "$report" "$log"; then
    result="FAILED (exit $rc)"
    failed+=("$t")
  else
    result=ok
  fi
  printf '%-16s %8s %12s %12s %s\n' "$t" "$took" "${execs:-?}" "$corpus" "$result" >&2
  if [[ "$result" != ok ]]; then
    echo "---- $t: last lines of $log" >&2
    tail -n 60 "$log" >&2
    for r in $reproducers; do echo "fuzz: $t: reproducer $r (rerun: $build_dir/bin/$t $r)" >&2; done
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: no findings in ${#targets[@]} targets x ${seconds} s" >&2
