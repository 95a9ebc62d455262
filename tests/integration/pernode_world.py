#!/usr/bin/env python3
"""One world over MASTER_ADDR:MASTER_PORT, as torch's env:// rendezvous makes it,
without torch: rank 0 listens on MASTER_PORT (SO_REUSEADDR, as TCPStore), every
other rank connects with retry and sends its rank; rank 0 checks that every rank
of WORLD_SIZE came exactly once and sends back the sum of (rank + 1), which every
rank prints. A wrong RANK, WORLD_SIZE, MASTER_ADDR or MASTER_PORT on any node
fails or hangs it.

    pernode_world.py [--fail-rank R [--code C]] [--sleep S]

--fail-rank: rank R exits with C (default 3) after the exchange; --sleep: the
others sleep S seconds after it (a job that is still running).
"""
import os
import socket
import sys
import time

args = sys.argv[1:]
fail_rank = int(args[args.index("--fail-rank") + 1]) if "--fail-rank" in args else -1
code = int(args[args.index("--code") + 1]) if "--code" in args else 3
sleep_s = float(args[args.index("--sleep") + 1]) if "--sleep" in args else 0.0

env = os.environ
rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
addr, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])

if rank == 0:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("", port))
    srv.listen(world)
    seen, total, conns = {0}, 1, []
    for _ in range(world - 1):
        c, _ = srv.accept()
        r = int(c.makefile().readline())
        if r in seen or not 0 <= r < world:
            sys.exit(f"rank 0: rank {r} came twice or is out of range (world {world})")
        seen.add(r)
        total += r + 1
        conns.append(c)
    for c in conns:
        c.sendall(f"{total}\n".encode())
        c.close()
else:
    deadline = time.time() + 60
    while True:
        try:
            c = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    c.sendall(f"{rank}\n".encode())
    total = int(c.makefile().readline())

print(f"rank {rank}/{world} node {env.get('GROUP_RANK')}/{env.get('GROUP_WORLD_SIZE')} "
      f"local {env.get('LOCAL_RANK')}/{env.get('LOCAL_WORLD_SIZE')} "
      f"restart {env.get('TORCHELASTIC_RESTART_COUNT')} sum {total}", flush=True)
if rank == fail_rank:
    print(f"rank {rank}: failing on purpose with {code}", file=sys.stderr, flush=True)
    sys.exit(code)
if sleep_s > 0:
    time.sleep(sleep_s)
