#!/usr/bin/python3
"""dlaunch's benchmark suite: measures dlaunch side by side with the tools
users would otherwise use (mpirun, pdsh, raw MPI, torch's TCPStore), on this
machine, in the same run. bench/run sets up the test bed and calls

    bench.py measure --testbed DIR --out results.json [--runs N] [--quick]
    bench.py report results.json --markdown docs/BENCHMARKS.md --plot docs/benchmarks.png

`measure` writes every raw sample and the medians to results.json; `report`
turns that file into the Markdown page and the plot, so a report can be
regenerated (or its prose changed) without measuring again.
"""
import argparse
import json
import os
import platform
import re
import shlex
import signal
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "release", "bin")
DLAUNCH = os.path.join(BIN, "dlaunch")
SLOTS = 4
MIB = 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def median(xs):
    return statistics.median(xs) if xs else None


class Run:
    """One finished command: wall seconds, CPU seconds of the process and of
    every descendant it waited for (os.wait4), exit code, stderr text."""

    def __init__(self, wall, cpu, code, err, end):
        self.wall, self.cpu, self.code, self.err, self.end = wall, cpu, code, err, end


def run(cmd, env=None, stdout=subprocess.DEVNULL, timeout=600, cwd="/tmp"):
    with tempfile.TemporaryFile() as errf:
        start = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=errf, cwd=cwd)
        deadline = start + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid != 0:
                break
            if time.perf_counter() > deadline:
                p.kill()
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.002)
        end = time.time()
        wall = time.perf_counter() - start
        p.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
        errf.seek(0)
        err = errf.read().decode(errors="replace")
    return Run(wall, ru.ru_utime + ru.ru_stime, p.returncode, err, end)


class BenchFailure(Exception):
    """A measurement that could not be made: its section is recorded as failed
    (with this text) and the run goes on with the next section."""


def must(r, what):
    if r.code != 0:
        raise BenchFailure(f"{what} failed (exit {r.code}):\n{r.err[-3000:]}")
    return r


def parse_stats(err, prefix="dlaunch: stats:"):
    """key=value pairs of every DLAUNCH_DEBUG=stats line with this prefix."""
    out = []
    for line in err.splitlines():
        if line.startswith(prefix):
            kv = dict(w.split("=", 1) for w in line[len(prefix):].split() if "=" in w)
            out.append({k: (float(v) if re.fullmatch(r"[0-9.]+", v) else v) for k, v in kv.items()})
    return out


def children_cpu(pids):
    """CPU seconds of the waited-for children of these processes (the sshd
    listeners: everything a login ran on the node side ends up there)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[13]) + int(fields[14])) / CLK_TCK  # cutime, cstime
        except OSError:
            pass
    return total


def cpu_jiffies():
    """The machine's CPU time counters (the "cpu" line of /proc/stat)."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def left_behind(d):
    """Processes a teardown run's ranks recorded in d (pid.RANK: "PID STARTTIME")
    that still exist: the same pid with the same start time, so a pid reused
    by someone else's process is never counted, let alone killed."""
    alive = []
    for name in os.listdir(d):
        if not name.startswith("pid."):
            continue
        try:
            pid, start = open(os.path.join(d, name)).read().split()
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[19] == start and fields[0] != "Z":
                alive.append(int(pid))
        except (OSError, ValueError, IndexError):
            pass
    return alive


