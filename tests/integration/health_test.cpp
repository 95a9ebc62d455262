// dlaunch --check judges each node's health (issue 33): the agent's facts
// (dlaunch-agent --health) against the thresholds and the other nodes. Local
// logical nodes, each with an agent of its own (the hostfile's `agent:`): a
// wrapper that gives that node what a test needs (a stand-in NVML library,
// libnvidia-ml.so.1 of tests/helpers/fake_nvml.c, or a made-up /sys and
// kernel log under DLAUNCH_HEALTH_ROOT) and runs the real agent.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support.h"

namespace {

using dltest::dlaunch_cmd;
using dltest::run;
namespace fs = std::filesystem;

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

class Health : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = dltest::temp_dir("health"); }
  void TearDown() override { fs::remove_all(dir_); }

  // An agent for one node: the real one with these variables set.
  std::string agent(const std::string& name, const std::vector<std::string>& env) {
    std::string script = "#!/bin/sh\n";
    for (const auto& e : env) script += "export " + e + "\n";
    script += std::string("exec ") + DLAUNCH_AGENT_BIN + " \"$@\"\n";
    std::string path = dir_ + "/agent-" + name;
    write(path, script);
    ::chmod(path.c_str(), 0755);
    return path;
  }

  // A hostfile of local nodes, one per (name, agent).
  std::string hostfile(const std::vector<std::pair<std::string, std::string>>& nodes) {
    std::string y = "hosts:\n";
    for (const auto& [name, agent_path] : nodes) {
      y += "  - host: localhost\n    name: " + name + "\n    slots: 1\n";
      if (!agent_path.empty()) y += "    agent: " + agent_path + "\n";
    }
    std::string path = dir_ + "/hosts.yaml";
    write(path, y);
    return path;
  }

  // The stand-in NVML and CUDA driver (a node with the NVIDIA driver has
  // both; the GPU test finds the stand-in's GPUs healthy unless FAKE_CUDA
  // says otherwise).
  std::string nvml() const {
    return std::string("LD_LIBRARY_PATH=") + FAKE_NVML_DIR + ":" + FAKE_CUDA_DIR;
  }
  // NVML without the CUDA driver's library.
  std::string nvml_only() const { return std::string("LD_LIBRARY_PATH=") + FAKE_NVML_DIR; }

  std::string dir_;
};

// The last line that starts so: a node's line in the health figures, the
// table after the check's.
std::string line_of(const std::string& text, const std::string& start) {
  std::string found;
  for (const auto& l : dltest::lines_of(text)) {
    if (l.rfind(start, 0) == 0) found = l;
  }
  return found;
}

