#!/bin/sh
# train_check.sh MPIRUN TRAIN: runs TRAIN (examples/train) with its defaults on
# 4 ranks and passes if it exits 0, reports identical parameters, and its
# loss (first "epoch" line, before training, to the last) fell at least 10x.
set -u
out=$("$1" -np 4 --oversubscribe "$2" 2>&1)
rc=$?
printf '%s\n' "$out"
fail() { echo "train_check: FAIL: $*"; exit 1; }
[ "$rc" -eq 0 ] || fail "train exited $rc"
printf '%s\n' "$out" | grep -q 'parameters identical on all 4 ranks' ||
  fail "no 'parameters identical on all 4 ranks' line"
first=$(printf '%s\n' "$out" | awk '$1 == "epoch" && $3 == "loss" { print $4; exit }')
last=$(printf '%s\n' "$out" | awk '$1 == "epoch" && $3 == "loss" { v = $4 } END { print v }')
[ -n "$first" ] && [ -n "$last" ] || fail "no epoch lines"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b > 0 && a / b >= 10) }' ||
  fail "loss fell from $first to $last: less than 10x"
echo "train_check: PASS: loss fell from $first to $last"
