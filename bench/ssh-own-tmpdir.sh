#!/bin/sh
# rsh agent for mpirun on the loopback test bed: all "hosts" share one /tmp,
# where Open MPI's daemons race creating their session directory. Give each
# daemon a TMPDIR of its own, made fresh by mktemp (never a predictable name
# in /tmp that another user could have made first), removed when it ends.
#   usage (by mpirun): ssh-own-tmpdir.sh SSH_CONFIG HOST COMMAND...
cfg=$1; host=$2; shift 2
exec ssh -F "$cfg" "$host" "d=\$(mktemp -d /tmp/ompi-bench-$host.XXXXXX) || exit 1; trap 'rm -rf \"\$d\"' EXIT; TMPDIR=\$d; export TMPDIR; $*"
