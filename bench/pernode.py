#!/usr/bin/env python3
"""Per-node mode at scale on one machine (issue 34): N dlaunch launchers, one
rank of `true` each, meeting through a c10d rendezvous, side by side with the
floor: the same N launchers with --standalone (no rendezvous), started the
same way in the same run. Also the CPU the rendezvous host and another
launcher use while the ranks sleep (the watch's cost).

    bench/pernode.py [--sizes 8,32,128] [--runs 3] [--idle 10] [--json FILE]

Prints one table row per size: wall seconds (median) for the world and for
the floor, their ratio, seconds per launcher, and the CPU ticks (1/100 s) per
10 s of the host launcher and of one other launcher while the ranks sleep.
"""
import argparse
import json
import os
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DLAUNCH = os.path.join(ROOT, "build", "release", "bin", "dlaunch")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def launch_all(n, args_for, env, timeout):
    """Starts n launchers at once; returns (wall seconds, exit codes)."""
    start = time.monotonic()
    procs = [subprocess.Popen(args_for(i), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for i in range(n)]
    codes = []
    errs = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=max(1, timeout - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        codes.append(p.returncode)
        errs.append(err.decode(errors="replace"))
    return time.monotonic() - start, codes, errs


def c10d_args(n, port, job, program):
    def args(_i):
        return [DLAUNCH, "--nnodes", str(n), "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", job,
                "--rdzv-conf", "join_timeout=600,last_call_timeout=1",
                "--no-python"] + program
    return args


def standalone_args(program):
    def args(_i):
        return [DLAUNCH, "--standalone", "--nproc-per-node", "1", "--no-python"] + program
    return args


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def idle_cpu(n, env, idle_s):
    """The host's and another launcher's CPU ticks per 10 s while the ranks sleep."""
    port = free_port()
    job = "idle-" + secrets.token_hex(3)
    args = c10d_args(n, port, job, ["sleep", str(idle_s + 30)])
    procs = [subprocess.Popen(args(i), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for i in range(n)]
    try:
        # Everyone is running when every launcher has said its banner; the
        # host says it hosts.
        host = None
        deadline = time.monotonic() + 600
        banners = 0
        for p in procs:
            os.set_blocking(p.stderr.fileno(), False)
        bufs = [b""] * n
        while time.monotonic() < deadline and banners < n:
            time.sleep(0.2)
            banners = 0
            for i, p in enumerate(procs):
                try:
                    chunk = p.stderr.read()
                except (BlockingIOError, TypeError):
                    chunk = None
                if chunk:
                    bufs[i] += chunk
                if b"node " in bufs[i]:
                    banners += 1
                if host is None and b"hosting the rendezvous" in bufs[i]:
                    host = i
        if host is None:
            return None, None
        other = 1 if host == 0 else 0
        time.sleep(2)
        t0 = (ticks(procs[host].pid), ticks(procs[other].pid))
        time.sleep(idle_s)
        t1 = (ticks(procs[host].pid), ticks(procs[other].pid))
        scale = 10.0 / idle_s
        return (t1[0] - t0[0]) * scale, (t1[1] - t0[1]) * scale
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()


def say_failures(what, n, codes, errs):
    """The failed launchers' last dlaunch lines, counted (on stderr)."""
    seen = {}
    for c, e in zip(codes, errs):
        if c == 0:
            continue
        lines = [l for l in e.splitlines() if l.startswith("dlaunch")]
        key = re.sub(r"job \S+", "job ID", lines[-1])[:200] if lines else f"exit {c}, nothing said"
        seen[key] = seen.get(key, 0) + 1
    for key, count in sorted(seen.items(), key=lambda kv: -kv[1]):
        sys.stderr.write(f"{what} {n}: {count} failed: {key}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="8,32,128")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle", type=float, default=10)
    ap.add_argument("--json")
    a = ap.parse_args()
    env = dict(os.environ)
    env["DLAUNCH_RDZV_SECRET"] = secrets.token_hex(16)
    env["DLAUNCH_QUIET"] = "1"
    rows = []
    print("| launchers | world s | floor s | world / floor | world ms per launcher | host ticks/10 s | other ticks/10 s | failed |")
    print("|---|---|---|---|---|---|---|---|")
    for n in [int(x) for x in a.sizes.split(",")]:
        world, floor, failed = [], [], 0
        for _ in range(a.runs):
            t, codes, errs = launch_all(n, standalone_args(["true"]), env, 900)
            floor.append(t)
            failed += sum(c != 0 for c in codes)
            say_failures("floor", n, codes, errs)
            t, codes, errs = launch_all(
                n, c10d_args(n, free_port(), "w-" + secrets.token_hex(3), ["true"]), env, 900)
            world.append(t)
            failed += sum(c != 0 for c in codes)
            say_failures("world", n, codes, errs)
        loud = {k: v for k, v in env.items() if k != "DLAUNCH_QUIET"}  # the banners say who hosts
        host, other = idle_cpu(n, loud, a.idle)
        w, f = statistics.median(world), statistics.median(floor)
        row = {"launchers": n, "world_s": w, "floor_s": f, "ratio": w / f,
               "ms_per_launcher": 1000 * w / n, "host_ticks_per_10s": host,
               "other_ticks_per_10s": other, "failed": failed}
        rows.append(row)
        print(f"| {n} | {w:.2f} | {f:.2f} | {w / f:.2f} | {1000 * w / n:.1f} | "
              f"{host if host is not None else '-'} | {other if other is not None else '-'} | {failed} |",
              flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
