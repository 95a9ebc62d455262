#!/usr/bin/python3
"""What binding buys on this machine (docs/placement.md): two ranks of a
compute kernel (bench/programs/bench_kernel.c), bound to a core each
(`--bind-to core`) against not bound (`--bind-to none`), run after run in
turns, several repetitions, medians and their ratio.

    bench/binding.py [--runs 5] [--out bench/binding.md]

Kernels: `triad` (STREAM's a = b + s*c over 3 x 64 MiB: memory bandwidth)
and `cache` (a dot product over 256 KiB that fits in L2: a rank that moves
loses its cache). A job's time is its slower rank's kernel time. Writes the
Markdown section that bench/report.py puts into docs/BENCHMARKS.md (as it
does bench/ssh-wide.md); under a minute on 2 cores.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "release", "bin")
DLAUNCH = os.path.join(BIN, "dlaunch")
KERNEL = os.path.join(BIN, "bench_kernel")
KERNELS = {"triad": ["triad", "64", "60"], "cache": ["cache", "256", "20000"]}
MODES = ("core", "none")


def log(msg):
    print(f"binding: {msg}", file=sys.stderr, flush=True)


def one_job(kernel, mode):
    cmd = [DLAUNCH, "-n", "2", "--bind-to", mode, "--no-prefix", KERNEL] + KERNELS[kernel]
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    if p.returncode != 0:
        raise SystemExit(f"binding: {' '.join(cmd)} exited {p.returncode}: {p.stderr}")
    ranks = []
    for line in p.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("kernel") == kernel:
            ranks.append(fields)
    if len(ranks) != 2:
        raise SystemExit(f"binding: expected 2 rank lines from {' '.join(cmd)}, got: {p.stdout}")
    return {"wall": wall,
            "seconds": max(float(r["seconds"]) for r in ranks),
            "gbps": sum(float(r["gbps"]) for r in ranks),
            "migrations": sum(int(r["migrations"]) for r in ranks),
            "cpus": max(int(r["cpus"]) for r in ranks),
            "command": " ".join(cmd)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "binding.md"))
    args = ap.parse_args()
    for path in (DLAUNCH, KERNEL):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"binding: {path} missing: cmake --build build/release --target dlaunch "
                             "dlaunch-agent bench_kernel")
    ncpu = len(os.sched_getaffinity(0))
    if ncpu < 2:
        raise SystemExit(f"binding: needs 2 CPUs, this process may use {ncpu}")
    began = time.perf_counter()
    load_before = os.getloadavg()[0]
    samples = {(k, m): [] for k in KERNELS for m in MODES}
    for run in range(args.runs):
        for kernel in KERNELS:
            order = MODES if run % 2 == 0 else tuple(reversed(MODES))  # take turns
            for mode in order:
                samples[(kernel, mode)].append(one_job(kernel, mode))
        log(f"run {run + 1} of {args.runs} done")
    load_after = os.getloadavg()[0]
    med = lambda xs: statistics.median(xs)
    rows = []
    for kernel in KERNELS:
        b, u = samples[(kernel, "core")], samples[(kernel, "none")]
        row = {"kernel": kernel,
               "bound_s": med([x["seconds"] for x in b]), "unbound_s": med([x["seconds"] for x in u]),
               "bound_gbps": med([x["gbps"] for x in b]), "unbound_gbps": med([x["gbps"] for x in u]),
               "bound_mig": sum(x["migrations"] for x in b), "unbound_mig": sum(x["migrations"] for x in u),
               "bound_spread": (min(x["seconds"] for x in b), max(x["seconds"] for x in b)),
               "unbound_spread": (min(x["seconds"] for x in u), max(x["seconds"] for x in u))}
        row["ratio"] = row["bound_s"] / row["unbound_s"]
        rows.append(row)
        log(f"{kernel}: bound {row['bound_s']:.3f} s, unbound {row['unbound_s']:.3f} s, "
            f"ratio {row['ratio']:.3f}, migrations {row['bound_mig']} vs {row['unbound_mig']}")
    took = time.perf_counter() - began
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    w = []
    w.append("## Binding")
    w.append("")
    w.append(f"Measured by `bench/binding.py` on {stamp} ({took:.0f} s, {args.runs} runs per "
             f"configuration, taking turns; {ncpu} CPUs; load average {load_before:.1f} before, "
             f"{load_after:.1f} after). Two ranks of `bench_kernel` "
             "(`bench/programs/bench_kernel.c`), `--bind-to core` against `--bind-to none`. "
             "A job's time is its slower rank's kernel time (median over the runs, min-max in "
             "brackets); GB/s is both ranks together; migrations counts the times a rank's CPU "
             "(`sched_getcpu()`, once per pass) changed, over all runs. A ratio is bound / "
             "unbound: below 1, binding is faster.")
    w.append("")
    w.append("| kernel | bound s | unbound s | ratio | bound GB/s | unbound GB/s | migrations bound / unbound |")
    w.append("|---|---:|---:|---:|---:|---:|---:|")
    what = {"triad": "triad, 3 x 64 MiB (memory bandwidth)", "cache": "dot product, 256 KiB (in L2)"}
    for r in rows:
        w.append(f"| {what[r['kernel']]} | {r['bound_s']:.3f} ({r['bound_spread'][0]:.3f}-"
                 f"{r['bound_spread'][1]:.3f}) | {r['unbound_s']:.3f} ({r['unbound_spread'][0]:.3f}-"
                 f"{r['unbound_spread'][1]:.3f}) | {r['ratio']:.3f} | {r['bound_gbps']:.2f} | "
                 f"{r['unbound_gbps']:.2f} | {r['bound_mig']} / {r['unbound_mig']} |")
    w.append("")
    overlap = all(max(r["bound_spread"][0], r["unbound_spread"][0]) <=
                  min(r["bound_spread"][1], r["unbound_spread"][1]) for r in rows)
    mig = ", ".join(f"{r['bound_mig']} against {r['unbound_mig']}" for r in rows)
    text = f"Binding removes the migrations ({mig} unbound). "
    if overlap:
        text += ("Each ratio lies within the run-to-run spread (the min-max ranges overlap), so "
                 "the difference of the medians is not beyond this machine's noise; a large gain "
                 "is not to be expected on one package, one NUMA node and one L3 shared by both "
                 "cores, where a rank that moves finds its memory, and much of its cache, where "
                 "it was. ")
    else:
        text += "The min-max ranges of at least one kernel do not overlap: see its ratio. "
    if load_before > ncpu / 2 or load_after > ncpu / 2:
        text += (f"The machine was not idle (load average {max(load_before, load_after):.1f} on "
                 f"{ncpu} CPUs: other work shared it), which widens the spread. ")
    text += ("Binding matters where ranks would otherwise share or leave a NUMA node, share "
             "the machine with other work, or must stay near their GPU and NIC; none of that "
             "can be shown on this machine.")
    w.append(text)
    w.append("")
    w.append("```")
    for mode in MODES:
        w.append(samples[("triad", mode)][0]["command"])
    w.append("```")
    with open(args.out, "w") as f:
        f.write("\n".join(w) + "\n")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
