// The health verdicts of dlaunch --check (launcher/check/health.h) on facts
// made up here, and the agent's reading of a kernel log's XIDs.
#include "check/health.h"

#include <gtest/gtest.h>

#include "health/node_health.h"
#include "hostfile/hostfile.h"

namespace {

using dlaunch::InputError;
namespace h = dlaunch::health;

h::Facts healthy() {
  return {{"kernel", "6.1.0-18-amd64"},
          {"cpus", "8"},
          {"load1", "0.5"},
          {"mem_total_mb", "64000"},
          {"mem_available_mb", "60000"},
          {"workdir_free_mb", "50000"},
          {"tmpdir", "/tmp"},
          {"tmpdir_free_mb", "50000"},
          {"nofile_hard", "1048576"},
          {"memlock_hard_mb", "unlimited"},
          {"ib_ports", "0"},
          {"xid", "none"},
          {"nvml", "not loaded: x"}};
}

bool mentions(const std::vector<std::string>& problems, const std::string& text) {
  for (const auto& p : problems) {
    if (p.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(Health, AHealthyNodeHasNoProblem) { EXPECT_TRUE(h::judge_node(healthy(), {}, {}, 0).empty()); }

TEST(Health, EachNodeFigureAgainstItsThreshold) {
  auto f = healthy();
  f["workdir_free_mb"] = "500";
  f["tmpdir_free_mb"] = "100";
  f["tmpdir"] = "/scratch";
  f["mem_available_mb"] = "200";
  f["nofile_hard"] = "1024";
  f["load1"] = "40";
  const auto p = h::judge_node(f, {}, {}, 0);
  EXPECT_TRUE(mentions(p, "only 500 MB free in the working directory (threshold free_gb=1)"));
  EXPECT_TRUE(mentions(p, "only 100 MB free in TMPDIR (/scratch)"));
  EXPECT_TRUE(mentions(p, "only 200 MB of memory available (threshold mem_available_gb=1)"));
  EXPECT_TRUE(mentions(p, "the open-file limit is 1024 (hard; threshold nofile=4096)"));
  EXPECT_FALSE(mentions(p, "load"));  // shown only, unless a threshold is given
  h::Thresholds t;
  h::set_threshold(t, "load_per_cpu=2");
  h::set_threshold(t, "free_gb=0.25");
  h::set_threshold(t, "mem_available_gb=0");
  h::set_threshold(t, "nofile=1024");
  const auto q = h::judge_node(f, t, {}, 0);
  EXPECT_TRUE(mentions(q, "load 40 on 8 CPU(s) (threshold load_per_cpu=2)"));
  EXPECT_FALSE(mentions(q, "working directory"));  // 500 MB >= 256 MB
  EXPECT_TRUE(mentions(q, "only 100 MB free in TMPDIR"));
  EXPECT_FALSE(mentions(q, "memory"));
  EXPECT_FALSE(mentions(q, "open-file"));
}

TEST(Health, InfiniBandPortsAndTheirLockedMemory) {
  auto f = healthy();
  f["ib_ports"] = "2";
  f["ib.mlx5_0/1.state"] = "ACTIVE";
  f["ib.mlx5_0/1.phys_state"] = "LinkUp";
  f["ib.mlx5_0/1.link_downed"] = "7";
  f["ib.mlx5_1/1.state"] = "INIT";
  f["ib.mlx5_1/1.phys_state"] = "LinkUp";
  auto p = h::judge_node(f, {}, {}, 0);
  EXPECT_TRUE(mentions(p, "InfiniBand port mlx5_1/1 is INIT (LinkUp)"));
  EXPECT_FALSE(mentions(p, "mlx5_0/1"));
  EXPECT_FALSE(mentions(p, "locked-memory"));  // unlimited
  f["memlock_hard_mb"] = "64";
  p = h::judge_node(f, {}, {}, 0);
  EXPECT_TRUE(mentions(p, "the locked-memory limit is 64 MB on a node with InfiniBand"));
  h::Thresholds t;
  h::set_threshold(t, "memlock_mb=64");
  h::set_threshold(t, "ib_link_downed=5");
  p = h::judge_node(f, t, {}, 0);
  EXPECT_FALSE(mentions(p, "locked-memory"));
  EXPECT_TRUE(mentions(p, "InfiniBand port mlx5_0/1 went down 7 time(s)"));
}

TEST(Health, TheClockCountsOnlyBeyondItsUncertainty) {
  auto f = healthy();
  // The node read 1002.0 s; the head sent at 1000.0 s and read at 1001.0 s:
  // 1.5 s ahead, give or take 0.5 s.
  f["time_ns"] = "1002000000000";
  const auto c = h::clock_offset(f, 1000000000000LL, 1001000000000LL);
  ASSERT_TRUE(c.known);
  EXPECT_DOUBLE_EQ(c.offset_s, 1.5);
  EXPECT_DOUBLE_EQ(c.uncertainty_s, 0.5);
  EXPECT_FALSE(mentions(h::judge_node(f, {}, c, 0), "clock"));  // 1.5 - 0.5 is not over 1
  h::Thresholds t;
  h::set_threshold(t, "clock_offset_s=0.5");
  EXPECT_TRUE(mentions(h::judge_node(f, t, c, 0), "the clock is 1.500 s ahead of the head's"));
  EXPECT_FALSE(h::clock_offset(healthy(), 1, 2).known);  // no time_ns
}

TEST(Health, GpusThroughNvml) {
  auto f = healthy();
  f["nvml"] = "loaded";
  f["gpu_count"] = "2";
  f["gpu.0.temp_c"] = "90";
  f["gpu.0.ecc_volatile_uncorrected"] = "0";
  f["gpu.0.ecc_aggregate_uncorrected"] = "3";
  f["gpu.0.retired_pending"] = "n/a";
  f["gpu.0.throttle"] = "none";
  f["gpu.1.temp_c"] = "40";
  f["gpu.1.retired_pending"] = "1";
  f["gpu.1.remap_failed"] = "1";
  f["gpu.1.throttle"] = "hw_slowdown,hw_thermal";
  f["gpu.1.persistence"] = "error: GPU is lost";
  const auto p = h::judge_node(f, {}, {}, 4);
  EXPECT_TRUE(mentions(p, "the hostfile lists 4 GPU(s), NVML sees 2"));
  EXPECT_TRUE(mentions(p, "GPU 0 at 90 C (threshold gpu_temp_c=85)"));
  EXPECT_TRUE(mentions(p, "GPU 0 has 3 uncorrected ECC error(s) in its life"));
  EXPECT_FALSE(mentions(p, "GPU 0 has retired"));  // n/a: not supported there
  EXPECT_TRUE(mentions(p, "GPU 1 has retired pages pending"));
  EXPECT_TRUE(mentions(p, "GPU 1 failed a row remapping"));
  EXPECT_TRUE(mentions(p, "GPU 1 runs slowed down: hw_slowdown,hw_thermal"));
  EXPECT_TRUE(mentions(p, "GPU 1: persistence error: GPU is lost"));
  // Without NVML the GPU facts are not judged (nvidia-smi counts them).
  f["nvml"] = "not loaded: no driver";
  EXPECT_FALSE(mentions(h::judge_node(f, {}, {}, 4), "GPU"));
}

TEST(Health, FatalXidsOnly) {
  auto f = healthy();
  f["xid"] = "13,31";  // a program's fault, an MMU fault: not the node's
  EXPECT_TRUE(h::judge_node(f, {}, {}, 0).empty());
  f["xid"] = "13,79,48,79";
  EXPECT_TRUE(mentions(h::judge_node(f, {}, {}, 0), "XID 79, 48 in the kernel log since boot"));
  EXPECT_EQ(dlaunch::agent::health::xids_in(
                "4,2,200,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
                "6,3,300,-;eth0: link up\n"
                "4,4,400,-;NVRM: Xid (PCI:0000:86:00): 13, Graphics Exception\n"
                "NVRM: Xid (PCI:0000:86:00) without a code\n"),
            (std::vector<int>{79, 13}));
  EXPECT_EQ(dlaunch::agent::health::xid_times_in(
                "4,2,200,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
                "6,3,300,-;eth0: link up\n"
                "4,4,400,c;NVRM: Xid (PCI:0000:86:00): 13, Graphics Exception\n"
                "NVRM: Xid (PCI:0000:86:00): 48, a line from dmesg without the record's fields\n"
                "NVRM: Xid (PCI:0000:86:00) without a code\n"),
            (std::vector<long long>{200, 400, -1}));
}

// xid_window_h: a fatal XID older than the window is shown, not held against
// the node; one within it, or of unknown age, still is.
TEST(Health, AWindowLeavesOutOldXids) {
  auto f = healthy();
  f["xid"] = "79,48";
  f["xid_age_s"] = "90000,60";  // 25 hours ago, a minute ago
  h::Thresholds t;
  EXPECT_TRUE(mentions(h::judge_node(f, t, {}, 0), "XID 79, 48 in the kernel log since boot"));
  h::set_threshold(t, "xid_window_h=24");
  EXPECT_TRUE(mentions(h::judge_node(f, t, {}, 0), "XID 48 in the kernel log in the last 24 h"));
  f["xid_age_s"] = "90000,90000";
  EXPECT_TRUE(h::judge_node(f, t, {}, 0).empty());
  f["xid_age_s"] = "90000,?";
  EXPECT_TRUE(mentions(h::judge_node(f, t, {}, 0), "XID 48 in the kernel log in the last 24 h"));
  f.erase("xid_age_s");  // an older agent: ages unknown, every one counts
  EXPECT_TRUE(mentions(h::judge_node(f, t, {}, 0), "XID 79, 48 in the kernel log in the last"));
}

TEST(Health, WhatMustAgreeAcrossNodesHeldAgainstTheMajority) {
  auto a = healthy();
  a["nvml"] = "loaded";
  a["gpu_driver"] = "535.104.05";
  a["net.ib0.mtu"] = "4092";
  a["net.eth0.speed_mbps"] = "100000";
  auto b = a;
  auto c = a;
  c["gpu_driver"] = "470.82.01";
  c["net.eth0.speed_mbps"] = "10000";
  auto d = healthy();  // no NVML, no such interfaces: not held against them
  const auto p = h::judge_across({&a, &b, &c, &d, nullptr});
  ASSERT_EQ(p.size(), 5u);
  EXPECT_TRUE(p[0].empty());
  EXPECT_TRUE(p[1].empty());
  EXPECT_TRUE(
      mentions(p[2], "GPU driver 470.82.01 differs from the 535.104.05 of 2 other node(s)"));
  EXPECT_TRUE(mentions(p[2], "eth0 speed (Mb/s) 10000 differs from the 100000 of 2 other node(s)"));
  EXPECT_TRUE(p[3].empty());
  EXPECT_TRUE(p[4].empty());
  // Two against two: no majority to name either side.
  auto e = c;
  EXPECT_TRUE(h::judge_across({&a, &b, &c, &e})[2].empty());
}

TEST(Health, ThresholdsByNameOrAnInputError) {
  h::Thresholds t;
  h::set_threshold(t, "gpu_temp_c=70.5");
  EXPECT_DOUBLE_EQ(t.gpu_temp_c, 70.5);
  for (const char* bad : {"gpu_tmp=1", "gpu_temp_c", "gpu_temp_c=", "gpu_temp_c=hot", "=3"}) {
    try {
      h::set_threshold(t, bad);
      ADD_FAILURE() << bad << " was taken";
    } catch (const InputError& e) {
      EXPECT_EQ(e.pos().source, "--check-threshold") << bad;
    }
  }
  EXPECT_EQ(h::threshold_names().size(), 15u);
}

}  // namespace

namespace {

// A stream of `gbps` Gb/s for one second.
h::Stream stream(std::size_t from, std::size_t to, std::uint32_t round, double gbps) {
  return {.from = from,
          .to = to,
          .round = round,
          .bytes = static_cast<std::uint64_t>(gbps * 1e9 / 8),
          .micros = 1000000};
}

// Two rings over four nodes: k -> k+1, then k -> k-1.
std::vector<h::Stream> rings(const std::vector<double>& out_round1,
                             const std::vector<double>& out_round2) {
  std::vector<h::Stream> s;
  const std::size_t n = out_round1.size();
  for (std::size_t k = 0; k < n; ++k) s.push_back(stream(k, (k + 1) % n, 1, out_round1[k]));
  for (std::size_t k = 0; k < n; ++k) s.push_back(stream(k, (k + n - 1) % n, 2, out_round2[k]));
  return s;
}

const std::vector<std::string> kFour = {"node 0 (a)", "node 1 (b)", "node 2 (c)", "node 3 (d)"};

TEST(HealthNetwork, ASlowSenderIsNamedNotTheNodesItSendsTo) {
  const auto v = h::judge_streams(rings({10, 10, 0.05, 10}, {10, 10, 0.05, 10}), kFour, {});
  EXPECT_TRUE(v.problems[0].empty());
  EXPECT_TRUE(v.problems[1].empty());
  EXPECT_TRUE(v.problems[3].empty());
  ASSERT_EQ(v.problems[2].size(), 1u);
  EXPECT_EQ(v.problems[2][0],
            "sends at 0.050 Gb/s (the median stream between the other nodes 10.00 Gb/s; "
            "threshold net_ratio=0.2)");
  EXPECT_EQ(v.summary,
            "network test: 8 stream(s) in 2 round(s), median 10.00 Gb/s, slowest 0.050 Gb/s");
  EXPECT_DOUBLE_EQ(v.send_gbps[2], 0.05);
}

// Three nodes, node 2's link throttled (what a clean-clone run of the netns
// bed measured): the streams to it are slow too (its acknowledgements wait
// in its link), four of the six streams are slow, and the overall median
// (0.15) is near node 2's own figure. Judged against the streams between the
// other two nodes, node 2 is named, for its sending only, and nobody else.
TEST(HealthNetwork, ASlowNodeOfThreeIsNamedThoughItSlowsMostStreams) {
  const std::vector<std::string> three = {"node 0 (a)", "node 1 (b)", "node 2 (c)"};
  const auto v = h::judge_streams(rings({2.5, 0.11, 0.048}, {0.20, 2.5, 0.05}), three, {});
  EXPECT_TRUE(v.problems[0].empty()) << v.problems[0].front();
  EXPECT_TRUE(v.problems[1].empty()) << v.problems[1].front();
  ASSERT_EQ(v.problems[2].size(), 1u);
  EXPECT_EQ(v.problems[2][0],
            "sends at 0.048 Gb/s (the median stream between the other nodes "
            "2.50 Gb/s; threshold net_ratio=0.2)");
  EXPECT_NE(v.summary.find("6 stream(s) in 2 round(s), median 0.1"), std::string::npos)
      << v.summary;
}

TEST(HealthNetwork, ASlowReceiverIsNamed) {
  // Node 1 receives from 0 (round 1) and from 2 (round 2): both slow.
  const auto v = h::judge_streams(rings({0.5, 10, 10, 10}, {10, 10, 0.5, 10}), kFour, {});
  EXPECT_TRUE(v.problems[0].empty());
  EXPECT_TRUE(v.problems[2].empty());
  ASSERT_EQ(v.problems[1].size(), 1u);
  EXPECT_EQ(v.problems[1][0].rfind("receives at 0.500 Gb/s", 0), 0u) << v.problems[1][0];
}

TEST(HealthNetwork, ASlowStreamNoNodeExplainsNamesItsLink) {
  const auto v = h::judge_streams(rings({10, 0.1, 10, 10}, {10, 10, 10, 10}), kFour, {});
  ASSERT_EQ(v.problems[1].size(), 1u);
  EXPECT_EQ(v.problems[1][0].rfind("the stream to node 2 (c) ran at 0.100 Gb/s", 0), 0u)
      << v.problems[1][0];
  EXPECT_TRUE(v.problems[2].empty());
}

TEST(HealthNetwork, UnevenButNotSlowAndTheThresholds) {
  // Streams between 4 and 9 Gb/s: nobody is below a fifth of the median.
  const auto even = h::judge_streams(rings({4, 9, 6, 7}, {8, 5, 9, 4}), kFour, {});
  for (const auto& p : even.problems) EXPECT_TRUE(p.empty());
  h::Thresholds t;
  h::set_threshold(t, "net_gbps=4.5");
  const auto floor = h::judge_streams(rings({4, 9, 6, 7}, {8, 5, 9, 4}), kFour, t);
  // Node 0 sends at 4 (round 1) and 8: not all slow; node 3 sends 7 and 4; the
  // stream 0 -> 1 (4 Gb/s) and 3 -> 2 (4 Gb/s) are their links.
  EXPECT_TRUE(mentions(floor.problems[0], "the stream to node 1 (b) ran at 4.000 Gb/s"));
  EXPECT_TRUE(mentions(floor.problems[3], "the stream to node 2 (c) ran at 4.000 Gb/s"));
}

TEST(HealthNetwork, AStreamThatFailedIsItsSendersProblem) {
  auto s = rings({10, 10, 10, 10}, {10, 10, 10, 10});
  s[3].bytes = 0;
  s[3].micros = 0;
  s[3].error = "connect: Connection refused";
  const auto v = h::judge_streams(s, kFour, {});
  ASSERT_EQ(v.problems[3].size(), 1u);
  EXPECT_EQ(v.problems[3][0],
            "cannot stream to node 0 (a) for the network test: connect: Connection refused");
  EXPECT_EQ(h::judge_streams({}, kFour, {}).summary, "network test: no stream ran");
}

}  // namespace

namespace {

// Rounds 3 and 4 ran the slow streams again alone: a link that was only
// crowded is as fast as its best run, a slow one stays named.
TEST(HealthNetwork, AStreamRunAgainAloneCountsAtItsBest) {
  auto s = rings({10, 0.05, 0.05, 10}, {10, 10, 0.05, 10});
  s.push_back(stream(1, 2, 3, 9));     // 1 -> 2 was crowded
  s.push_back(stream(2, 3, 3, 0.05));  // 2 -> 3 is slow alone too
  s.push_back(stream(2, 1, 4, 0.05));
  const auto v = h::judge_streams(s, kFour, {});
  EXPECT_TRUE(v.problems[1].empty()) << v.problems[1].front();
  ASSERT_EQ(v.problems[2].size(), 1u);
  EXPECT_EQ(v.problems[2][0].rfind("sends at 0.050 Gb/s", 0), 0u);
  EXPECT_NE(v.summary.find("8 stream(s) in 2 round(s)"), std::string::npos) << v.summary;
  EXPECT_NE(v.summary.find("(3 slow stream(s) run again alone)"), std::string::npos) << v.summary;
}

}  // namespace

namespace {

dlaunch::HealthSetting setting(const std::string& name, const std::string& value, int line,
                               bool from_defaults) {
  return {.name = name,
          .value = value,
          .pos = {.source = "hosts.yaml", .line = line, .column = 5},
          .from_defaults = from_defaults};
}

}  // namespace

// A node's thresholds: the defaults, the hostfile's `health:` (defaults:'s,
// then the host's own), then --check-threshold, which wins.
TEST(Health, ANodesThresholdsAreTheHostfilesThenTheCommandLines) {
  EXPECT_EQ(h::node_thresholds({}, {}).free_gb, h::Thresholds{}.free_gb);
  const std::vector<dlaunch::HealthSetting> hostfile = {setting("free_gb", "50", 2, true),
                                                        setting("gpu_temp_c", "80", 2, true),
                                                        setting("free_gb", "5", 7, false)};
  const auto t = h::node_thresholds(hostfile, {});
  EXPECT_EQ(t.free_gb, 5);
  EXPECT_EQ(t.gpu_temp_c, 80);
  const auto cli = h::node_thresholds(hostfile, {"gpu_temp_c=70", "free_gb=0"});
  EXPECT_EQ(cli.free_gb, 0);
  EXPECT_EQ(cli.gpu_temp_c, 70);
  EXPECT_EQ(h::node_thresholds({setting("net_ratio", "0.5", 2, true)}, {}).net_ratio, 0.5);
}

TEST(Health, AHostfileThresholdThatIsWrongNamesItsLine) {
  const auto error = [](const dlaunch::HealthSetting& s) {
    try {
      (void)h::node_thresholds({s}, {});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(setting("gpu_tmp", "60", 4, false)),
            "hosts.yaml:4:5: health: 'gpu_tmp' is not a threshold (hint: the thresholds are "
            "free_gb, mem_available_gb, load_per_cpu, nofile, memlock_mb, gpu_temp_c, "
            "ecc_volatile, ecc_aggregate, clock_offset_s, ib_link_downed, xid_window_h, "
            "net_ratio, net_gbps, gpu_test_mb, gpu_mem_ratio (docs/health.md))");
  EXPECT_EQ(error(setting("free_gb", "lots", 3, true)),
            "hosts.yaml:3:5: health: threshold 'free_gb': 'lots' is not a number (hint: write "
            "NAME: NUMBER, e.g. `free_gb: 20`)");
  EXPECT_NE(error(setting("net_gbps", "10", 9, false))
                .find("hosts.yaml:9:5: health: 'net_gbps' is the job's, not one host's"),
            std::string::npos);
}

// The GPU test's facts (agent/health/gpu_test.h), where it ran: a device
// whose memory or arithmetic went wrong, or that failed a call, is named with
// its PCI address; a node whose test could not run says why; a node without
// the test's facts (--check=quick, no GPU) is not judged on them.
TEST(Health, TheGpuTestsFindings) {
  auto f = healthy();
  EXPECT_TRUE(h::judge_node(f, {}, {}, 0).empty());
  f["cuda"] = "loaded";
  f["cuda_count"] = "3";
  f["cuda.0.pci"] = "0000:3b:00.0";
  f["cuda.0.memtest"] = "ok";
  f["cuda.0.compute"] = "ok";
  f["cuda.1.pci"] = "0000:5e:00.0";
  f["cuda.1.memtest"] = "4 of 100 words read back wrong (the first at byte 12 of 1 MiB)";
  f["cuda.1.compute"] = "ok";
  f["cuda.2.memtest"] = "error: cuMemAlloc: out of memory (2)";
  f["cuda.2.compute"] = "2 of 32768 threads computed wrong results (the first: thread 7)";
  const auto p = h::judge_node(f, {}, {}, 0);
  ASSERT_EQ(p.size(), 3u) << ::testing::PrintToString(p);
  EXPECT_EQ(p[0],
            "CUDA device 1 (PCI 0000:5e:00.0): memory test: 4 of 100 words read back wrong (the "
            "first at byte 12 of 1 MiB)");
  EXPECT_EQ(p[1], "CUDA device 2: memory test: error: cuMemAlloc: out of memory (2)");
  EXPECT_EQ(p[2],
            "CUDA device 2: compute test: 2 of 32768 threads computed wrong results (the first: "
            "thread 7)");
  auto none = healthy();
  none["cuda"] = "error: cuInit: no CUDA-capable device is detected (100)";
  EXPECT_EQ(h::judge_node(none, {}, {}, 0),
            std::vector<std::string>{
                "the GPU test could not run: error: cuInit: no CUDA-capable device is detected "
                "(100)"});
}

// Each GPU's memory bandwidth against the median of the job's GPUs of its
// name: only the slow one of its kind is named; another kind, and a kind of
// one GPU, are not compared.
TEST(Health, AGpuSlowerThanTheOthersOfItsNameIsNamed) {
  const auto node = [](const std::vector<std::pair<std::string, std::string>>& gpus) {
    h::Facts f;
    f["cuda"] = "loaded";
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      const std::string k = "cuda." + std::to_string(i) + ".";
      f[k + "name"] = gpus[i].first;
      f[k + "mem_gbps"] = gpus[i].second;
      f[k + "pci"] = "0000:0" + std::to_string(i) + ":00.0";
    }
    return f;
  };
  const auto a = node({{"H100", "3000.5"}, {"H100", "2900"}});
  const auto b = node({{"H100", "3100"}, {"H100", "900"}});
  const auto c = node({{"A100", "1500"}});
  const auto d = node({{"H100", "n/a"}});
  const auto out = h::judge_gpu_bandwidth({&a, &b, nullptr, &c, &d}, 0.5);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_TRUE(out[0].empty());
  EXPECT_EQ(out[1], std::vector<std::string>{
                        "CUDA device 1 (PCI 0000:01:00.0) reads its memory at 900 GB/s (the "
                        "median of the job's 4 H100 GPUs 2950.25 GB/s; threshold "
                        "gpu_mem_ratio=0.5)"});
  EXPECT_TRUE(out[3].empty());
  EXPECT_TRUE(out[4].empty());
  EXPECT_TRUE(h::judge_gpu_bandwidth({&a, &b}, 0.2)[1].empty());
}

// The GPU test's thresholds are the job's: set under defaults: or on the
// command line.
TEST(Health, TheGpuTestsSizeIsTheJobs) {
  h::Thresholds t;
  EXPECT_EQ(t.gpu_test_mb, 512);
  h::set_threshold(t, "gpu_test_mb=0");
  EXPECT_EQ(t.gpu_test_mb, 0);
  std::string what = "no error";
  try {
    (void)h::node_thresholds({setting("gpu_test_mb", "64", 4, false)}, {});
  } catch (const InputError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("hosts.yaml:4:5: health: 'gpu_test_mb' is the job's, not one host's: every "
                      "node runs the same GPU test"),
            std::string::npos)
      << what;
  EXPECT_EQ(h::node_thresholds({setting("gpu_mem_ratio", "0.3", 2, true)}, {}).gpu_mem_ratio, 0.3);
}
