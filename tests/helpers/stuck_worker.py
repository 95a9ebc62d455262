"""A Python rank that hangs where tests/integration/stacks_test.cpp expects:
rank 2 in stuck_in_data_loader, every other rank in wait_for_gradients. With
STUCK_WORKER_TORCH=1 the others wait in a torch.distributed all_reduce (gloo)
for rank 2, which never joins it; else in a plain threading wait. A helper
thread sleeps meanwhile. Prints "ready", then stays quiet."""
import os
import threading
import time

USE_TORCH = os.environ.get("STUCK_WORKER_TORCH") == "1"
if USE_TORCH:
    import torch
    import torch.distributed as dist


def helper():
    while True:
        time.sleep(10)


def stuck_in_data_loader():
    while True:
        time.sleep(0.1)


def wait_for_gradients():
    if USE_TORCH:
        grads = torch.ones(4)
        dist.all_reduce(grads)
    else:
        threading.Event().wait()


def step(rank):
    if rank == 2:
        stuck_in_data_loader()
    else:
        wait_for_gradients()


def main():
    if USE_TORCH:
        dist.init_process_group("gloo")
    threading.Thread(target=helper, daemon=True).start()
    print("ready", flush=True)
    step(int(os.environ.get("RANK", "0")))


main()
