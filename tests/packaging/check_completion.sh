#!/usr/bin/env bash
# The bash completion offers dlaunch's options (every one of --help's), the
# values of --transport and other choice options, files after -H/--hostfile,
# and commands for PROGRAM, then stops offering dlaunch's options after it.
#   check_completion.sh DLAUNCH COMPLETION_SCRIPT
set -uo pipefail
dlaunch=$(realpath "$1"); script=$(realpath "$2")
# shellcheck source=/dev/null
source "$script"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
touch "$tmp/hosts.yaml" "$tmp/other.txt"; mkdir "$tmp/sub"
cd "$tmp"

fail=0
complete_line() {  # complete_line WORD... : COMPREPLY for the last word
  COMP_WORDS=("$dlaunch" "$@")
  COMP_CWORD=$#
  COMP_LINE="${COMP_WORDS[*]}"
  COMP_POINT=${#COMP_LINE}
  COMPREPLY=()
  _dlaunch
  printf '%s\n' "${COMPREPLY[@]}" | sort
}
expect() {  # expect DESCRIPTION EXPECTED_LINES -- WORDS...
  local what=$1 want=$2; shift 3
  local got; got=$(complete_line "$@")
  if [[ "$got" != "$want" ]]; then
    echo "FAIL $what: [$*] gave:"; head -n 20 <<< "$got"; echo "wanted:"; echo "$want"; fail=1
  fi
}
contains() {  # contains DESCRIPTION WORD -- WORDS...
  local what=$1 want=$2; shift 3
  complete_line "$@" | grep -qxF -- "$want" || { echo "FAIL $what: [$*] lacks $want"; fail=1; }
}

# Every option of --help is offered after "-".
all=$(complete_line -)
while read -r o; do
  grep -qxF -- "$o" <<< "$all" || { echo "FAIL: option $o not offered"; fail=1; }
done < <("$dlaunch" --help | grep -oE '^ +-[-_[:alnum:]]+(,-[-_[:alnum:]]+)*' | tr ',' '\n' | tr -d ' ')
contains "long options by prefix" --transport -- --tr
expect "transport values" "$(printf 'auto\nflux\nlsf\nsge\nslurm\nssh')" -- --transport ""
expect "transport value prefix" "slurm" -- --transport sl
expect "transport after =" "slurm" -- --transport = sl
expect "hostfile after -H" "$(printf 'hosts.yaml')" -- -H ho
expect "hostfile after --hostfile" "$(printf 'hosts.yaml\nother.txt\nsub')" -- --hostfile ""
expect "directories after --wdir" "sub" -- --wdir ""
contains "PROGRAM is a command" bash -- -n 2 bas
expect "after PROGRAM, not dlaunch's options" "" -- -n 2 ./prog --tr
exit $fail
