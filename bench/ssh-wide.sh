#!/usr/bin/env bash
# Launch at 256 and 1024 SSH nodes on one machine (tests/testbed/wide.sh: one
# sshd answering for 127.1.b.c), dlaunch side by side with pdsh in the same
# run, each under `ulimit -Sn 1024`:
#
#   dlaunch -H hosts.yaml --num-nodes N true                         (defaults)
#   dlaunch -H hosts.yaml --num-nodes N --ssh-concurrency 64 true    (fixed: the
#                                                   default before it adapted)
#   dlaunch -H hosts.yaml --num-nodes N --ssh-concurrency 1024 true
#   pdsh -R ssh -f FANOUT -w ^hosts.N true
#
# Reports wall time, head CPU, the sshd side's CPU, the CPU floor
# ((head + sshd side) / cores) and wall/floor, and dlaunch's peak RSS per node
# (bench/ssh_wide.py has the definitions); then libssh2's own share of that
# memory, measured apart (bench/programs/ssh_session_memory.cpp).
#
#   bench/ssh-wide.sh [--nodes 256,1024] [--runs 3] [--pdsh-fanout 256]
#                     [--tools dlaunch,dlaunch_c64,dlaunch_c1024,pdsh] [--out FILE]
#                     [--nice N]
#
# --nice N runs the bed's sshd and every tool at that nice value (as root, a
# negative one puts them ahead of whatever else runs on a shared machine; the
# others' CPU column says how much that was). Default 0.
#
# About 10 minutes on 2 cores with the defaults (pdsh's 1024 OpenSSH clients
# take most of it); `--nodes 256 --runs 1 --tools dlaunch` is a quick check.
set -euo pipefail
cd "$(dirname "$0")/.."

nodes=256,1024; runs=3; fanout=256; tools=dlaunch,dlaunch_c64,dlaunch_c1024,pdsh
out=build/bench/ssh-wide.json; nice=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --pdsh-fanout) fanout=$2; shift 2 ;;
    --tools) tools=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --nice) nice=$2; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ssh-wide.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh bench
[[ -f build/release/build.ninja || -f build/release/Makefile ]] || cmake --preset release >/dev/null
cmake --build build/release --target dlaunch dlaunch-agent ssh_session_memory >/dev/null

max=$(tr ',' '\n' <<<"$nodes" | sort -n | tail -1)
tb=$(mktemp -d /tmp/dlaunch-wide-tb.XXXXXX)
cleanup() {
  tests/testbed/wide.sh stop "$tb" || true
  rm -rf "$tb"
}
trap cleanup EXIT
nice -n "$nice" tests/testbed/wide.sh start "$tb" "$max" 1 >/dev/null
mkdir -p "$(dirname "$out")"
/usr/bin/python3 bench/ssh_wide.py --testbed "$tb" --nodes "$nodes" --runs "$runs" \
  --pdsh-fanout "$fanout" --tools "$tools" --out "$out" --nice "$nice"
# libssh2's share of the head's memory per node, measured apart (64 connections
# held open as dlaunch holds them; bench/programs/ssh_session_memory.cpp).
echo
echo "libssh2 alone, 64 connections held open (bench/programs/ssh_session_memory.cpp):"
build/release/bin/ssh_session_memory "$tb/hosts.list" "$(cat "$tb/port")" "$(cat "$tb/user")" \
  "$tb/home/.ssh/id_ed25519" "$((max < 64 ? max : 64))" | tee "$out.memory"
# The section of docs/BENCHMARKS.md (bench/report.py includes bench/ssh-wide.md).
/usr/bin/python3 bench/ssh_wide.py report "$out" "$out.memory" bench/ssh-wide.md
echo "ssh-wide.sh: bench/ssh-wide.md written; copy it into docs/BENCHMARKS.md or run bench/run --report-only" >&2
