#!/usr/bin/env bash
# A root file system of a bare node, for tests/testbed/bare.sh: a minimal
# Debian made by `mmdebstrap --variant=minbase` (no Open MPI, PMIx, hwloc,
# libevent: nothing of dlaunch's libraries), with openssh-server and the
# packages named. Made once and kept in the cache, keyed by release and
# package list, so that CI pays for it once.
#
#   bare-root.sh RELEASE [PACKAGE...]   prints the root's path (made if missing)
#
# Cache: $DLAUNCH_TESTBED_CACHE, default /var/cache/dlaunch-testbed. Exit 4
# (with the reason on stderr) when it cannot be made here: no mmdebstrap, or
# Debian's mirror cannot be reached (no network); 3 without root.
set -euo pipefail

release=${1:?usage: $0 RELEASE [PACKAGE...]}
shift
[[ $(id -u) -eq 0 ]] || { echo "bare-root.sh needs root (mmdebstrap's root mode)" >&2; exit 3; }
command -v mmdebstrap >/dev/null ||
  { echo "no mmdebstrap (apt-get install mmdebstrap; scripts/install-deps.sh)" >&2; exit 4; }

pkgs=$(printf '%s\n' openssh-server "$@" | sort -u | paste -sd, -)
key=$(printf '%s %s' "$release" "$pkgs" | sha256sum | cut -c1-12)
cache=${DLAUNCH_TESTBED_CACHE:-/var/cache/dlaunch-testbed}
root="$cache/$release-$key"
mkdir -p "$cache"
# One maker at a time; the others wait and find it made.
exec 9> "$cache/.lock"
flock 9
if [[ -f "$root/.complete" ]]; then echo "$root"; exit 0; fi

rm -rf "$root.tmp"
mirror=${DLAUNCH_TESTBED_MIRROR:-http://deb.debian.org/debian}
start=$(date +%s)
if ! mmdebstrap --variant=minbase --include="$pkgs" "$release" "$root.tmp" "$mirror" \
    > "$cache/$release-$key.log" 2>&1; then
  rm -rf "$root.tmp"
  echo "cannot make a $release root with mmdebstrap (no network to $mirror?):" \
       "$(tail -n 3 "$cache/$release-$key.log" | tr '\n' ' ')" >&2
  exit 4
fi
printf '%s\n%s\n' "$release" "$pkgs" > "$root.tmp/.packages"
echo "made in $(($(date +%s) - start)) s" >> "$root.tmp/.packages"
touch "$root.tmp/.complete"
mv "$root.tmp" "$root"
echo "$root"
