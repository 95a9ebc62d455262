#!/usr/bin/python3
"""Launch at 1000+ SSH nodes on one machine, dlaunch side by side with pdsh in
the same run (bench/ssh-wide.sh sets up the test bed and calls this):

    ssh_wide.py --testbed DIR --nodes 256,1024 --runs N --pdsh-fanout F --out FILE

Every command runs under a soft descriptor limit of 1024 (`ulimit -Sn 1024`,
a stock shell's), the tools taking turns run by run. Per run: wall time, head
CPU (the launcher and every process it waited for: pdsh's ssh clients), the
sshd side's CPU (the bed's sshd listener and what it reaped: every login's
sshd, shell, agent and `true`), the CPU floor = (head CPU + sshd side CPU) / cores
(the time the work takes if it kept every core busy and waited for nothing),
and the CPU others used on the machine meanwhile (busy time of /proc/stat less
ours: a shared machine's noise, which the floor does not include), the CPU
left idle, and the busy floor = (ours + others') / cores: how close the run
came to keeping the whole machine busy. Between runs, and before the sshd
side's CPU is read, every login of the bed has ended and been reaped
(dlaunch's agents stop a moment after dlaunch exits: that time is reported). dlaunch
runs with DLAUNCH_DEBUG=stats: its peak RSS (VmHWM) per node.
"""
import argparse
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import DLAUNCH, cpu_jiffies, first_line, parse_stats  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
SOFT_NOFILE = 1024


def log(msg):
    print(f"ssh-wide: {msg}", file=sys.stderr, flush=True)


def sshd_cpu(pid):
    """CPU seconds of the sshd listener itself (accepting, forking) and of
    its reaped children (every login: its sshd processes, shell, agent,
    rank)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / CLK_TCK  # utime stime cutime cstime


NICE = 0


def sessions_left(pid):
    """Children of the sshd listener: logins not yet ended and reaped."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return len(f.read().split())
    except OSError:
        return 0


def wait_sessions_gone(pid, timeout=120):
    """Seconds until every login has ended and been reaped (the agents of a
    launcher that has exited may still be stopping)."""
    start = time.perf_counter()
    while sessions_left(pid) > 0 and time.perf_counter() - start < timeout:
        time.sleep(0.02)
    time.sleep(0.05)  # the listener's last waitpid
    return time.perf_counter() - start


def soft_limit():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(SOFT_NOFILE, hard), hard))
    if NICE:
        os.nice(NICE)


def busy_jiffies():
    j = cpu_jiffies()
    return sum(j) - j[3] - (j[4] if len(j) > 4 else 0)  # less idle and iowait


