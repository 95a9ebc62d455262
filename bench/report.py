"""Turns bench.py's results.json into docs/BENCHMARKS.md and its plot.

Every number on the page comes from the results file; the prose around the
tables states what dominates each figure, with the figures it rests on
computed from the same file.
"""
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TOOLS = ("dlaunch", "mpirun", "pdsh")


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def ms(x, digits=1):
    return "-" if x is None else f"{1000 * x:.{digits}f}"


def relpath(path, start):
    return os.path.relpath(path, start)


def panel_launch(a, res):
    rows = res["launch"]["rows"]
    nodes = [r["nodes"] for r in rows]
    style = {"dlaunch": ("tab:blue", "o"), "mpirun": ("tab:red", "s"), "pdsh": ("tab:green", "^")}
    for t in TOOLS:
        c, m = style[t]
        a.plot(nodes, [r[t]["wall_s"] for r in rows], marker=m, color=c, label=f"{t}: true")
    for t in ("dlaunch", "mpirun"):
        c, m = style[t]
        br = [r for r in rows if t + "_barrier" in r]
        a.plot([r["nodes"] for r in br], [r[t + "_barrier"]["wall_s"] for r in br], marker=m, color=c,
               linestyle="--", label=f"{t}: past an MPI barrier")
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel(f"SSH nodes ({res['launch']['slots']} ranks each)")
    a.set_ylabel("seconds to all ranks done")
    a.set_title("Launch over SSH (loopback sshd test bed)")
    a.legend(fontsize=7)
    a.grid(True, which="both", alpha=0.3)


def panel_scale(a, res):
    srows = res["scale"]["rows"]
    sn = [r["nodes"] for r in srows]
    a.plot(sn, [r["ready_s"] for r in srows], marker="o", label="all agents ready (s)")
    a.plot(sn, [r["wall_s"] for r in srows], marker="s", label="whole job (s)")
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel("logical nodes on the local transport")
    a.set_ylabel("seconds")
    a.set_title("Controller scale")
    a2 = a.twinx()
    a2.plot(sn, [r["head_maxrss_kib"] / 1024 for r in srows], marker="^", color="tab:gray",
            label="head peak RSS (MiB, right)")
    a2.set_ylabel("head peak RSS, MiB")
    a2.set_ylim(bottom=0)
    h1, l1 = a.get_legend_handles_labels()
    h2, l2 = a2.get_legend_handles_labels()
    a.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
    a.grid(True, which="both", alpha=0.3)


def panel_output(a, res):
    o = res["output"]["mib_s"]
    labels = ["direct to\n/dev/null", "dlaunch\nlocal", "mpirun\n--tag-output", "dlaunch\n2 SSH nodes",
              "mpirun\n2 ssh nodes", "one OpenSSH\nstream"]
    keys = ["direct", "dlaunch", "mpirun", "dlaunch_ssh", "mpirun_ssh", "ssh_stream"]
    colors = ["tab:gray", "tab:blue", "tab:red", "tab:blue", "tab:red", "tab:gray"]
    a.bar(labels, [o[k] for k in keys], color=colors)
    for i, k in enumerate(keys):
        a.text(i, o[k], f"{o[k]:.0f}", ha="center", va="bottom", fontsize=8)
    a.set_ylabel("MiB/s, all ranks together")
    out = res["output"]
    a.set_title(f"Output: {out['ranks']} ranks x {out['mib_per_rank']} MiB of 100-byte lines")
    a.tick_params(axis="x", labelsize=7)


def panel_teardown(a, res):
    td = res["teardown"]["tools"]
    names = list(td)
    a.bar(names, [td[n]["exit_after_failure_s"] for n in names], color=["tab:blue", "tab:red"])
    for i, n in enumerate(names):
        v = td[n]["exit_after_failure_s"]
        a.text(i, v, f"{v:.3f} s", ha="center", va="bottom", fontsize=8)
    a.axhline(0.5, color="black", linestyle=":", linewidth=1)
    a.text(-0.4, 0.52, "target 0.5 s", fontsize=7)
    a.set_ylabel("seconds from the failure to exit, all clean")
    a.set_title(f"Teardown: one rank fails, {res['teardown']['nodes']} SSH nodes")


