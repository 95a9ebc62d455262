#!/bin/sh
# rsh agent for mpirun on the loopback test bed: all "hosts" share one /tmp,
# where Open MPI's daemons race creating their session directory. Give each
# host its own TMPDIR, then run what mpirun asked for.
#   usage (by mpirun): ssh-own-tmpdir.sh SSH_CONFIG HOST COMMAND...
cfg=$1; host=$2; shift 2
exec ssh -F "$cfg" "$host" "d=/tmp/ompi-bench-$host-\$(id -u); mkdir -p \$d && TMPDIR=\$d && export TMPDIR && $*"