// A GPU with row remappings pending, an InfiniBand port down, an XID 79 in
// the kernel log: each node is named with its own, the healthy one passes.
TEST_F(Health, CheckNamesEachBadNodeAndWhy) {
  const std::string root = dir_ + "/root";
  write(root + "/sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
  write(root + "/sys/class/infiniband/mlx5_0/ports/1/phys_state", "2: Polling\n");
  write(root + "/sys/class/infiniband/mlx5_0/ports/1/rate", "100 Gb/sec (4X EDR)\n");
  write(root + "/sys/class/infiniband/mlx5_0/ports/1/counters/link_downed", "3\n");
  write(root + "/proc/loadavg", "0.10 0.10 0.10 1/100 1\n");
  write(root + "/proc/meminfo", "MemTotal: 16777216 kB\nMemAvailable: 8388608 kB\n");
  const std::string xroot = dir_ + "/xroot";
  write(xroot + "/dev/kmsg",
        "6,1,100,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n"
        "4,2,200,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n");
  const auto hosts =
      hostfile({{"good", ""},
                {"remap", agent("remap", {nvml(), "FAKE_NVML=gpus=2,1.remap_pending=1"})},
                {"ibdown", agent("ibdown", {"DLAUNCH_HEALTH_ROOT=" + root})},
                {"xid", agent("xid", {"DLAUNCH_HEALTH_ROOT=" + xroot})}});
  const auto r = run(dlaunch_cmd({"--check", "-H", hosts, "true"}), 60);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string& o = r.out;
  EXPECT_NE(o.find("HEALTH"), std::string::npos) << o;
  const std::string good = dltest::lines_of(o).size() > 1 ? dltest::lines_of(o)[1] : "";
  EXPECT_TRUE(good.starts_with("0     good") && good.ends_with(" ok") &&
              good.find("FAILED") == std::string::npos)
      << o;
  EXPECT_NE(o.find("node 1 (remap): GPU 1 has row remappings pending: reset the GPU or reboot"),
            std::string::npos)
      << o;
  EXPECT_EQ(o.find("node 1 (remap): GPU 0"), std::string::npos) << o;
  EXPECT_NE(o.find("node 2 (ibdown): InfiniBand port mlx5_0/1 is DOWN (Polling)"),
            std::string::npos)
      << o;
  // InfiniBand without an unlimited locked-memory limit (this machine's, unless unlimited).
  EXPECT_NE(o.find("node 3 (xid): XID 79 in the kernel log since boot"), std::string::npos) << o;
  EXPECT_NE(o.find("1 of 4 node(s) passed"), std::string::npos) << o;
  // The figures: the stand-in's two GPUs and driver, the port, the XID.
  EXPECT_NE(line_of(o, "1     remap").find("535.104.05/12.2"), std::string::npos) << o;
  EXPECT_NE(o.find("0/1 up"), std::string::npos) << o;
}

// The GPU test (a full --check): each node's agent runs it in a child on the
// GPUs its NVML sees, through the CUDA driver (here tests/helpers/fake_cuda.c,
// which does the three kernels in C and spoils what FAKE_CUDA says). Memory
// read back wrong, a wrong computation, a GPU slower than the others of its
// name, a hung GPU and a node without libcuda are each named; --check=quick
// runs no GPU test, and every node passes it.
TEST_F(Health, TheGpuTestNamesBadMemoryAWrongResultASlowGpuAndAHungOne) {
  const std::string pidfile = dir_ + "/hung.pid";
  const auto gpu = [&](const std::string& name, const std::string& cuda) {
    return agent(name, {nvml(), "FAKE_NVML=gpus=1", "FAKE_CUDA=gpus=1," + cuda,
                        "FAKE_CUDA_PIDFILE=" + pidfile, "DLAUNCH_GPU_TEST_LIMIT_S=3"});
  };
  const auto hosts = hostfile({{"good", gpu("good", "gbps=1000")},
                               {"mem", gpu("mem", "bad_words=2")},
                               {"compute", gpu("compute", "compute_wrong=5")},
                               {"slow", gpu("slow", "gbps=100")},
                               {"hung", gpu("hung", "hang=1")},
                               {"nocuda", agent("nocuda", {nvml_only(), "FAKE_NVML=gpus=1"})},
                               {"cpu", ""}});
  const auto r =
      run(dlaunch_cmd({"--check", "--check-threshold", "gpu_test_mb=16", "-H", hosts, "true"}), 90);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string& o = r.out;
  EXPECT_NE(o.find("node 1 (mem): CUDA device 0 (PCI 0000:10:00.0): memory test: 4 of 8388608 "
                   "words read back wrong (the first at byte 16396 of 16 MiB)"),
            std::string::npos)
      << o;
  EXPECT_NE(o.find("node 2 (compute): CUDA device 0 (PCI 0000:10:00.0): compute test: 5 of "
                   "32768 threads computed wrong results"),
            std::string::npos)
      << o;
  EXPECT_NE(o.find("node 3 (slow): CUDA device 0 (PCI 0000:10:00.0) reads its memory at 100 "
                   "GB/s (the median of the job's 4 Fake GPU 0 GPUs 1000 GB/s; threshold "
                   "gpu_mem_ratio=0.5)"),
            std::string::npos)
      << o;
  EXPECT_NE(o.find("node 4 (hung): the GPU test could not run: error: the GPU test did not "
                   "finish within 3 s (a GPU or its driver hangs)"),
            std::string::npos)
      << o;
  EXPECT_NE(o.find("node 5 (nocuda): the GPU test could not run: not loaded: libcuda.so.1"),
            std::string::npos)
      << o;
  for (const char* passed : {"node 0 (good): ", "node 6 (cpu): "}) {
    EXPECT_EQ(o.find(std::string(passed) + "CUDA"), std::string::npos) << o;
    EXPECT_EQ(o.find(std::string(passed) + "the GPU test"), std::string::npos) << o;
  }
  const auto table = dltest::lines_of(o);
  EXPECT_TRUE(table.size() > 1 && table[1].starts_with("0     good") && table[1].ends_with(" ok"))
      << o;
  EXPECT_NE(o.find("2 of 7 node(s) passed"), std::string::npos) << o;
  // The hung test's process is gone (killed at its deadline).
  int hung = 0;
  std::ifstream(pidfile) >> hung;
  ASSERT_GT(hung, 0);
  EXPECT_TRUE(::kill(hung, 0) != 0 && errno == ESRCH) << "pid " << hung << " is still there";

  const auto quick = run(dlaunch_cmd({"--check=quick", "-H", hosts, "true"}), 60);
  EXPECT_EQ(quick.exit_code, 0) << quick.out << quick.err;
  EXPECT_NE(quick.out.find("7 of 7 node(s) passed"), std::string::npos) << quick.out;

  // The test's size is the job's: not one host's.
  const std::string per_host = dir_ + "/per-host.yaml";
  write(per_host, "hosts:\n  - host: localhost\n    health: {gpu_test_mb: 64}\n");
  const auto bad = run(dlaunch_cmd({"--check", "-H", per_host, "true"}), 30);
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("'gpu_test_mb' is the job's, not one host's"), std::string::npos)
      << bad.err;
}