def plot(res, path):
    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    fig.suptitle(f"dlaunch vs its peers on {res['machine']['cores']} cores "
                 f"(medians of {res['runs']}+ runs; bench/run)", fontsize=11)
    panels = [(ax[0][0], "launch", panel_launch), (ax[0][1], "scale", panel_scale),
              (ax[1][0], "output", panel_output), (ax[1][1], "teardown", panel_teardown)]
    for a, key, draw in panels:
        if key in res:
            draw(a, res)
        else:
            a.text(0.5, 0.5, f"{key}: not measured in this run\n(the page says why)", ha="center",
                   va="center", transform=a.transAxes)
            a.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def not_measured(w, title):
    w(f"## {title}")
    w("")
    w("Not measured in this run (why: *Measurements that failed in this run*, above).")
    w("")


def summary(res, w):
    """The table against the targets: a row whose section was not measured
    says so instead."""
    w("## Against the targets")
    w("")
    w("| what | target | measured | met |")
    w("|---|---|---|---|")

    def ok(cond):
        return "yes" if cond else "**no**"

    def row_launch_mpirun():
        L = res["launch"]
        n16 = {r["nodes"]: r for r in L["rows"]}.get(16)
        if not n16:
            return None
        ratio = n16["dlaunch"]["wall_s"] / n16["mpirun"]["wall_s"]
        return (f"| launch, 16 SSH nodes x {L['slots']}, wall | <= 0.5x mpirun | {ratio:.2f}x "
                f"({fmt(n16['dlaunch']['wall_s'])} s vs {fmt(n16['mpirun']['wall_s'])} s) | {ok(ratio <= 0.5)} |")

    def row_launch_pdsh():
        L = res["launch"]
        big = L["rows"][-1]
        ratio = big["dlaunch"]["wall_s"] / big["pdsh"]["wall_s"]
        return (f"| launch, {big['nodes']} SSH nodes x {L['slots']}, wall | <= 0.5x pdsh | {ratio:.2f}x "
                f"({fmt(big['dlaunch']['wall_s'])} s vs {fmt(big['pdsh']['wall_s'])} s) | {ok(ratio <= 0.5)} |")

    def row_head_cpu():
        big = res["launch"]["rows"][-1]
        ratio = big["dlaunch"]["head_cpu_per_node_s"] / big["pdsh"]["head_cpu_per_node_s"]
        return (f"| head CPU per SSH node, {big['nodes']} nodes | <= 0.2x pdsh's ssh clients | {ratio:.3f}x "
                f"({ms(big['dlaunch']['head_cpu_per_node_s'])} ms vs {ms(big['pdsh']['head_cpu_per_node_s'])} ms) "
                f"| {ok(ratio <= 0.2)} |")

    def row_head_memory():
        srows = res["scale"]["rows"]
        kib = srows[-1].get("head_kib_per_node")
        return (f"| head memory per logical node, {srows[-1]['nodes']} nodes | < 64 KiB | {fmt(kib, 1)} KiB "
                f"| {ok(kib is not None and kib < 64)} |")

    def row_growth():
        per_node = [(r["nodes"], r["ready_s"] / r["nodes"]) for r in res["scale"]["rows"] if r["nodes"] >= 64]
        if len(per_node) < 2:
            return None
        growth = per_node[-1][1] / per_node[0][1]
        return (f"| start-up time per node, {per_node[-1][0]} vs {per_node[0][0]} nodes | no faster than linear "
                f"(ratio <= ~1) | {growth:.2f} ({ms(per_node[0][1], 2)} -> {ms(per_node[-1][1], 2)} ms per node) "
                f"| {ok(growth <= 1.3)} |")

    def row_teardown():
        T = res["teardown"]
        td = T["tools"]
        d = td["dlaunch"]
        return (f"| teardown after a rank fails, {T['nodes']} SSH nodes | < 0.5 s, all clean | "
                f"{fmt(d['exit_after_failure_s'], 3)} s, {d['left_behind_max']} left "
                f"(mpirun {fmt(td['mpirun']['exit_after_failure_s'], 3)} s) "
                f"| {ok(d['exit_after_failure_s'] < 0.5 and d['left_behind_max'] == 0)} |")

    def row_output():
        O = res["output"]
        ratio = O["mib_s"]["dlaunch"] / O["mib_s"]["mpirun"]
        return (f"| output, {O['ranks']} ranks x {O['mib_per_rank']} MiB of 100-byte lines | >= 2x mpirun "
                f"--tag-output | {ratio:.1f}x ({O['mib_s']['dlaunch']:.0f} vs {O['mib_s']['mpirun']:.0f} MiB/s) "
                f"| {ok(ratio >= 2)} |")

    def row_agent_rss():
        rss = max(res["output"]["agent_maxrss_kib"], max(r["agent_maxrss_kib_max"] for r in res["scale"]["rows"]))
        return (f"| dlaunch-agent peak RSS (output flood, and idle at scale) | < 10 MiB | {rss / 1024:.1f} MiB "
                f"| {ok(rss < 10 * 1024)} |")

    def row_head_rss():
        big = res["launch"]["rows"][-1]
        return f"| dlaunch peak RSS, {big['nodes']} SSH nodes | (reported) | {big['dlaunch_maxrss_kib'] / 1024:.1f} MiB | |"

    def row_allreduce():
        C = res["collectives"]
        return (f"| comm all_reduce vs raw MPI_Allreduce, busbw from 1 MiB | (reported) | median ratio "
                f"{fmt(C['median_ratio_from_1mib'], 3)} | |")

    def row_store():
        st = res["collectives"]["store"]
        if "torch_ops_s" not in st:
            return None
        return (f"| store set+get, 64 clients | (reported) | {st['dlaunch_ops_s']:,.0f} ops/s, "
                f"{st['dlaunch_ops_s'] / st['torch_ops_s']:.2f}x torch TCPStore | |")

    rows = [("launch vs mpirun", row_launch_mpirun), ("launch vs pdsh", row_launch_pdsh),
            ("head CPU per node", row_head_cpu), ("head memory per node", row_head_memory),
            ("start-up growth", row_growth), ("teardown", row_teardown), ("output", row_output),
            ("agent peak RSS", row_agent_rss), ("head peak RSS", row_head_rss),
            ("all_reduce", row_allreduce), ("store", row_store)]
    for what, make in rows:
        try:
            line = make()
        except (KeyError, IndexError, TypeError, ZeroDivisionError):
            line = f"| {what} | | not measured in this run | **no** |"
        if line:
            w(line)
    w("")


