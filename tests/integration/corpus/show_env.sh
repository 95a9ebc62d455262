#!/bin/sh
# The corpus's worker (corpus_test.cpp): one line per rank with what the
# launcher set, for the test to compare with what the peer's documentation
# promises. Unset variables show as '-'; the arguments are joined with ','.
line=""
for v in RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK NNODES MASTER_ADDR MASTER_PORT \
         CUDA_VISIBLE_DEVICES OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK \
         OMPI_COMM_WORLD_LOCAL_SIZE OMPI_COMM_WORLD_NODE_RANK OMPI_UNIVERSE_SIZE DLAUNCH_NODE_NAME \
         OMP_NUM_THREADS; do
  eval "val=\${$v:--}"
  line="$line $v=$val"
done
# Variables a command line or an environment file set: OMPI_MCA_*, CORPUS_*, NCCL_*.
for kv in $(env | grep -E '^(OMPI_MCA_|CORPUS_|NCCL_)[A-Za-z0-9_]*=' | sort | tr ' ' '_'); do
  line="$line $kv"
done
args=$(printf '%s,' "$@")
echo "${line# } CWD=$(pwd -P) ARGS=${args%,}"
