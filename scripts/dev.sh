#!/usr/bin/env bash
# One entry point for the README's two commands:
#   scripts/dev.sh hello   install what is missing, build, run examples/hello on
#                          hostfiles/localhost.yaml (2 logical nodes x 2 ranks)
#   scripts/dev.sh test    install what is missing, build, run the whole suite:
#                          release build, then again under ASan+UBSan (dev preset),
#                          then the fuzzers (scripts/fuzz.sh) and the agent and
#                          store tests under ThreadSanitizer (tsan preset)
#   scripts/dev.sh build [PRESET]   just configure and build (default: release)
#   scripts/dev.sh fuzz [SECONDS] | tsan   one of those two steps alone
# DLAUNCH_JOBS sets the parallel compile jobs (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${DLAUNCH_JOBS:-$(nproc 2>/dev/null || echo 2)}
export DLAUNCH_JOBS=$jobs  # for scripts/fuzz.sh
# Seconds per fuzz target in `test`: 3 targets, so about 3 minutes of CI.
fuzz_seconds=${DLAUNCH_FUZZ_SECONDS:-60}

build() {
  local preset=$1
  cmake --preset "$preset" >/dev/null
  cmake --build "build/$preset" -j"$jobs"
}

run_tests() {
  local preset=$1
  echo "== tests ($preset) ==" >&2
  # One at a time: the integration tests time teardowns and must not compete
  # for the two cores of a CI machine.
  ctest --test-dir "build/$preset" --output-on-failure --timeout 300
}

# ThreadSanitizer over the agent and store tests (ctest label tsan: unit_tests,
# store_tests, local_job_tests), building only those and what they run. Reports
# go to files, so that one from dlaunch or an agent that a test started is not
# lost in the test's captured output; any report fails the step.
tsan_tests() {
  echo "== tests (tsan: agent and store) ==" >&2
  local start=$SECONDS rc=0
  local reports=$PWD/build/tsan/tsan-reports
  cmake --preset tsan >/dev/null
  cmake --build build/tsan -j"$jobs" --target unit_tests store_tests local_job_tests
  rm -rf "$reports"
  mkdir -p "$reports"
  # Not the 100 MB output test: single-threaded throughput, and ten times
  # slower under TSan, where a worker stalled past flush_ms splits its line.
  TSAN_OPTIONS="suppressions=$PWD/tests/sanitizer/tsan.supp log_path=$reports/tsan second_deadlock_stack=1" \
    ctest --test-dir build/tsan -L tsan -E 'HundredMegabytesOfOutput' --output-on-failure \
    --timeout 300 || rc=$?
  if compgen -G "$reports/tsan*" >/dev/null; then
    echo "tsan: reports in $reports:" >&2
    cat "$reports"/tsan* >&2
    rc=1
  fi
  echo "tsan: $((SECONDS - start)) s (build and tests)" >&2
  return $rc
}

cmd=${1:-}
case "$cmd" in
  hello)
    scripts/install-deps.sh
    build release
    exec build/release/bin/dlaunch -H hostfiles/localhost.yaml build/release/bin/hello
    ;;
  test)
    scripts/install-deps.sh
    build release
    run_tests release
    build dev
    run_tests dev
    scripts/fuzz.sh "$fuzz_seconds"
    tsan_tests
    ;;
  fuzz)
    scripts/install-deps.sh
    scripts/fuzz.sh "${2:-$fuzz_seconds}"
    ;;
  tsan)
    scripts/install-deps.sh
    tsan_tests
    ;;
  build)
    scripts/install-deps.sh
    build "${2:-release}"
    ;;
  *)
    echo "usage: scripts/dev.sh hello|test|build [PRESET]|fuzz [SECONDS]|tsan" >&2
    exit 2
    ;;
esac