def write(results_path, md_path, png_path):
    with open(results_path) as f:
        res = json.load(f)
    plot(res, png_path)
    m = res["machine"]
    failures = res.get("failures", {})
    md = []
    w = md.append

    w("# Benchmarks")
    w("")
    w("<!-- Generated by bench/run (bench/bench.py, bench/report.py): edit those, not this page. -->")
    w("")
    w(f"Every figure here was measured by `bench/run` on {m['date']}, side by side with the peer on "
      f"the same machine in the same run ({res['seconds'] / 60:.1f} minutes in all). Each number is "
      f"the median of {res['runs']} runs (launch at 1 and 4 nodes: 5), the tools taking turns run by "
      "run. A ratio is dlaunch's figure divided by the peer's: below 1 is better for times, above 1 "
      "for throughput. Regenerate with `bench/run` (about 10 minutes on 2 cores; `--quick`: 3)."
      + (f" CPU stolen by the virtual machine's host during the run: {res['cpu_steal_pct']:.0f}% (it slows "
         "every tool alike; compare absolute figures only between runs with little)."
         if res.get("cpu_steal_pct") is not None else ""))
    w("")
    w(f"Machine: {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB, {m['os']}, Linux {m['kernel']}. "
      f"{m['dlaunch']}; {m['mpirun']}; {m['pdsh']}; {m['openssh']}; libssh2 {m['libssh2']}; "
      f"python3-torch {m['torch']}.")
    w("")
    w(f"![launch, controller scale, output and teardown]({relpath(png_path, os.path.dirname(md_path))})")
    w("")

    if failures:
        w("## Measurements that failed in this run")
        w("")
        w("Each was skipped with the reason below; the other sections were measured as usual.")
        w("")
        for name, reason in failures.items():
            w(f"- **{name}**:")
            w("")
            w("  ```")
            for line in reason.rstrip().splitlines()[-15:]:
                w(f"  {line}")
            w("  ```")
        w("")

    summary(res, w)

    # ---- launch
    if "launch" in res:
        L = res["launch"]
        rows = L["rows"]
        big = rows[-1]
        w("## Launch over SSH")
        w("")
        w("Time from the command's start to every rank having run `true` (pdsh: every host, once, as its "
          "users run it), and to every rank having passed an MPI barrier (`bench_barrier`: "
          "`comm::ProcessGroup::create(kMpi)` and `barrier()`, the same binary under both launchers). "
          "Test bed: `tests/testbed/sshd.sh`, one address 127.0.0.2, 127.0.0.3, ... per node, our own "
          "sshd processes; the login user has /bin/sh as login shell. mpirun starts every daemon from the "
          "head (`plm_rsh_no_tree_spawn`), as dlaunch and pdsh do, through `bench/ssh-own-tmpdir.sh` (a "
          "TMPDIR per host: on one machine its daemons otherwise race for one session directory). The "
          "barrier runs over TCP for both launchers (`btl tcp,self`): Open MPI's shared-memory transport "
          "crashes between ranks it believes on different hosts of one machine.")
        w("")
        w("| nodes | ranks | dlaunch s | mpirun s | pdsh s | dlaunch/mpirun | dlaunch/pdsh | "
          "dlaunch barrier s | mpirun barrier s | barrier ratio |")
        w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            d, mm, p = r["dlaunch"]["wall_s"], r["mpirun"]["wall_s"], r["pdsh"]["wall_s"]
            if "dlaunch_barrier" in r:
                db, mb = r["dlaunch_barrier"]["wall_s"], r["mpirun_barrier"]["wall_s"]
                barrier = f"{db:.2f} | {mb:.2f} | {db / mb:.2f}"
            else:
                barrier = "- | - | -"
            w(f"| {r['nodes']} | {r['ranks']} | {d:.2f} | {mm:.2f} | {p:.2f} | {d / mm:.2f} | {d / p:.2f} | "
              f"{barrier} |")
        w("")
        if any("dlaunch_barrier" not in r for r in rows):
            w("The barrier variant stops at 16 nodes: at 64, the test bed runs 64 PMIx servers (one per "
              "agent) and 256 MPI ranks on this machine's 2 cores, and libpmix reports connection and "
              "shared-memory lock errors (`UNREACHABLE`, `gds_ds21_lock_pthread.c`), with all ranks running "
              "only after 362 s in a run by hand. That measures libpmix under 128x oversubscription, not a "
              "launcher; a cluster has one PMIx server per machine. (Found on the way: after those errors "
              "`PMIx_server_finalize` can block for good on a lock inside libpmix; dlaunch-agent now "
              "finalizes on a helper thread with a 5 s deadline and exits regardless, and an agent that "
              "has lost its head ends whatever still counts as running after the grace period.)")
            w("")
        w("CPU per node, `true` runs. Head: the launcher's own process and every process it waited for "
          "(mpirun's and pdsh's `ssh` clients; dlaunch starts none, it speaks SSH itself with libssh2 on "
          "its event loop). Node side: everything the logins ran on the node (sshd, the login shell, the "
          "agent or orted, the ranks), read from the sshd listeners' reaped-children CPU.")
        w("")
        w("| nodes | head ms/node: dlaunch | mpirun | pdsh | node side ms/node: dlaunch | mpirun | pdsh | "
          "dlaunch peak RSS MiB |")
        w("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            w(f"| {r['nodes']} | " + " | ".join(ms(r[t]["head_cpu_per_node_s"]) for t in TOOLS) + " | "
              + " | ".join(ms(r[t]["node_cpu_per_node_s"]) for t in TOOLS)
              + f" | {r['dlaunch_maxrss_kib'] / 1024:.1f} |")
        w("")
        login = L["ssh_login_s"]
        node_cpu = big["dlaunch"]["node_cpu_per_node_s"]
        floor = max(login, big["nodes"] * node_cpu / m["cores"])
        w("What dominates:")
        w("")
        w(f"- **The machine's floor.** One login with the OpenSSH client (`ssh host true`, handshake, "
          f"key exchange, authentication, a session, the shell) takes {ms(login, 0)} ms here. "
          f"At {big['nodes']} nodes the node side of a dlaunch launch costs {ms(node_cpu, 1)} ms of CPU per "
          f"node (sshd's key exchange and the session, the login shell, the agent), {big['nodes']} x that "
          f"on {m['cores']} cores is {floor:.2f} s: dlaunch's {fmt(big['dlaunch']['wall_s'])} s is "
          f"{big['dlaunch']['wall_s'] / floor:.1f}x that floor. On a real cluster each node's share runs "
          "on its own CPUs, so the launch is the head's work plus one login, not the sum of all logins.")
        w(f"- **dlaunch's own cost** is {ms(big['dlaunch']['head_cpu_per_node_s'])} ms of head CPU per "
          f"node (key exchange, authentication and the control channel of each connection, on one event "
          f"loop), against {ms(big['pdsh']['head_cpu_per_node_s'])} ms for each OpenSSH client pdsh "
          f"starts and {ms(big['mpirun']['head_cpu_per_node_s'])} ms per node for mpirun's. A process per "
          "node (fork, exec, dynamic linking, reading the config and keys, its own handshake) is what the "
          "peers pay; dlaunch's connections share one process and their key exchanges run interleaved.")
        w("- **mpirun** waits for each `orted` to call back over TCP and wire up before it starts the "
          "ranks, and starts them in a second round trip; pdsh only runs the command.")
        w(f"- **Past the barrier** the ranks' own `MPI_Init` dominates: on {m['cores']} cores all ranks' "
          "initialisations queue for the CPU, for both launchers alike; mpirun adds its "
          "orted wire-up and a modex through its daemon tree, dlaunch a fence through its agents and the "
          "head (one frame per node each way).")
        w("")
    else:
        not_measured(w, "Launch over SSH")

    # ---- controller scale
    if "scale" in res:
        srows = res["scale"]["rows"]
        w("## Controller scale (local transport)")
        w("")
        w("Logical nodes on this machine (`{host: localhost, name: nI, slots: 1}` x N): one agent process "
          "per node, each starting one rank of `true`. `DLAUNCH_DEBUG=stats` makes dlaunch print its own "
          "start-up milestones, CPU time and peak RSS (VmHWM) at exit, and each agent its own.")
        w("")
        w("| nodes | all agents ready s | job s | per node ms | head CPU s | head CPU ms/node | head peak RSS MiB "
          "| head KiB/node | agent CPU ms | agent peak RSS MiB (median / max) |")
        w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in srows:
            kib = r.get("head_kib_per_node")
            w(f"| {r['nodes']} | {r['ready_s']:.3f} | {r['wall_s']:.3f} | {1000 * r['wall_s'] / r['nodes']:.2f} | "
              f"{r['head_cpu_s']:.3f} | {1000 * r['head_cpu_s'] / r['nodes']:.2f} | {r['head_maxrss_kib'] / 1024:.1f} | "
              f"{fmt(kib, 1)} | {r['agent_cpu_ms']:.1f} | {r['agent_maxrss_kib_median'] / 1024:.1f} / "
              f"{r['agent_maxrss_kib_max'] / 1024:.1f} |")
        w("")
        last = srows[-1]
        w(f"What dominates: starting the agents. Each costs {last['agent_cpu_ms']:.1f} ms of CPU (exec, "
          "dynamic linking of libpmix, libcrypto and libstdc++, the set-up, its rank's fork and exec); "
          f"{last['nodes']} of them on {m['cores']} cores are {last['nodes'] * last['agent_cpu_ms'] / 1000 / m['cores']:.1f} s "
          f"of the {last['wall_s']:.2f} s. The head spends {1000 * last['head_cpu_s'] / last['nodes']:.2f} ms "
          "per node (fork and exec of the agent, its pipes, the set-up message) and holds a few KiB per node "
          "(node and rank state, the channel's queue when idle is empty; one 64 KiB read buffer is shared "
          "by all channels).")
        w("")
    else:
        not_measured(w, "Controller scale (local transport)")

    # ---- teardown
    if "teardown" in res:
        T = res["teardown"]
        td = T["tools"]
        w("## Teardown")
        w("")
        w(f"{T['ranks']} ranks on {T['nodes']} SSH nodes (`bench/programs/teardown_worker.sh`): every rank "
          "marks itself started; when all have, the last rank writes the time and exits 1; the others sleep "
          "until stopped (they honour SIGTERM). Measured: from that time stamp to the launcher's exit; then "
          "the test bed is searched for any rank left.")
        w("")
        w("| launcher | exit after the failure s (median) | runs | processes left (max) |")
        w("|---|---:|---|---:|")
        for n, v in td.items():
            w(f"| {n} | {v['exit_after_failure_s']:.3f} | {', '.join(f'{x:.3f}' for x in v['samples'])} | "
              f"{v['left_behind_max']} |")
        w("")
        w("What dominates for dlaunch: the exit report's trip (agent -> head over SSH), the Abort to every "
          "agent, each agent's SIGTERM to its ranks' process groups and their exit reports back: two "
          "round trips over the control channels and the ranks' own exit. mpirun's figure is its own "
          "error handling (it reports the failed rank, then orders the daemons to kill the rest).")
        w("")
    else:
        not_measured(w, "Teardown")

    # ---- output
    if "output" in res:
        O = res["output"]
        mib = O["mib_s"]
        w("## Output throughput")
        w("")
        w(f"{O['ranks']} ranks, each writing {O['mib_per_rank']} MiB of 100-byte lines "
          f"(`bench_writer`, 64 KiB writes; {O['lines']:,} lines in all), stdout to /dev/null. Every line "
          "was checked to arrive, prefixed, once per launcher. Aggregate MiB/s:")
        w("")
        w("| path | MiB/s | vs mpirun |")
        w("|---|---:|---:|")
        w(f"| the writers straight to /dev/null (no launcher) | {mib['direct']:.0f} | |")
        w(f"| dlaunch, one local node, `[rank]` prefixes | {mib['dlaunch']:.0f} | {mib['dlaunch'] / mib['mpirun']:.1f}x |")
        if "dlaunch_nolog" in mib:
            w(f"| dlaunch, one local node, `--log-size 0` (no rank logs in the job's record) | "
              f"{mib['dlaunch_nolog']:.0f} | {mib['dlaunch_nolog'] / mib['mpirun']:.1f}x |")
        w(f"| mpirun --tag-output, one node | {mib['mpirun']:.0f} | 1 |")
        w(f"| dlaunch, 2 SSH nodes x 4 | {mib['dlaunch_ssh']:.0f} | {mib['dlaunch_ssh'] / mib['mpirun_ssh']:.1f}x |")
        w(f"| mpirun --tag-output, 2 ssh nodes x 4 | {mib['mpirun_ssh']:.0f} | 1 |")
        w(f"| one OpenSSH stream, {O['ssh_cipher'][0]} + {O['ssh_cipher'][1]} (the methods libssh2 "
          f"negotiates here) | {mib['ssh_stream']:.0f} | |")
        w("")
        w(f"What dominates: locally, the copies (rank -> pipe -> agent -> pipe -> head -> stdout) and the "
          f"line cutting on {m['cores']} cores shared with the {O['ranks']} writers; dlaunch reaches "
          f"{100 * mib['dlaunch'] / mib['direct']:.0f}% of the writers' own speed to /dev/null. Over SSH, "
          f"the cipher: one OpenSSH stream with the same cipher and MAC moves {mib['ssh_stream']:.0f} MiB/s "
          f"on this machine, and dlaunch's {mib['dlaunch_ssh']:.0f} MiB/s over two connections is "
          f"{100 * mib['dlaunch_ssh'] / mib['ssh_stream']:.0f}% of it (both ends' encryption share the same "
          f"{m['cores']} cores with the writers; on separate machines each end has its own). mpirun's output travels from each rank to its orted over a pipe, "
          "then to mpirun over TCP through its I/O forwarding framework, which tags every line itself.")
        w("")
    else:
        not_measured(w, "Output throughput")

    # ---- collectives
    if "collectives" in res:
        C = res["collectives"]
        st = C["store"]
        w("## Collectives and the store")
        w("")
        w("comm's MPI backend against raw `MPI_Allreduce` on a duplicate of `MPI_COMM_WORLD`, in the same "
          "processes, interleaved round by round (`allreduce_bench --compare`), 4 ranks under "
          f"`dlaunch --mpi` on {m['cores']} cores (oversubscribed: expect noise of several %, in both "
          "directions). float32 sum in place; busbw = algbw x 2(n-1)/n.")
        w("")
        w("| size | comm us | raw us | comm busbw GB/s | raw busbw GB/s | ratio |")
        w("|---:|---:|---:|---:|---:|---:|")
        for r in C["rows"]:
            b = r["bytes"]
            size = f"{b // (1 << 20)} MiB" if b >= 1 << 20 else f"{b // 1024} KiB"
            w(f"| {size} | {r['comm_us']:.1f} | {r['raw_us']:.1f} | {r['comm_busbw']:.3f} | "
              f"{r['raw_busbw']:.3f} | {r['ratio']:.3f} |")
        w("")
        w(f"Median ratio from 1 MiB: {fmt(C['median_ratio_from_1mib'], 3)}. comm's call is argument checks "
          "and one virtual call around `MPI_Allreduce`, no copy: the spread is the machine's, not comm's.")
        w("")
        if "torch_ops_s" in st:
            w("Store: 64 client threads, set + get of 32-byte values on loopback (`bench/store.sh`), against "
              "PyTorch's TCPStore from Debian's python3-torch in the same run:")
            w("")
            for line in st["lines"]:
                w(f"- {line}")
            w("")
            w("dlaunch's store also authenticates every connection (an HMAC challenge); TCPStore accepts "
              "anyone.")
            w("")
    else:
        not_measured(w, "Collectives and the store")

    # ---- 1000+ SSH nodes: measured apart by bench/ssh-wide.sh, which writes this section
    wide = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ssh-wide.md")
    if os.path.exists(wide):
        with open(wide) as f:
            w(f.read().rstrip())
        w("")

    # ---- binding: measured apart by bench/binding.py, which writes this section
    binding = os.path.join(os.path.dirname(os.path.abspath(__file__)), "binding.md")
    if os.path.exists(binding):
        with open(binding) as f:
            w(f.read().rstrip())
        w("")

    # ---- commands
    w("## Exact commands")
    w("")
    w("Paths as on the measuring machine; `DIR` is the test bed (`tests/testbed/sshd.sh`).")
    w("")
    w("```")
    for key, what in (("launch", "launch, {} (16 nodes)"), ("teardown", "teardown, {}"),
                      ("output", "output, {}")):
        for k, v in res.get(key, {}).get("commands", {}).items():
            w(f"# {what.format(k)}\n{v}")
    if "collectives" in res:
        w(f"# collectives\n{res['collectives']['command']}")
    w("```")
    w("")
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "history.md")) as f:
        w(f.read().rstrip())
    w("")
    with open(md_path, "w") as f:
        f.write("\n".join(md))