// xid_window_h: the agent says how long ago each XID was logged (the
// record's microseconds since boot against the monotonic clock): one logged
// just after boot is outside a window of half the uptime, one logged a
// minute ago inside it.
TEST_F(Health, AnXidOlderThanTheWindowIsNotHeldAgainstTheNode) {
  double uptime = 0;
  std::ifstream("/proc/uptime") >> uptime;
  if (uptime < 600) GTEST_SKIP() << "the machine booted " << uptime << " s ago: too recent";
  const std::string old_root = dir_ + "/old";
  write(old_root + "/dev/kmsg",
        "4,2,1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n");
  const std::string new_root = dir_ + "/new";
  const auto recent_us = static_cast<long long>((uptime - 60) * 1e6);
  write(new_root + "/dev/kmsg", "4,2," + std::to_string(recent_us) +
                                    ",-;NVRM: Xid (PCI:0000:3b:00): 48, double-bit ECC.\n");
  const auto hosts = hostfile({{"old", agent("old", {"DLAUNCH_HEALTH_ROOT=" + old_root})},
                               {"new", agent("new", {"DLAUNCH_HEALTH_ROOT=" + new_root})}});
  const std::string window = "xid_window_h=" + std::to_string(uptime / 2 / 3600);
  const auto r =
      run(dlaunch_cmd({"--check", "--check-threshold", window, "-H", hosts, "true"}), 60);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out.find("node 0 (old): XID"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("node 1 (new): XID 48 in the kernel log in the last "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("1 of 2 node(s) passed"), std::string::npos) << r.out;
  // Without a window, both count.
  const auto all = run(dlaunch_cmd({"--check", "-H", hosts, "true"}), 60);
  EXPECT_NE(all.out.find("node 0 (old): XID 79 in the kernel log since boot"), std::string::npos)
      << all.out;
  EXPECT_NE(all.out.find("0 of 2 node(s) passed"), std::string::npos) << all.out;
}

// GPU driver versions must agree: the node whose driver differs from what
// the others have is named; a node without NVML is not held against them.
TEST_F(Health, ADriverUnlikeTheOthersIsNamed) {
  const auto hosts = hostfile({{"a", agent("a", {nvml()})},
                               {"b", agent("b", {nvml()})},
                               {"c", agent("c", {nvml(), "FAKE_NVML_DRIVER=470.82.01"})},
                               {"d", ""}});
  const auto r = run(dlaunch_cmd({"--check", "-H", hosts, "true"}), 60);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("node 2 (c): GPU driver 470.82.01 differs from the 535.104.05 of 2 other "
                       "node(s)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("3 of 4 node(s) passed"), std::string::npos) << r.out;
}

// Thresholds: one that no node meets fails every node and says which; a
// name that is none, a value that is no number, and --json or a threshold
// without --check are input errors (exit 2) that check nothing.
TEST_F(Health, ThresholdsChangeTheVerdict) {
  const auto hosts = hostfile({{"a", ""}, {"b", agent("b", {nvml(), "FAKE_NVML=temp=70"})}});
  const auto ok = run(dlaunch_cmd({"--check", "-H", hosts, "true"}), 60);
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  const auto hot =
      run(dlaunch_cmd({"--check", "--check-threshold", "gpu_temp_c=60", "-H", hosts, "true"}), 60);
  EXPECT_EQ(hot.exit_code, 1) << hot.out << hot.err;
  EXPECT_NE(hot.out.find("node 1 (b): GPU 0 at 70 C (threshold gpu_temp_c=60)"), std::string::npos)
      << hot.out;
  const auto full =
      run(dlaunch_cmd({"--check", "--check-threshold=free_gb=100000000", "-H", hosts, "true"}), 60);
  EXPECT_EQ(full.exit_code, 1) << full.out << full.err;
  EXPECT_NE(full.out.find("node 0 (a): only "), std::string::npos) << full.out;
  EXPECT_NE(full.out.find("MB free in the working directory (threshold free_gb=1e+08)"),
            std::string::npos)
      << full.out;
  for (const auto& bad :
       std::vector<std::vector<std::string>>{{"--check", "--check-threshold", "gpu_tmp=60"},
                                             {"--check", "--check-threshold", "gpu_temp_c=hot"},
                                             {"--json"},
                                             {"--check-threshold", "free_gb=2"}}) {
    auto args = bad;
    args.insert(args.end(), {"-H", hosts, "true"});
    const auto r = run(dlaunch_cmd(args), 60);
    EXPECT_EQ(r.exit_code, 2) << bad[0] << ": " << r.out << r.err;
    EXPECT_EQ(r.out.find("NODE"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find(bad.size() > 1 ? "--check-threshold" : "--json"), std::string::npos)
        << r.err;
  }
}

// The hostfile's `health:` thresholds: `defaults:`'s for every node, a
// host's own for it, --check-threshold over both; a wrong one is refused
// with its line before anything runs, --check or not.
TEST_F(Health, HostfileThresholdsJudgeEachNode) {
  const std::string hosts = dir_ + "/hosts.yaml";
  write(hosts,
        "defaults:\n"
        "  health: {free_gb: 100000000}\n"
        "hosts:\n"
        "  - {host: localhost, name: a, slots: 1}\n"
        "  - host: localhost\n"
        "    name: b\n"
        "    slots: 1\n"
        "    health:\n"
        "      free_gb: 0\n");
  const auto r = run(dlaunch_cmd({"--check", "-H", hosts, "true"}), 60);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("node 0 (a): only "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MB free in the working directory (threshold free_gb=1e+08)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("node 1 (b): only "), std::string::npos) << r.out;
  const auto cli =
      run(dlaunch_cmd({"--check", "--check-threshold", "free_gb=0", "-H", hosts, "true"}), 60);
  EXPECT_EQ(cli.exit_code, 0) << cli.out << cli.err;

  const std::string marker = dir_ + "/ran";
  write(hosts, "hosts:\n  - host: localhost\n    health:\n      gpu_tmp: 60\n");
  const auto bad = run(dlaunch_cmd({"-H", hosts, "touch", marker}), 60);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find(hosts + ":4:7: health: 'gpu_tmp' is not a threshold"), std::string::npos)
      << bad.err;
  EXPECT_FALSE(fs::exists(marker));
}

// --json: one object that says what the tables say, read back by Python's
// json module.
TEST_F(Health, JsonSaysWhatTheTableSays) {
  const auto hosts =
      hostfile({{"a", ""}, {"b", agent("b", {nvml(), "FAKE_NVML=0.ecc_volatile=2"})}});
  const auto r = run(dlaunch_cmd({"--check", "--json", "-H", hosts, "true"}), 60);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string file = dir_ + "/check.json";
  write(file, r.out);
  const auto py = run({"python3", "-c",
                       "import json,sys\n"
                       "d = json.load(open(sys.argv[1]))\n"
                       "print(d['ok'], d['passed'], d['total'])\n"
                       "for n in d['nodes']:\n"
                       "    print(n['name'], n['health'], n['ok'], n['facts'].get('nvml', '-')[:6],"
                       " '|'.join(n['problems']))\n",
                       file});
  ASSERT_EQ(py.exit_code, 0) << py.err << r.out;
  EXPECT_NE(py.out.find("False 1 2\n"), std::string::npos) << py.out;
  EXPECT_NE(py.out.find("a ok True not lo \n"), std::string::npos) << py.out;
  EXPECT_NE(py.out.find("b FAILED False loaded GPU 0 has 2 uncorrected ECC error(s) since the "
                        "driver loaded (threshold ecc_volatile=0)"),
            std::string::npos)
      << py.out;
}

// --preflight: the job starts on the nodes that pass. A failing node is
// left out and a spare takes its place; the failing spare of another job is
// no spare; without --spares or --min-nodes, or below --min-nodes, nothing
// starts. No --max-restarts needed: nothing restarts.
TEST_F(Health, PreflightLeavesAFailingNodeOutBeforeTheJob) {
  const std::string bad = agent("bad", {nvml(), "FAKE_NVML=0.remap_pending=1"});
  const std::string job = "echo ran on $DLAUNCH_NODE_NAME";
  {
    const auto hosts = hostfile({{"a", ""}, {"bad", bad}, {"c", ""}});
    const std::string events = dir_ + "/events.jsonl";
    const auto r = run(dlaunch_cmd({"--preflight", "--spares", "1", "--events", events, "-H", hosts,
                                    "sh", "-c", job}),
                       60);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("ran on a"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("ran on c"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("ran on bad"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("node 1 (bad): GPU 0 has row remappings pending"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("dlaunch: preflight: node 1 bad (localhost) excluded; spare c "
                         "(localhost) in its place"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("dlaunch: left out: bad (localhost): preflight: GPU 0 has row "
                         "remappings pending"),
              std::string::npos)
        << r.err;
    // The job's events say it too, once.
    const std::string log = dltest::slurp(events);
    const std::string said =
        R"("type":"node_excluded","host":"bad","spare":false,"reason":"preflight: GPU 0 has row )";
    EXPECT_NE(log.find(said), std::string::npos) << log;
    EXPECT_EQ(log.find(said, log.find(said) + 1), std::string::npos) << log;
  }
  {  // The spare fails: it is dropped, the job runs on the node that passed.
    const auto hosts = hostfile({{"a", ""}, {"bad", bad}});
    const auto r =
        run(dlaunch_cmd({"--preflight", "--spares", "1", "-H", hosts, "sh", "-c", job}), 60);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("ran on a"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("dlaunch: preflight: spare bad left out"), std::string::npos) << r.err;
  }
  {  // Nowhere to leave it: nothing runs.
    const auto hosts = hostfile({{"a", ""}, {"bad", bad}});
    for (const auto& extra : std::vector<std::vector<std::string>>{{}, {"--min-nodes", "2"}}) {
      std::vector<std::string> args = {"--preflight"};
      args.insert(args.end(), extra.begin(), extra.end());
      args.insert(args.end(), {"-H", hosts, "sh", "-c", job});
      const auto r = run(dlaunch_cmd(args), 60);
      EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
      EXPECT_EQ(r.out.find("ran on"), std::string::npos) << r.out;
      EXPECT_NE(r.err.find("HEALTH"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("not starting"), std::string::npos) << r.err;
    }
  }
  {  // Every node passes: one line, and the job.
    const auto hosts = hostfile({{"a", ""}, {"b", ""}});
    const auto r = run(dlaunch_cmd({"--preflight", "-H", hosts, "sh", "-c", job}), 60);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.err.find("dlaunch: preflight: 2 node(s) passed"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("HEALTH"), std::string::npos) << r.err;
  }
}

// An elastic restart checks the nodes it keeps again (the quick checks): a
// node that went bad during the first attempt is left out of the second.
TEST_F(Health, AnElasticRestartChecksTheNodesItKeepsAgain) {
  const std::string flag = dir_ + "/b-went-bad";
  // b's agent: healthy until the flag exists, then a GPU with remappings pending.
  const std::string b_agent = dir_ + "/agent-b";
  write(b_agent, "#!/bin/sh\nif [ -e " + flag + " ]; then export " + nvml() +
                     " FAKE_NVML=0.remap_pending=1; fi\nexec " + DLAUNCH_AGENT_BIN + " \"$@\"\n");
  ::chmod(b_agent.c_str(), 0755);
  const auto hosts = hostfile({{"a", ""}, {"b", b_agent}, {"c", ""}});
  // The first attempt: rank 0 marks b bad and fails; the others wait to be stopped.
  const std::string job =
      "if [ \"$DLAUNCH_RESTART_COUNT\" = 0 ]; then if [ \"$RANK\" = 0 ]; "
      "then touch " +
      flag +
      "; exit 3; fi; sleep 60; fi; "
      "echo ran on $DLAUNCH_NODE_NAME";
  const std::string events = dir_ + "/events.jsonl";
  const auto r = run(dlaunch_cmd({"--preflight", "--min-nodes", "2", "--max-restarts", "1",
                                  "--events", events, "-H", hosts, "sh", "-c", job}),
                     90);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("dlaunch: preflight: 3 node(s) passed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("node 1 (b): GPU 0 has row remappings pending"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("ran on a"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ran on c"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ran on b"), std::string::npos) << r.out;
  const std::string log = dltest::slurp(events);
  EXPECT_NE(
      log.find(
          R"("type":"node_excluded","host":"b","spare":false,"reason":"preflight: GPU 0 has row )"),
      std::string::npos)
      << log;
}

// --exclude-file: --check writes the hosts that failed (anew each time), a
// job leaves them out, --preflight adds those it finds; a file that leaves no
// host is an input error.
TEST_F(Health, AnExcludeFileCarriesFailingHostsToTheNextJob) {
  const std::string bad = agent("bad", {nvml(), "FAKE_NVML=0.remap_pending=1"});
  const std::string worse = agent("worse", {nvml(), "FAKE_NVML=0.retired_pending=1"});
  const auto hosts = hostfile({{"a", ""}, {"bad", bad}, {"c", ""}, {"worse", worse}});
  const std::string file = dir_ + "/exclude.txt";
  write(file, "stale-host  # from an older check\n");
  const auto check = run(dlaunch_cmd({"--check", "--exclude-file", file, "-H", hosts, "true"}), 60);
  EXPECT_EQ(check.exit_code, 1) << check.out << check.err;
  const std::string listed = dltest::slurp(file);
  EXPECT_EQ(listed.rfind("bad  # ", 0), 0u) << listed;
  EXPECT_NE(listed.find("GPU 0 has row remappings pending"), std::string::npos) << listed;
  EXPECT_NE(listed.find("\nworse  # "), std::string::npos) << listed;
  EXPECT_EQ(listed.find("stale-host"), std::string::npos) << listed;  // written anew
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  const std::string job = "echo ran on $DLAUNCH_NODE_NAME";
  const auto r = run(dlaunch_cmd({"--exclude-file", file, "-H", hosts, "sh", "-c", job}), 60);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ran on a"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ran on c"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ran on bad"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ran on worse"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("left out as " + file + " lists them: bad, worse"), std::string::npos)
      << r.err;

  // --preflight adds what it leaves out; a file naming every host stops the job.
  write(file, "bad\n");
  const auto pre = run(dlaunch_cmd({"--preflight", "--min-nodes", "1", "--exclude-file", file, "-H",
                                    hosts, "sh", "-c", job}),
                       60);
  EXPECT_EQ(pre.exit_code, 0) << pre.out << pre.err;
  EXPECT_EQ(pre.out.find("ran on worse"), std::string::npos) << pre.out;
  const std::string added = dltest::slurp(file);
  EXPECT_EQ(added.rfind("bad\nworse  # ", 0), 0u) << added;
  write(file, "a\nbad\nc\nworse\n");
  const auto none = run(dlaunch_cmd({"--exclude-file", file, "-H", hosts, "true"}), 60);
  EXPECT_EQ(none.exit_code, 2) << none.out << none.err;
  EXPECT_NE(none.err.find("every host of the job is listed in"), std::string::npos) << none.err;
}

// Only a regular file of the user's is written: a pipe or a directory named
// by mistake (or /dev/null) is refused before anything runs, and stays what
// it was (rename() would have replaced it with a regular file).
TEST_F(Health, AnExcludeFileThatIsNoRegularFileIsRefusedAndLeftAsItWas) {
  const auto hosts = hostfile({{"a", ""}});
  const std::string pipe = dir_ + "/pipe";
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0600), 0);
  const std::string marker = dir_ + "/ran";
  for (const auto& mode : {"--check", "--preflight"}) {
    const auto r =
        run(dlaunch_cmd({mode, "--exclude-file", pipe, "-H", hosts, "touch", marker}), 60);
    EXPECT_EQ(r.exit_code, 2) << mode << r.out << r.err;
    EXPECT_NE(r.err.find("--exclude-file"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("'" + pipe + "' is not a regular file"), std::string::npos) << r.err;
    struct stat st {};
    ASSERT_EQ(::lstat(pipe.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode)) << mode;
  }
  const auto d = run(dlaunch_cmd({"--exclude-file", dir_, "-H", hosts, "touch", marker}), 60);
  EXPECT_EQ(d.exit_code, 2) << d.out << d.err;
  EXPECT_EQ(::access(marker.c_str(), F_OK), -1);  // nothing ran
}

}  // namespace
