# The corpus's Python worker (corpus_test.cpp): the same line as show_env.sh,
# so that `dlaunch ... train.py` shows what each rank was given.
import os
import sys

NAMES = ("RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK NNODES MASTER_ADDR MASTER_PORT "
         "CUDA_VISIBLE_DEVICES OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE "
         "OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE OMPI_COMM_WORLD_NODE_RANK "
         "OMPI_UNIVERSE_SIZE DLAUNCH_NODE_NAME OMP_NUM_THREADS").split()
words = [f"{n}={os.environ.get(n) or '-'}" for n in NAMES]
for name in sorted(os.environ):
    if name.startswith(("OMPI_MCA_", "CORPUS_", "NCCL_")):
        words.append(f"{name}={os.environ[name].replace(' ', '_')}")
words.append(f"CWD={os.path.realpath(os.getcwd())}")
words.append("ARGS=" + ",".join(sys.argv[1:]))
print(" ".join(words), flush=True)
