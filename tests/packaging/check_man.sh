#!/usr/bin/env bash
# The generated man page renders without a single groff warning, and names
# every option that `dlaunch --help` lists.
#   check_man.sh DLAUNCH MAN_PAGE
set -euo pipefail
dlaunch=$1; page=$2
[[ -s "$page" ]] || { echo "no man page at $page"; exit 1; }

# -ww: all warnings; -z: no output. Anything on stderr is a warning.
warnings=$(groff -man -ww -z -Tutf8 "$page" 2>&1 >/dev/null || true)
[[ -z "$warnings" ]] || { echo "groff warnings:"; echo "$warnings"; exit 1; }
if command -v man >/dev/null; then
  # man-db's own check (its preprocessors and line length).
  warnings=$(MANWIDTH=80 man --warnings -E UTF-8 -l "$page" 2>&1 >/dev/null || true)
  [[ -z "$warnings" ]] || { echo "man warnings:"; echo "$warnings"; exit 1; }
fi

# Rendered as plain ASCII (no bold/underline), option names as typed.
text=$(GROFF_NO_SGR=1 groff -man -Tascii -P-cbou "$page")
mapfile -t options < <("$dlaunch" --help | grep -oE '^ +-[-[:alnum:]]+(,-[-[:alnum:]]+)*' | tr ',' '\n' | tr -d ' ')
[[ ${#options[@]} -gt 10 ]] || { echo "could not read options from --help"; exit 1; }
missing=0
for o in "${options[@]}"; do
  grep -qE -- "(^|[^-[:alnum:]])$o([^-[:alnum:]]|\$)" <<< "$text" || { echo "missing from the man page: $o"; missing=1; }
done
# Each option is described once (option headings: 7 spaces, then '-').
dups=$(grep -E '^ {7}-' <<< "$text" | sort | uniq -d)
[[ -z "$dups" ]] || { echo "options listed twice:"; echo "$dups"; missing=1; }
for s in NAME SYNOPSIS DESCRIPTION OPTIONS ENVIRONMENT; do
  grep -q "^$s" <<< "$text" || { echo "no $s section"; missing=1; }
done
exit $missing
