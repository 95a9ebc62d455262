#!/usr/bin/env python3
"""Data-parallel training with PyTorch DistributedDataParallel.

Runs unmodified under dlaunch or torchrun: everything comes from the
environment they set (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)
through init_process_group's env:// rendezvous. gloo on CPU, nccl when CUDA
is available (one device per local rank).

Each rank fits a small MLP to its own shard of synthetic regression data; DDP
averages the gradients, so every rank holds the same parameters after every
step. At the end the ranks compare a checksum of their parameters (all_reduce
MIN and MAX) and the job fails unless they are identical and the loss fell.

    dlaunch -H hostfiles/localhost.yaml python3 examples/train.py
    torchrun --nproc-per-node 4 examples/train.py
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=64, help="samples per rank and step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--backend", choices=["gloo", "nccl"], default=None,
                   help="default: nccl when CUDA is available, else gloo")
    p.add_argument("--print-every", type=int, default=20)
    return p.parse_args()


def main():
    args = parse_args()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))

    use_cuda = torch.cuda.is_available() and args.backend != "gloo"
    backend = args.backend or ("nccl" if use_cuda else "gloo")
    if use_cuda:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=backend, init_method="env://")
    assert dist.get_rank() == rank and dist.get_world_size() == world

    # The same target function on every rank; each rank its own samples.
    torch.manual_seed(0)
    features = 16
    w_true = torch.randn(features, 1)
    model = nn.Sequential(nn.Linear(features, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    # Different initial weights per rank: DDP must broadcast rank 0's.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * rank)
    ddp = DDP(model, device_ids=[device.index] if use_cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()
    gen = torch.Generator().manual_seed(1000 + rank)

    def batch():
        x = torch.randn(args.batch, features, generator=gen)
        y = x @ w_true + 0.01 * torch.randn(args.batch, 1, generator=gen)
        return x.to(device), y.to(device)

    def global_loss(value):
        t = torch.tensor([value], dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return t.item() / world

    first = last = None
    for step in range(args.steps):
        x, y = batch()
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        if step == 0:
            first = global_loss(loss.item())
        if rank == 0 and (step % args.print_every == 0 or step == args.steps - 1):
            print(f"step {step:4d}  loss {loss.item():.4f}", flush=True)
    last = global_loss(loss.item())

    # Parameters must be bit-identical on every rank: compare a checksum.
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1).to(torch.float64) for p in model.parameters()])
        check = torch.stack([flat.sum(), (flat * torch.arange(1, flat.numel() + 1, device=device,
                                                                dtype=torch.float64)).sum()])
    lo, hi = check.clone(), check.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    identical = torch.equal(lo, hi)
    converged = last < first

    status = 0
    if rank == 0:
        print(f"loss {first:.4f} -> {last:.4f} over {args.steps} steps on {world} ranks "
              f"({backend}, {device.type})", flush=True)
        if identical:
            print(f"parameters identical on all {world} ranks (checksum {check[0].item():.6f})",
                  flush=True)
        else:
            print(f"parameters DIFFER across ranks: min {lo.tolist()} max {hi.tolist()}",
                  file=sys.stderr, flush=True)
        if not converged:
            print(f"loss did not decrease: {first:.4f} -> {last:.4f}", file=sys.stderr, flush=True)
    if not identical or not converged:
        status = 1
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