def first_line(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (r.stdout + r.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "?"


def machine_info():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    pkg = lambda p: subprocess.run(["dpkg-query", "-W", "-f=${Version}", p],
                                   capture_output=True, text=True).stdout or "?"
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD"]).returncode != 0
    return {
        "cpu": cpu, "cores": os.cpu_count(), "mem_gib": round(mem_kib / MIB, 1),
        "kernel": platform.release(),
        "os": first_line(["sh", "-c", ". /etc/os-release && echo \"$PRETTY_NAME\""]),
        "dlaunch": first_line([DLAUNCH, "--version"]) + f" (git {rev}{'+changes' if dirty else ''})",
        "mpirun": first_line(["mpirun", "--version"]),
        "pdsh": first_line(["pdsh", "-V"]),
        "openssh": first_line(["ssh", "-V"]),
        "libssh2": pkg("libssh2-1"),
        "torch": pkg("python3-torch"),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


class Testbed:
    """The loopback sshd test bed bench/run started (tests/testbed/sshd.sh)."""

    def __init__(self, d):
        self.dir = d
        self.hosts = open(os.path.join(d, "hosts.list")).read().split()
        self.sshd_pids = [int(x) for x in open(os.path.join(d, "sshd.pids")).read().split()]
        # dlaunch, like ssh, takes ~ from the passwd entry, not $HOME: both get
        # the bed's config (its key and known_hosts) with -F.
        self.env = dict(os.environ)
        self.ssh_config = os.path.join(d, "ssh_config")
        self.mpi_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        self.pdsh_env = dict(os.environ, PDSH_RCMD_TYPE="ssh", PDSH_SSH_ARGS=f"-F {self.ssh_config} %h")
        # mpirun starts every daemon from the head, as dlaunch and pdsh do; its
        # daemons get a TMPDIR per host (they share one /tmp here).
        agent = f"{ROOT}/bench/ssh-own-tmpdir.sh {self.ssh_config}"
        self.mpi_rsh = ["--mca", "plm_rsh_no_tree_spawn", "1", "--mca", "plm_rsh_agent", agent]

    def hostfile(self, n):
        path = os.path.join(self.dir, f"hf.{n}")
        with open(path, "w") as f:
            f.writelines(f"{h} slots={SLOTS}\n" for h in self.hosts[:n])
        return path

    def dlaunch(self, n, prog, extra=()):
        return [DLAUNCH, "-F", self.ssh_config, "-H", os.path.join(self.dir, "hosts.yaml"), "--num-nodes", str(n),
                "--wdir", "/tmp", *extra, *prog]

    def mpirun(self, n, prog, extra=()):
        return ["mpirun", "--hostfile", self.hostfile(n), "-np", str(n * SLOTS), "--oversubscribe",
                "--bind-to", "none", "--wdir", "/tmp", *self.mpi_rsh, *extra, *prog]

    def pdsh(self, n, prog):
        return ["pdsh", "-f", "256", "-w", ",".join(self.hosts[:n]), *prog]


# ---------------------------------------------------------------------------
# Launch over SSH


# The barrier variant stops at 16 nodes (64 MPI ranks): at 64 nodes the test
# bed runs 64 PMIx servers (one per agent) and 256 MPI ranks on this one
# machine's cores; libpmix then reports connection and shared-memory lock
# errors ("UNREACHABLE", gds_ds21_lock_pthread.c) and ranks take minutes to
# start (measured: all 256 running after 362 s). That measures libpmix under
# 128x oversubscription, not a launcher.
BARRIER_MAX_NODES = 16


def bench_launch(tb, node_counts, runs):
    barrier = os.path.join(BIN, "bench_barrier")
    dl_env = dict(tb.env, DLAUNCH_DEBUG="stats")
    out = {"slots": SLOTS, "rows": []}
    # Check once per size that every launcher really reaches every rank.
    for n in node_counts:
        got = subprocess.run(tb.dlaunch(n, ["echo", "x"], ["--no-prefix"]), env=tb.env,
                             capture_output=True, text=True, cwd="/tmp").stdout.count("x\n")
        got_m = subprocess.run(tb.mpirun(n, ["echo", "x"]), env=tb.mpi_env, capture_output=True,
                               text=True, cwd="/tmp").stdout.count("x\n")
        got_p = subprocess.run(tb.pdsh(n, ["echo", "x"]), env=tb.pdsh_env, capture_output=True,
                               text=True, cwd="/tmp").stdout.count(": x\n")
        if (got, got_m, got_p) != (n * SLOTS, n * SLOTS, n):
            raise BenchFailure(f"launch check at {n} nodes: dlaunch ran {got}, mpirun {got_m} of "
                     f"{n * SLOTS} ranks; pdsh reached {got_p} of {n} hosts")
    # One login with the OpenSSH client: the machine's floor for one node.
    logins = []
    for _ in range(5):
        logins.append(must(run(["ssh", "-F", tb.ssh_config, tb.hosts[0], "true"]), "ssh login").wall)
    out["ssh_login_s"] = median(logins)
    tools = {
        "dlaunch": lambda n: (tb.dlaunch(n, ["true"]), dl_env),
        "mpirun": lambda n: (tb.mpirun(n, ["true"]), tb.mpi_env),
        "pdsh": lambda n: (tb.pdsh(n, ["true"]), tb.pdsh_env),
        # The "hosts" share one machine, where Open MPI's shared-memory
        # transport between ranks it believes on different nodes crashes:
        # TCP for both launchers (a barrier moves a few bytes).
        # Ranks yield while they wait (mpirun turns that on by itself when
        # oversubscribed; under dlaunch MPI cannot know).
        "dlaunch_barrier": lambda n: (tb.dlaunch(n, [barrier], ["--mpi", "-x", "OMPI_MCA_btl=tcp,self", "-x",
                                                                "OMPI_MCA_mpi_yield_when_idle=1"]), dl_env),
        "mpirun_barrier": lambda n: (tb.mpirun(n, [barrier], ["--mca", "btl", "tcp,self", "--mca",
                                                              "mpi_yield_when_idle", "1"]), tb.mpi_env),
    }
    out["commands"] = {k: " ".join(shlex.quote(a) for a in f(16)[0]) for k, f in tools.items()}
    for n in node_counts:
        samples = {k: [] for k in tools}
        node_cpu = {k: [] for k in tools}
        stats = []
        k_runs = runs if n >= 16 else max(runs, 5)
        for r in range(k_runs):
            # MPI jobs of more than 64 ranks do not fit this test bed: see BARRIER_MAX_NODES.
            names = [t for t in tools if n <= BARRIER_MAX_NODES or not t.endswith("_barrier")]
            names = names[r % len(names):] + names[:r % len(names)]  # rotate the order
            for name in names:
                cmd, env = tools[name](n)
                before = children_cpu(tb.sshd_pids)
                res = must(run(cmd, env=env), f"{name} at {n} nodes")
                time.sleep(0.25)  # let the sshd listeners reap the sessions
                node_cpu[name].append((children_cpu(tb.sshd_pids) - before) / n)
                samples[name].append((res.wall, res.cpu / n))
                if name == "dlaunch":
                    stats += parse_stats(res.err)
        row = {"nodes": n, "ranks": n * SLOTS}
        for name, s in samples.items():
            if not s:
                continue
            row[name] = {"wall_s": median([w for w, _ in s]), "head_cpu_per_node_s": median([c for _, c in s]),
                         "node_cpu_per_node_s": median(node_cpu[name]), "walls": [w for w, _ in s]}
        row["dlaunch_maxrss_kib"] = max(s["maxrss_kib"] for s in stats)
        row["dlaunch_connected_s"] = median([s["connected_s"] for s in stats])
        out["rows"].append(row)
        log(f"launch {n} nodes: " + ", ".join(f"{k} {row[k]['wall_s']:.2f} s" for k in tools if k in row))
    return out


# ---------------------------------------------------------------------------
# Controller scale: many logical nodes on the local transport


def bench_scale(node_counts, runs, tmp):
    out = {"rows": []}
    for n in node_counts:
        hf = os.path.join(tmp, f"local{n}.yaml")
        with open(hf, "w") as f:
            f.write("hosts:\n")
            f.writelines(f"  - {{host: localhost, name: n{i}, slots: 1}}\n" for i in range(n))
        walls, stats, agents = [], [], []
        for _ in range(runs):
            res = must(run([DLAUNCH, "-H", hf, "true"], env=dict(os.environ, DLAUNCH_DEBUG="stats")),
                       f"dlaunch at {n} local nodes")
            walls.append(res.wall)
            stats += parse_stats(res.err)
            a = parse_stats(res.err, "dlaunch-agent: stats:")
            if len(a) != n:
                raise BenchFailure(f"{n} local nodes: {len(a)} agents reported, not {n} "
                         "(the rest were killed?)\n" + res.err[-2000:])
            agents += a
        row = {
            "nodes": n, "wall_s": median(walls), "walls": walls,
            "ready_s": median([s["ready_s"] for s in stats]),
            "head_cpu_s": median([s["cpu_user_s"] + s["cpu_sys_s"] for s in stats]),
            "head_maxrss_kib": median([s["maxrss_kib"] for s in stats]),
            "agent_cpu_ms": 1000 * median([a["cpu_user_s"] + a["cpu_sys_s"] for a in agents]),
            "agent_maxrss_kib_median": median([a["maxrss_kib"] for a in agents]),
            "agent_maxrss_kib_max": max(a["maxrss_kib"] for a in agents),
        }
        out["rows"].append(row)
        log(f"scale {n} nodes: {row['wall_s']:.2f} s, head {row['head_maxrss_kib']:.0f} KiB, "
            f"{row['head_cpu_s']:.3f} s CPU")
    base = out["rows"][0]
    for row in out["rows"][1:]:
        row["head_kib_per_node"] = (row["head_maxrss_kib"] - base["head_maxrss_kib"]) / (row["nodes"] - base["nodes"])
    return out


# ---------------------------------------------------------------------------
# Teardown: a rank fails; time until the launcher exits with every node clean


def bench_teardown(tb, n, runs, tmp):
    worker = os.path.join(ROOT, "bench", "programs", "teardown_worker.sh")
    out = {"nodes": n, "ranks": n * SLOTS, "tools": {}}
    world = n * SLOTS
    cmds = {
        "dlaunch": lambda d: (tb.dlaunch(n, [worker, d, str(world)]), tb.env),
        "mpirun": lambda d: (tb.mpirun(n, [worker, d, str(world)]), tb.mpi_env),
    }
    out["commands"] = {k: " ".join(shlex.quote(a) for a in f("DIR")[0]) for k, f in cmds.items()}
    samples = {k: [] for k in cmds}
    left = {k: [] for k in cmds}
    for r in range(runs):
        for name in (list(cmds) if r % 2 == 0 else list(reversed(cmds))):
            d = tempfile.mkdtemp(dir=tmp)
            os.chmod(d, 0o777)
            cmd, env = cmds[name](d)
            res = run(cmd, env=env, timeout=120)
            if res.code == 0:
                raise BenchFailure(f"teardown {name}: the job succeeded although a rank failed")
            try:
                failed_at = float(open(os.path.join(d, "failed")).read())
            except (OSError, ValueError):
                raise BenchFailure(f"teardown {name}: the failing rank left no time stamp\n{res.err[-2000:]}")
            samples[name].append(res.end - failed_at)
            leftovers = left_behind(d)
            left[name].append(len(leftovers))
            for pid in leftovers:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    for name in cmds:
        out["tools"][name] = {"exit_after_failure_s": median(samples[name]), "samples": samples[name],
                              "left_behind_max": max(left[name])}
    log("teardown: " + ", ".join(f"{k} {v['exit_after_failure_s']:.3f} s" for k, v in out["tools"].items()))
    return out


# ---------------------------------------------------------------------------
# Output: 8 ranks x 64 MiB of 100-byte lines


def bench_output(tb, runs, mib, tmp):
    writer = os.path.join(BIN, "bench_writer")
    ranks = 8
    total_mib = ranks * mib
    lines = ranks * (mib * MIB // 100)
    mpi_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    sink = open(os.devnull, "w")

    def direct():
        start = time.perf_counter()
        procs = [subprocess.Popen([writer, str(mib)], stdout=sink, env=dict(os.environ, RANK=str(r)))
                 for r in range(ranks)]
        if any(p.wait() != 0 for p in procs):
            raise BenchFailure("bench_writer failed")
        return time.perf_counter() - start

    two = tb.hosts[:2]
    cases = {
        "dlaunch": ([DLAUNCH, "-n", str(ranks), writer, str(mib)], dict(os.environ, DLAUNCH_DEBUG="stats")),
        # The record's rank logs (--log-size, on by default) cost the head the
        # disk writes: the same without them.
        "dlaunch_nolog": ([DLAUNCH, "-n", str(ranks), "--log-size", "0", writer, str(mib)], os.environ),
        "mpirun": (["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", "--tag-output",
                    writer, str(mib)], mpi_env),
        "dlaunch_ssh": (tb.dlaunch(2, [writer, str(mib)]), tb.env),
        "mpirun_ssh": (tb.mpirun(2, [writer, str(mib)], ["--tag-output"]), tb.mpi_env),
    }
    out = {"ranks": ranks, "mib_per_rank": mib, "line_bytes": 100, "ssh_nodes": 2,
           "commands": {k: " ".join(shlex.quote(a) for a in c[0]) for k, c in cases.items()}}
    # Every line arrives, prefixed, through both launchers.
    for name, (cmd, env) in cases.items():
        small = cmd[:-1] + ["2"]
        r = subprocess.run(small, env=env, capture_output=True, text=True, cwd="/tmp")
        want = ranks * (2 * MIB // 100)
        got = r.stdout.count("\n")
        if got != want or not r.stdout.startswith("["):
            raise BenchFailure(f"output check {name}: {got} lines of {want} ({r.stdout[:80]!r})")
    walls = {k: [] for k in ["direct", *cases]}
    agent_rss, head_rss = [], []
    for r in range(runs):
        walls["direct"].append(direct())
        for name, (cmd, env) in cases.items():
            res = must(run(cmd, env=env, stdout=sink), f"output {name}")
            walls[name].append(res.wall)
            if name == "dlaunch":
                head_rss += [s["maxrss_kib"] for s in parse_stats(res.err)]
                agent_rss += [s["maxrss_kib"] for s in parse_stats(res.err, "dlaunch-agent: stats:")]
    out["mib_s"] = {k: total_mib / median(v) for k, v in walls.items()}
    out["walls"] = walls
    out["lines"] = lines
    out["dlaunch_maxrss_kib"] = max(head_rss)
    out["agent_maxrss_kib"] = max(agent_rss)
    # The machine's limit over SSH: one OpenSSH stream with the cipher and MAC
    # libssh2 negotiates with this sshd (DLAUNCH_DEBUG=ssh names them).
    cipher = out["ssh_cipher"] = ssh_methods(tb)
    ssh_walls = []
    for _ in range(3):
        cmd = ["ssh", "-F", tb.ssh_config, "-c", cipher[0], "-m", cipher[1], two[0],
               f"head -c {total_mib}M /dev/zero"]
        ssh_walls.append(must(run(cmd, stdout=sink), "ssh stream").wall)
    out["mib_s"]["ssh_stream"] = total_mib / median(ssh_walls)
    log("output MiB/s: " + ", ".join(f"{k} {v:.0f}" for k, v in out["mib_s"].items()))
    return out


def ssh_methods(tb):
    r = subprocess.run(tb.dlaunch(1, ["true"]), env=dict(tb.env, DLAUNCH_DEBUG="ssh"),
                       capture_output=True, text=True, cwd="/tmp")
    m = re.search(r"cipher[= ]+([\w@.-]+).*?mac[= ]+([\w@.-]+)", r.stderr)
    return (m.group(1), m.group(2)) if m else ("aes128-ctr", "hmac-sha2-256")


# ---------------------------------------------------------------------------
# Collectives and the store


def bench_collectives(runs, quick):
    bench = os.path.join(BIN, "allreduce_bench")
    max_bytes = "16M" if quick else "64M"
    cmd = [DLAUNCH, "-n", "4", "--mpi", "--no-prefix", bench, "--min-bytes", "1K", "--max-bytes", max_bytes,
           "--iters", "20", "--compare", "--rounds", str(max(runs * 2, 4))]
    check = [DLAUNCH, "-n", "4", "--mpi", "--no-prefix", bench, "--min-bytes", "1K", "--max-bytes", max_bytes,
             "--iters", "1", "--warmup", "0", "--check", "--compare"]
    must(run(check), "allreduce_bench --check")
    r = subprocess.run(cmd, capture_output=True, text=True, cwd="/tmp")
    if r.returncode != 0:
        raise BenchFailure(f"allreduce_bench failed:\n{r.stderr[-2000:]}")
    rows = []
    for line in r.stdout.splitlines():
        f = line.split()
        if line.startswith("#") or len(f) < 9:
            continue
        rows.append({"bytes": int(f[0]), "comm_us": float(f[4]), "comm_busbw": float(f[5]),
                     "raw_us": float(f[6]), "raw_busbw": float(f[7]), "ratio": float(f[8])})
    big = [x["ratio"] for x in rows if x["bytes"] >= MIB]
    out = {"command": " ".join(shlex.quote(a) for a in cmd), "rows": rows,
           "median_ratio_from_1mib": median(big)}
    log(f"all_reduce: median comm/raw busbw ratio from 1 MiB: {out['median_ratio_from_1mib']:.3f}")

    s = subprocess.run([os.path.join(ROOT, "bench", "store.sh"), "--threads", "64",
                        "--ops", "500" if quick else "2000"], capture_output=True, text=True, cwd=ROOT)
    if s.returncode != 0:
        raise BenchFailure(f"store.sh failed:\n{s.stderr[-2000:]}")
    nums = re.findall(r"^(.*?): .*? ([0-9.]+) ops/s$", s.stdout, re.M)
    out["store"] = {"lines": [l for l in s.stdout.splitlines() if "ops/s" in l]}
    for label, ops in nums:
        key = "torch" if label.startswith("torch") else "dlaunch"
        out["store"][key + "_ops_s"] = float(ops)
    log("store: " + "; ".join(out["store"]["lines"]))
    return out


# ---------------------------------------------------------------------------


def measure(args):
    tb = Testbed(args.testbed)
    runs = args.runs
    tmp = tempfile.mkdtemp(prefix="dlaunch-bench-")
    os.chmod(tmp, 0o755)
    results = {"machine": machine_info(), "runs": runs, "quick": args.quick}
    t0 = time.perf_counter()
    cpu0 = cpu_jiffies()
    launch_nodes = [n for n in ([1, 4, 16] if args.quick else [1, 4, 16, 64]) if n <= len(tb.hosts)]
    sections = [
        ("launch", lambda: bench_launch(tb, launch_nodes, runs)),
        ("scale", lambda: bench_scale([1, 64, 256] if args.quick else [1, 64, 256, 1024], runs, tmp)),
        ("teardown", lambda: bench_teardown(tb, min(16, len(tb.hosts)), runs, tmp)),
        ("output", lambda: bench_output(tb, runs, 16 if args.quick else 64, tmp)),
        ("collectives", lambda: bench_collectives(runs, args.quick)),
    ]
    # A section that fails is recorded with its reason (the page says so) and
    # the others are still measured: one broken tool must not cost the run.
    failures = {}
    try:
        for name, measure_section in sections:
            try:
                results[name] = measure_section()
            except (BenchFailure, OSError, subprocess.SubprocessError, KeyError, ValueError,
                    IndexError, ZeroDivisionError, statistics.StatisticsError) as e:
                reason = str(e) if isinstance(e, BenchFailure) else f"{type(e).__name__}: {e}"
                failures[name] = reason
                log(f"{name}: FAILED, going on with the next measurement: {reason}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        results["failures"] = failures
    results["seconds"] = time.perf_counter() - t0
    # A virtual machine's CPU stolen by its host slows every tool alike, but
    # the absolute figures are only comparable between runs with little.
    cpu1 = cpu_jiffies()
    total = sum(cpu1) - sum(cpu0)
    results["cpu_steal_pct"] = 100 * (cpu1[7] - cpu0[7]) / total if total > 0 and len(cpu1) > 7 else None
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    log(f"measured in {results['seconds']:.0f} s -> {args.out}")
    if failures:
        log(f"{len(failures)} measurement(s) failed: {', '.join(failures)} (reasons on the page)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--testbed", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--runs", type=int, default=3)
    m.add_argument("--quick", action="store_true")
    r = sub.add_parser("report")
    r.add_argument("results")
    r.add_argument("--markdown", required=True)
    r.add_argument("--plot", required=True)
    args = ap.parse_args()
    if args.cmd == "measure":
        measure(args)
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import report
        report.write(args.results, args.markdown, args.plot)


if __name__ == "__main__":
    main()
