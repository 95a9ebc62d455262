#!/usr/bin/env python3
"""A PyTorch worker whose rank FAIL_RANK (argv[1]) raises inside a function
wrapped by torch.distributed.elastic's @record, which writes the error to
TORCHELASTIC_ERROR_FILE as it does under torchrun. The other ranks wait to be
stopped. Used by tests/integration/torch_test.cpp."""
import os
import sys
import time

from torch.distributed.elastic.multiprocessing.errors import record


def load_shard(rank):
    raise RuntimeError(f"rank {rank} could not load shard {rank}.bin")


@record
def main():
    rank = int(os.environ["RANK"])
    print(f"ready {rank}", flush=True)
    if rank == int(sys.argv[1]):
        load_shard(rank)
    time.sleep(60)


if __name__ == "__main__":
    main()