def run(cmd, env, timeout=900):
    """Wall, CPU of the process and its waited-for children, exit code, stderr."""
    with tempfile.TemporaryFile() as errf:
        start = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=errf, cwd="/tmp",
                             preexec_fn=soft_limit)
        deadline = start + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid != 0:
                break
            if time.perf_counter() > deadline:
                p.kill()
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.005)
        wall = time.perf_counter() - start
        p.returncode = os.waitstatus_to_exitcode(status)
        errf.seek(0)
        err = errf.read().decode(errors="replace")
    return wall, ru.ru_utime + ru.ru_stime, p.returncode, err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--testbed", required=True)
    ap.add_argument("--nodes", default="256,1024")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pdsh-fanout", type=int, default=256)
    ap.add_argument("--tools", default="dlaunch,dlaunch_c64,dlaunch_c1024,pdsh")
    ap.add_argument("--out", required=True)
    ap.add_argument("--nice", type=int, default=0)
    a = ap.parse_args()
    global NICE
    NICE = a.nice
    tb = a.testbed
    hosts = open(os.path.join(tb, "hosts.list")).read().split()
    sshd_pid = int(open(os.path.join(tb, "sshd.pid")).read())
    cores = os.cpu_count()
    home = os.path.join(tb, "home")
    dl_env = dict(os.environ, HOME=home, SSH_AUTH_SOCK="", DLAUNCH_DEBUG="stats")
    pdsh_env = dict(os.environ, HOME=home, PDSH_SSH_ARGS=f"-F {tb}/ssh_config %h")
    hosts_yaml = os.path.join(tb, "hosts.yaml")

    def tool_cmd(name, n):
        if name == "dlaunch":
            return [DLAUNCH, "-H", hosts_yaml, "--num-nodes", str(n), "--wdir", "/tmp", "true"], dl_env
        if name.startswith("dlaunch_c"):  # a fixed limit: dlaunch_c64, dlaunch_c1024
            return [DLAUNCH, "-H", hosts_yaml, "--num-nodes", str(n), "--wdir", "/tmp",
                    "--ssh-concurrency", name[len("dlaunch_c"):], "true"], dl_env
        if name == "pdsh":
            hl = os.path.join(tb, f"hosts.{n}")
            with open(hl, "w") as f:
                f.writelines(h + "\n" for h in hosts[:n])
            return ["pdsh", "-R", "ssh", "-f", str(a.pdsh_fanout), "-w", "^" + hl, "true"], pdsh_env
        raise ValueError(name)

    tools = a.tools.split(",")
    node_counts = [int(x) for x in a.nodes.split(",")]
    results = {
        "machine": {
            "cpu": first_line(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"]).strip(),
            "cores": cores,
            "dlaunch": first_line([DLAUNCH, "--version"]),
            "git": first_line(["git", "-C", os.path.dirname(DLAUNCH), "rev-parse", "--short", "HEAD"]),
            "pdsh": first_line(["pdsh", "-V"]),
            "openssh": first_line(["ssh", "-V"]),
            "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        },
        "soft_nofile": SOFT_NOFILE, "pdsh_fanout": a.pdsh_fanout, "runs": a.runs, "nice": a.nice,
        "commands": {t: " ".join(shlex.quote(x) for x in tool_cmd(t, 1024)[0]) for t in tools},
        "rows": [],
    }
    for n in node_counts:
        samples = {t: [] for t in tools}
        for r in range(a.runs):
            order = tools[r % len(tools):] + tools[:r % len(tools)]
            for t in order:
                cmd, env = tool_cmd(t, n)
                wait_sessions_gone(sshd_pid)  # nothing of the previous run left
                sshd0, busy0 = sshd_cpu(sshd_pid), busy_jiffies()
                wall, head, code, err = run(cmd, env)
                busy_run = (busy_jiffies() - busy0) / CLK_TCK
                # The sshd side's CPU counts every login to its end: a
                # launcher's agents may still be stopping after it exits.
                linger = wait_sessions_gone(sshd_pid)
                sshd = sshd_cpu(sshd_pid) - sshd0
                busy = (busy_jiffies() - busy0) / CLK_TCK
                s = {"wall_s": wall, "head_cpu_s": head, "sshd_cpu_s": sshd,
                     "floor_s": (head + sshd) / cores, "others_cpu_s": max(0.0, busy - head - sshd),
                     "idle_cpu_s": max(0.0, wall * cores - busy_run), "sessions_end_s": linger,
                     "exit": code}
                # The floor of a machine shared with others: the CPU that was
                # busy during the run, ours and theirs (1.00: never idle).
                s["busy_floor_s"] = busy_run / cores
                if code != 0:
                    # Counted, not fatal: a fixed limit too high for the machine fails this way.
                    s["failed_nodes"] = len({m for m in re.findall(r"on node (\d+) ", err)})
                    s["error"] = next((l for l in err.splitlines() if "dlaunch: job" in l or "error" in l),
                                      err[-300:])[:300]
                    log(f"{n} nodes, {t}: FAILED (exit {code}, {s['failed_nodes']} nodes named): {s['error']}")
                s["ratio"] = wall / s["floor_s"]
                s["busy_ratio"] = wall / s["busy_floor_s"]
                st = parse_stats(err)
                if st:
                    s["maxrss_kib"] = st[-1].get("maxrss_kib")
                    s["connected_s"] = st[-1].get("connected_s")
                samples[t].append(s)
                log(f"{n} nodes, {t}: {wall:.2f} s wall, head {head:.2f} s, sshd side {sshd:.2f} s CPU, "
                    f"floor {s['floor_s']:.2f} s, x{s['ratio']:.2f}, others {s['others_cpu_s']:.1f} s CPU, "
                    f"idle {s['idle_cpu_s']:.1f} s, x{s['busy_ratio']:.2f} of the busy floor, "
                    f"sessions ended {linger:.2f} s after"
                    + (f", peak RSS {s['maxrss_kib'] / 1024:.1f} MiB" if "maxrss_kib" in s else ""))
        row = {"nodes": n}
        for t, ss in samples.items():
            ok = [x for x in ss if x["exit"] == 0]
            med = {k: statistics.median([x[k] for x in ok]) for k in ok[0] if isinstance(ok[0][k], float)} if ok else {}
            med["failed_runs"] = len(ss) - len(ok)
            med["samples"] = ss
            row[t] = med
        results["rows"].append(row)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    # The table, as docs/BENCHMARKS.md shows it: medians of the runs that
    # succeeded; KiB/node = peak RSS / nodes, and the marginal KiB/node
    # between the node counts.
    print(f"| nodes | tool | wall s | head CPU s | sshd side CPU s | floor s | wall / floor "
          f"| vs pdsh | others' CPU s | idle CPU s | wall / busy floor | sessions end s "
          f"| peak RSS MiB | KiB/node | marginal KiB/node | failed runs |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    prev = {}
    for row in results["rows"]:
        n = row["nodes"]
        for t in tools:
            m = row[t]
            if "wall_s" not in m:
                print(f"| {n} | {t} |" + " - |" * 13 + f" {m['failed_runs']} of {a.runs} |")
                continue
            rss = m.get("maxrss_kib")
            vs = f"{m['wall_s'] / row['pdsh']['wall_s']:.2f}" if "wall_s" in row.get("pdsh", {}) else "-"
            marg = "-"
            if rss and t in prev:
                marg = f"{(rss - prev[t][1]) / (n - prev[t][0]):.1f}"
            if rss:
                prev[t] = (n, rss)
            print(f"| {n} | {t} | {m['wall_s']:.2f} | {m['head_cpu_s']:.2f} | {m['sshd_cpu_s']:.2f} | "
                  f"{m['floor_s']:.2f} | {m['ratio']:.2f} | {vs} | {m['others_cpu_s']:.1f} | "
                  f"{m['idle_cpu_s']:.1f} | {m['busy_ratio']:.2f} | {m['sessions_end_s']:.2f} | "
                  + (f"{rss / 1024:.1f} | {rss / n:.1f} | {marg} |" if rss else "- | - | - |")
                  + f" {m['failed_runs']} of {a.runs} |")


if __name__ == "__main__":
    main()
