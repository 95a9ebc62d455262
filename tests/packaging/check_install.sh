#!/usr/bin/env bash
# Installs the build into a temporary prefix (cmake --install --prefix), builds
# a small program against it twice (find_package(dlaunch) and pkg-config
# dlaunch-comm), and runs each under the installed dlaunch: 2 ranks, --mpi.
#   check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1; src=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlaunch-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"
for f in bin/dlaunch bin/dlaunch-agent include/comm/process_group.h include/comm/store.h \
         share/man/man1/dlaunch.1 share/bash-completion/completions/dlaunch; do
  [[ -e "$prefix/$f" ]] || { echo "not installed: $f"; cat "$tmp/install.log"; exit 1; }
done
# The Python client, where the system python3 looks under this prefix.
if [[ -x /usr/bin/python3 ]]; then
  py=$(find "$prefix" -path '*/dist-packages/dlaunch/__init__.py')
  [[ -n "$py" ]] || { echo "not installed: the Python client (dist-packages/dlaunch)"; exit 1; }
  PYTHONPATH=$(dirname "$(dirname "$py")") /usr/bin/python3 -c \
    "import dlaunch, sys; assert isinstance(dlaunch.jobs(binary=sys.argv[1]), list)" \
    "$prefix/bin/dlaunch" || { echo "the installed Python client does not work"; exit 1; }
  echo "python client: $py"
fi
pc=$(find "$prefix" -name dlaunch-comm.pc)
cfg=$(find "$prefix" -name dlaunchConfig.cmake)
[[ -n "$pc" && -n "$cfg" ]] || { echo "no dlaunch-comm.pc or dlaunchConfig.cmake"; exit 1; }
grep -q "^prefix=$prefix\$" "$pc" || { echo "dlaunch-comm.pc has the wrong prefix:"; cat "$pc"; exit 1; }

run() {  # run EXE: 2 ranks under the installed dlaunch, check both summed 0+1
  local out
  out=$("$prefix/bin/dlaunch" -n 2 --mpi "$1" 2>&1) || { echo "$out"; return 1; }
  for r in 0 1; do
    grep -q "consumer rank $r/2 (env rank $r) sum 1" <<< "$out" || { echo "rank $r missing:"; echo "$out"; return 1; }
  done
}

# 1. CMake: find_package(dlaunch), target dlaunch::comm.
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# A sanitizer build installs instrumented libraries: the consumer needs the
# same flags to link them (DLAUNCH_CONSUMER_FLAGS, set by the ctest entry).
extra=${DLAUNCH_CONSUMER_FLAGS:-}
cmake -S "$src/tests/packaging/consumer" -B "$tmp/cmake-build" "${gen[@]}" \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_FLAGS="$extra" -DCMAKE_EXE_LINKER_FLAGS="$extra" > "$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/cmake-build" > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
run "$tmp/cmake-build/consumer"
echo "find_package(dlaunch): built and ran on 2 ranks"

# 2. pkg-config dlaunch-comm.
export PKG_CONFIG_PATH=$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
flags=$(pkg-config --cflags --libs dlaunch-comm)
${CXX:-c++} -std=c++20 -O1 $extra -o "$tmp/consumer-pc" "$src/tests/packaging/consumer/consumer.cpp" $flags
run "$tmp/consumer-pc"
echo "pkg-config dlaunch-comm ($flags): built and ran on 2 ranks"
