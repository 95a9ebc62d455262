#!/usr/bin/env bash
# One entry point for the README's two commands:
#   scripts/dev.sh hello   install what is missing, build, run examples/hello on
#                          hostfiles/localhost.yaml (2 logical nodes x 2 ranks)
#   scripts/dev.sh test    install what is missing, build, run the whole suite:
#                          release build, then again under ASan+UBSan (dev preset)
#   scripts/dev.sh build [PRESET]   just configure and build (default: release)
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc 2>/dev/null || echo 2)

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
    ;;
  build)
    scripts/install-deps.sh
    build "${2:-release}"
    ;;
  *)
    echo "usage: scripts/dev.sh hello|test|build [PRESET]" >&2
    exit 2
    ;;
esac
