// Which network the workers use, on real network stacks: tests/testbed/netns.sh
// gives three hosts, each a network namespace with its own eth0 (10.201.X.k)
// and sshd, joined by a bridge to this (the head's) namespace. Each host also
// gets a decoy docker0 bridge with the same 172.17.0.1/16 on every one, as a
// machine with Docker has. Jobs must get node 0's 10.201 address as
// MASTER_ADDR and the store's address, and eth0 as the interface for gloo
// and NCCL; an address of node 0 that the others cannot reach is passed
// over; a node that reaches nothing fails the job before any worker starts.
//
// Needs root (network namespaces) and `ip`; skips and says why without them.
// No traffic leaves the machine: the bed's addresses are its own, and the
// extra network of one test is made unreachable in every namespace, the
// head's included (removed in teardown by netns.sh stop).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "support.h"

using namespace dltest;
namespace fs = std::filesystem;

namespace {

const std::string kNetns = std::string(SOURCE_DIR) + "/tests/testbed/netns.sh";
const std::string kWorker = TEST_WORKER_BIN;
const std::string kPython = "/usr/bin/python3";
constexpr int kNodes = 3;
constexpr int kSlots = 2;

class Network : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_ = "needs root: the multi-host test bed is network namespaces";
      return;
    }
    if (run({"sh", "-c", "command -v ip"}, 10).exit_code != 0) {
      skip_ = "needs `ip` (iproute2) for the network-namespace test bed";
      return;
    }
    // A bed left by a run that never reached its tear-down (same naming as
    // the fault matrix's: whichever suite starts next removes it).
    remove_stale_beds("dlaunch-netns-", kNetns);
    dir_ = (fs::temp_directory_path() / ("dlaunch-netns-" + std::to_string(::getpid()))).string();
    auto r = run(
        {kNetns, "start", dir_, std::to_string(kNodes), std::to_string(kSlots), DLAUNCH_AGENT_BIN},
        60);
    if (r.exit_code != 0) {
      skip_ =
          "cannot start the netns test bed (exit " + std::to_string(r.exit_code) + "): " + r.err;
      return;
    }
    std::istringstream nodes(slurp(dir_ + "/nodes"));
    int k;
    std::string ns, addr, veth;
    while (nodes >> k >> ns >> addr >> veth) {
      namespaces_.push_back(ns);
      addrs_.push_back(addr);
    }
    if (static_cast<int>(addrs_.size()) != kNodes) {
      skip_ = "the netns test bed did not list its hosts";
      return;
    }
    // 10.201.X.k: X is the bed's own, so the extra network is 10.250.X.0/24.
    bed_index_ = addrs_[0].substr(7, addrs_[0].rfind('.') - 7);
    for (int i = 0; i < kNodes; ++i) {
      for (const auto& cmd : {"link add docker0 type bridge", "addr add 172.17.0.1/16 dev docker0",
                              "link set docker0 up"}) {
        auto d = ip(i, cmd);
        if (d.exit_code != 0) {
          skip_ = "cannot add the decoy docker0: " + d.err;
          return;
        }
      }
    }
  }
  static void TearDownTestSuite() {
    if (dir_.empty()) return;
    run({kNetns, "stop", dir_}, 60);
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  // Whatever a test changed in a host's network, undone (last first) even
  // when the test failed half-way.
  void TearDown() override {
    while (!undo_.empty()) {
      const auto [k, args] = undo_.back();
      undo_.pop_back();
      ip(k, args);
    }
  }
  // `ip -n NS ARGS` on host k now, and `undo` there at the end of the test.
  RunResult change(int k, const std::string& args, const std::string& undo) {
    undo_.emplace_back(k, undo);
    return ip(k, args);
  }
  std::vector<std::pair<int, std::string>> undo_;

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    for (const char* v : {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}) {
      if (std::getenv(v) != nullptr) GTEST_SKIP() << v << " is set here and would be forwarded";
    }
  }

  // `ip -n NS ARGS...` in host k's namespace.
  static RunResult ip(int k, const std::string& args) {
    return run({"sh", "-c", "ip -n " + namespaces_.at(static_cast<std::size_t>(k)) + " " + args},
               30);
  }
  // A route in the head's namespace, removed by netns.sh stop whatever happens.
  static void root_route(const std::string& prefix) {
    std::ofstream(dir_ + "/netns.state", std::ios::app) << "route " << prefix << "\n";
    ASSERT_EQ(run({"ip", "route", "replace", "unreachable", prefix}, 30).exit_code, 0);
  }

  // dlaunch ARGS... run in host k's namespace (a per-node launcher there).
  static std::vector<std::string> dlaunch_on(int k, const std::vector<std::string>& args) {
    std::vector<std::string> a = {"ip", "netns", "exec",
                                  namespaces_.at(static_cast<std::size_t>(k))};
    const auto d = dlaunch_cmd(args);
    a.insert(a.end(), d.begin(), d.end());
    return a;
  }
  static std::vector<std::string> job(std::vector<std::string> args) {
    // The bed's ssh config names its key and known_hosts (dlaunch, like ssh,
    // takes ~ from the passwd entry, not $HOME).
    args.insert(args.begin(), {"-F", dir_ + "/ssh_config", "-H", dir_ + "/hosts.yaml"});
    return dlaunch_cmd(args);
  }
  static std::vector<std::string> env(std::vector<std::string> more = {}) {
    more.emplace_back("SSH_AUTH_SOCK=");
    return more;
  }
  static const std::string& addr(int k) { return addrs_.at(static_cast<std::size_t>(k)); }

  static std::string skip_;
  static std::string dir_;
  static std::string bed_index_;
  static std::vector<std::string> namespaces_;
  static std::vector<std::string> addrs_;
};

std::string Network::skip_;
std::string Network::dir_;
std::string Network::bed_index_;
std::vector<std::string> Network::namespaces_;
std::vector<std::string> Network::addrs_;

const std::string kShowNet =
    "echo $MASTER_ADDR $DLAUNCH_STORE_ADDR $GLOO_SOCKET_IFNAME $NCCL_SOCKET_IFNAME";

// Every rank's line of `kShowNet`, by rank, without the "[r] " prefix.
std::map<int, std::string> lines_by_rank(const std::string& out) {
  std::map<int, std::string> by_rank;
  std::regex line(R"(^\[(\d+)\] (.*)$)");
  for (const auto& l : lines_of(out)) {
    std::smatch m;
    if (std::regex_match(l, m, line)) by_rank[std::stoi(m[1])] = m[2];
  }
  return by_rank;
}

}  // namespace

TEST_F(Network, MasterAddrIsNodeZerosRealAddressAndWorkersUseTheirEth0) {
  auto r = run(job({"sh", "-c", kShowNet}), 60, env({"DLAUNCH_DEBUG=net"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_by_rank(r.out);
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(kNodes * kSlots)) << r.out;
  for (const auto& [rank, line] : lines) {
    EXPECT_EQ(line, addr(0) + " " + addr(0) + " eth0 =eth0") << "rank " << rank;
  }
  // The decoy was a candidate, after eth0's address, and said to be a bridge.
  EXPECT_NE(r.err.find("net: node 0 (" + addr(0) + ") addresses to try, in order: " + addr(0) +
                       " (eth0), 172.17.0.1 (docker0, container bridge)"),
            std::string::npos)
      << r.err;
  for (int k : {1, 2}) {
    EXPECT_NE(r.err.find("net: node " + std::to_string(k) + " (" + addr(k) + "): " + addr(0) +
                         " reached via eth0; 172.17.0.1 not reached (Connection refused)"),
              std::string::npos)
        << r.err;
  }
  EXPECT_NE(r.err.find("net: MASTER_ADDR=" + addr(0) + " (eth0 on node 0), reached by every node"),
            std::string::npos)
      << r.err;
}

TEST_F(Network, TheStoreAndTheMasterPortWorkAtTheChosenAddress) {
  // Ranks of nodes 1 and 2 reach the store over TCP at the chosen address.
  auto r = run(job({kWorker, "store-exchange"}), 60, env());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(lines_of(r.out).size(), static_cast<std::size_t>(kNodes * kSlots)) << r.out;
  // Node 0 listened on MASTER_PORT for the test connections until Start:
  // rank 0 can bind it all the same.
  r = run(job({kWorker, "bind-master-port"}), 60, env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] bound\n");
}

TEST_F(Network, AnAddressTheOthersCannotReachIsPassedOver) {
  // Node 0 gets a second network that nobody else has a route to. It is made
  // to come first in the system's order (and so in the order tried): eth0
  // leaves the namespace while extra0 takes its place, and comes back after.
  const std::string net = "10.250." + bed_index_;
  root_route(net + ".0/24");
  for (int k : {1, 2}) {
    ASSERT_EQ(
        change(k, "route add unreachable " + net + ".0/24", "route del " + net + ".0/24").exit_code,
        0);
  }
  const std::string park = namespaces_[0] + "-park";
  ASSERT_EQ(run({"ip", "netns", "add", park}, 30).exit_code, 0);
  undo_.emplace_back(0, "link del extra0");
  for (const auto& cmd : std::vector<std::string>{
           "link set eth0 netns " + park, "link add extra0 index 2 type bridge",
           "addr add " + net + ".1/24 dev extra0", "link set extra0 up"}) {
    auto d = ip(0, cmd);
    ASSERT_EQ(d.exit_code, 0) << cmd << ": " << d.err;
  }
  auto back = run({"sh", "-c",
                   "ip -n " + park + " link set eth0 netns " + namespaces_[0] + " && ip -n " +
                       namespaces_[0] + " addr add " + addr(0) + "/24 dev eth0 && ip -n " +
                       namespaces_[0] + " link set eth0 up"},
                  30);
  run({"ip", "netns", "del", park}, 30);
  ASSERT_EQ(back.exit_code, 0) << back.err;

  auto r = run(job({"sh", "-c", kShowNet}), 60, env({"DLAUNCH_DEBUG=net"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const auto& [rank, line] : lines_by_rank(r.out)) {
    EXPECT_EQ(line, addr(0) + " " + addr(0) + " eth0 =eth0") << "rank " << rank;
  }
  EXPECT_NE(
      r.err.find("addresses to try, in order: " + net + ".1 (extra0), " + addr(0) + " (eth0)"),
      std::string::npos)
      << r.err;
  for (int k : {1, 2}) {
    EXPECT_NE(r.err.find("net: node " + std::to_string(k) + " (" + addr(k) + "): " + net +
                         ".1 not reached (No route to host); " + addr(0) + " reached via eth0"),
              std::string::npos)
        << r.err;
  }
}

TEST_F(Network, IPv6IsChosenWhereOnlyIPv6Reaches) {
  // Every host gets an IPv6 address on eth0 (a private fd00::/8 one, on the
  // bed's bridge only); nodes 1 and 2 lose their IPv4 route to node 0.
  const std::string net6 = "fd0a:" + bed_index_ + "::";
  for (int k = 0; k < kNodes; ++k) {
    const std::string a = net6 + std::to_string(k + 2) + "/64 dev eth0";
    ASSERT_EQ(change(k, "addr add " + a + " nodad", "addr del " + a).exit_code, 0);
  }
  for (int k : {1, 2}) {
    ASSERT_EQ(change(k, "route add unreachable " + addr(0) + "/32", "route del " + addr(0) + "/32")
                  .exit_code,
              0);
  }
  const std::string node0 = net6 + "2";
  auto r = run(job({"sh", "-c", kShowNet}), 60, env({"DLAUNCH_DEBUG=net"}));
  // The store over IPv6 from nodes 1 and 2 (node 0's store listens on both).
  auto store = run(job({kWorker, "store-exchange"}), 60, env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_by_rank(r.out);
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(kNodes * kSlots)) << r.out;
  for (const auto& [rank, line] : lines) {
    EXPECT_EQ(line, node0 + " " + node0 + " eth0 =eth0") << "rank " << rank;
  }
  EXPECT_NE(r.err.find("net: node 1 (" + addr(1) + "): " + addr(0) +
                       " not reached (No route to host); " + node0 + " reached via eth0"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(store.exit_code, 0) << store.out << store.err;
}

TEST_F(Network, AnInterfaceTheUserSetIsKept) {
  auto r = run(job({"-x", "GLOO_SOCKET_IFNAME=lo", "sh", "-c", kShowNet}), 60, env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_by_rank(r.out);
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(kNodes * kSlots)) << r.out;
  for (const auto& [rank, line] : lines) {
    EXPECT_EQ(line, addr(0) + " " + addr(0) + " lo =eth0") << "rank " << rank;
  }
}

TEST_F(Network, AGivenMasterAddrIsNotTestedAndStillGivesTheInterface) {
  auto r =
      run(job({"--master-addr", addr(0), "sh", "-c", kShowNet}), 60, env({"DLAUNCH_DEBUG=net"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const auto& [rank, line] : lines_by_rank(r.out)) {
    EXPECT_EQ(line, addr(0) + " " + addr(0) + " eth0 =eth0") << "rank " << rank;
  }
  EXPECT_NE(r.err.find("net: MASTER_ADDR=" + addr(0) + " is given (--master-addr): not tested"),
            std::string::npos)
      << r.err;
}

TEST_F(Network, ANodeThatReachesNothingFailsTheJobBeforeAnyWorkerStarts) {
  // Node 2 can still be reached by the head (SSH), but has no way to node 0.
  ASSERT_EQ(change(2, "route add unreachable " + addr(0) + "/32", "route del " + addr(0) + "/32")
                .exit_code,
            0);
  const auto marker = fs::temp_directory_path() / ("dlaunch-net-ran-" + std::to_string(::getpid()));
  fs::remove_all(marker);
  const auto id = unique_job_id("unreach");
  auto r = run(job({"--job-id", id, "sh", "-c", "touch " + marker.string() + "-$RANK"}), 60, env());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  std::smatch m;
  EXPECT_TRUE(std::regex_search(
      r.err, m,
      std::regex("dlaunch: job " + id + " could not start: node 2 \\(" + addr(2) +
                 "\\) cannot reach node 0 \\(" + addr(0) +
                 "\\) at any of its addresses \\(TCP port \\d+\\): " + addr(0) +
                 " \\(No route to host\\), 172\\.17\\.0\\.1 \\(Connection refused\\), "
                 "127\\.0\\.0\\.1 \\(Connection refused\\)")))
      << r.err;
  // One root cause: nodes 0 and 1 are fine and not named.
  EXPECT_EQ(r.err.find("node 1 (" + addr(1) + ") cannot reach"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("also:"), std::string::npos) << r.err;
  for (int rank = 0; rank < kNodes * kSlots; ++rank) {
    EXPECT_FALSE(fs::exists(marker.string() + "-" + std::to_string(rank))) << "rank " << rank;
  }
  EXPECT_EQ(wait_job_gone(id, 10), std::vector<pid_t>{});
}

TEST_F(Network, CheckNamesANodeThatCannotReachNodeZero) {
  auto ok = run(job({"--check", "true"}), 90, env());
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("REACH"), std::string::npos) << ok.out;
  EXPECT_NE(
      ok.out.find("network: every node reaches node 0 (" + addr(0) + ") at " + addr(0) + " (eth0)"),
      std::string::npos)
      << ok.out;

  ASSERT_EQ(change(1, "route add unreachable " + addr(0) + "/32", "route del " + addr(0) + "/32")
                .exit_code,
            0);
  auto bad = run(job({"--check", "true"}), 90, env());
  EXPECT_EQ(bad.exit_code, 1) << bad.out << bad.err;
  EXPECT_NE(bad.out.find("node 1 (" + addr(1) + "): cannot reach node 0 (" + addr(0) +
                         ") at any of its addresses (TCP port "),
            std::string::npos)
      << bad.out;
  EXPECT_NE(bad.out.find(addr(0) + " (No route to host), 172.17.0.1 (Connection refused)"),
            std::string::npos)
      << bad.out;
  EXPECT_NE(bad.out.find("2 of 3 node(s) passed"), std::string::npos) << bad.out;
}

// Issue 33: --check streams between the nodes (a ring, then the ring the
// other way) and names the node whose link is slow, here one whose eth0
// sends through a 50 Mbit/s token bucket (tc tbf), with its figure against
// the median stream.
TEST_F(Network, CheckNamesTheNodeWhoseLinkIsSlow) {
  auto ok = run(job({"--check", "true"}), 90, env());
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("network test: 6 stream(s) in 2 round(s), median "), std::string::npos)
      << ok.out;
  EXPECT_NE(ok.out.find("NET_OUT"), std::string::npos) << ok.out;

  const std::string ns = namespaces_.at(2);
  struct Unthrottle {
    std::string ns;
    ~Unthrottle() { run({"tc", "-n", ns, "qdisc", "del", "dev", "eth0", "root"}, 30); }
  } unthrottle{ns};
  const auto tc = run({"tc", "-n", ns, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate",
                       "50mbit", "burst", "32kbit", "latency", "100ms"},
                      30);
  if (tc.exit_code != 0) GTEST_SKIP() << "cannot throttle a link with tc: " << tc.err;
  auto slow = run(job({"--check", "true"}), 90, env());
  EXPECT_EQ(slow.exit_code, 1) << slow.out << slow.err;
  EXPECT_NE(slow.out.find("node 2 (" + addr(2) + "): sends at 0.0"), std::string::npos) << slow.out;
  EXPECT_NE(slow.out.find("Gb/s (the median stream "), std::string::npos) << slow.out;
  // Its receiving side, and the other nodes, are fine.
  EXPECT_EQ(slow.out.find("receives at"), std::string::npos) << slow.out;
  EXPECT_NE(slow.out.find("2 of 3 node(s) passed"), std::string::npos) << slow.out;

  // --check=quick leaves the network test out (the reach test stays): the
  // slow link goes unseen, and says so.
  auto quick = run(job({"--check=quick", "true"}), 90, env());
  EXPECT_EQ(quick.exit_code, 0) << quick.out << quick.err;
  EXPECT_NE(quick.out.find("network: every node reaches node 0"), std::string::npos) << quick.out;
  EXPECT_NE(quick.out.find("network test between nodes: not run (a quick check"), std::string::npos)
      << quick.out;
  EXPECT_NE(quick.out.find("3 of 3 node(s) passed"), std::string::npos) << quick.out;
}

TEST_F(Network, UnderMpiOpenMpiIsToldTheInterfaceToo) {
  auto r = run(job({"--mpi", "sh", "-c",
                    "echo $OMPI_MCA_btl_tcp_if_include $OMPI_MCA_oob_tcp_if_include "
                    "$GLOO_SOCKET_IFNAME"}),
               60, env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_by_rank(r.out);
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(kNodes * kSlots)) << r.out;
  for (const auto& [rank, line] : lines) EXPECT_EQ(line, "eth0 eth0 eth0") << "rank " << rank;
  // And an Open MPI program runs across the three hosts with them.
  r = run(job({"--mpi", MPI_HELLO_BIN}), 120, env());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const auto& [rank, line] : lines_by_rank(r.out)) {
    EXPECT_NE(line.find("allreduce(rank)=15"), std::string::npos)
        << "rank " << rank << ": " << line;
  }
}

TEST_F(Network, TrainPyRunsAcrossTheThreeNodes) {
  if (run({kPython, "-c", "import torch, torch.distributed"}, 60).exit_code != 0)
    GTEST_SKIP() << "no python3-torch (`" << kPython << " -c 'import torch'` failed)";
  auto r = run(job({kPython, std::string(SOURCE_DIR) + "/examples/train.py"}), 110, env());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("over "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("on 6 ranks (gloo, cpu)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[0] parameters identical on all 6 ranks"), std::string::npos) << r.out;
}

// Per-node mode across real network stacks (issue 18): a launcher in each of
// two hosts' namespaces, the rendezvous hosted by the first at its address.
// The second host's link goes down: its connection to the store neither
// closes nor answers, so it is found by its silent heartbeat (not by its
// closed connection, as a killed launcher is); once the link is back, the
// cut-off launcher finds the store gone, stops its rank and exits too.
TEST_F(Network, PerNodeLauncherCutOffIsLostAtTheHeartbeatTimeout) {
  const std::string world = std::string(SOURCE_DIR) + "/tests/integration/pernode_world.py";
  const std::vector<std::string> env = {"DLAUNCH_RDZV_SECRET=netns-pernode-secret"};
  const auto job_id = unique_job_id("net-pernode");
  auto launcher = [&](int k) {
    return dlaunch_on(k, {"--nnodes",
                          "2",
                          "--nproc-per-node",
                          "1",
                          "--node-rank",
                          std::to_string(k),
                          "--master-addr",
                          addrs_[0],
                          "--master-port",
                          "29631",
                          "--rdzv-id",
                          job_id,
                          "--heartbeat-timeout",
                          "3",
                          "--kill-grace",
                          "2",
                          "--rdzv-conf",
                          "read_timeout=10",
                          kPython,
                          world,
                          "--sleep",
                          "60"});
  };
  Process host(launcher(0), env);
  Process cut(launcher(1), env);
  const auto said_sum = [](const std::string& out) {
    return out.find("sum 3") != std::string::npos;
  };
  ASSERT_TRUE(host.wait_for_output(said_sum, 30));
  ASSERT_TRUE(cut.wait_for_output(said_sum, 30));
  const auto at_cut = std::chrono::steady_clock::now();
  ASSERT_EQ(change(1, "link set eth0 down", "link set eth0 up").exit_code, 0);
  auto r = host.finish(30);
  const double after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - at_cut).count();
  EXPECT_EQ(r.exit_code, 1) << r.err;
  // The heartbeat timeout (3 s), the 1 s the watch may take, the kill grace (2 s).
  EXPECT_LT(after, 12) << r.err;
  EXPECT_NE(r.err.find("node 1 ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is lost: its launcher sent no heartbeat"), std::string::npos) << r.err;
  ip(1, "link set eth0 up");
  const auto at_up = std::chrono::steady_clock::now();
  auto c = cut.finish(40);
  const double after_up =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - at_up).count();
  std::printf(
      "network_test: the host's launcher ended %.1f s after the link went down; the "
      "cut-off one %.1f s after it came back\n",
      after, after_up);
  EXPECT_NE(c.exit_code, 0) << c.err;
  // It learns the job's end either way: the store gone, or (the host's
  // kernel still sending what the host wrote before it ended) the failure
  // the host published, itself lost. Within seconds, not a connect timeout.
  EXPECT_TRUE(c.err.find("lost the rendezvous store") != std::string::npos ||
              c.err.find("node 1 (") != std::string::npos)
      << c.err;
  EXPECT_LT(after_up, 20) << c.err;
  EXPECT_TRUE(wait_job_gone(job_id, 10).empty());
}

// Per-node mode under --mpi on two hosts (two namespaces, each with its
// decoy bridge): one launcher on each, a static rendezvous at the first
// host's address; an Open MPI program's fences meet in the rendezvous store
// and its ranks reach each other over the hosts' eth0 (the agents tell Open
// MPI the interface, as in the head-node mode).
TEST_F(Network, PerNodeMpiMakesOneWorldAcrossTwoHosts) {
  const std::vector<std::string> env = {"DLAUNCH_RDZV_SECRET=netns-pernode-mpi-secret"};
  const auto job_id = unique_job_id("net-pernode-mpi");
  auto launcher = [&](int k, const std::string& id, std::vector<std::string> prog) {
    std::vector<std::string> args = {
        "--nnodes",      "2",       "--nproc-per-node", "2",     "--node-rank", std::to_string(k),
        "--master-addr", addrs_[0], "--master-port",    "29633", "--rdzv-id",   id,
        "--mpi"};
    args.insert(args.end(), prog.begin(), prog.end());
    return dlaunch_on(k, args);
  };
  // What the ranks are told: the interface toward MASTER_ADDR, not docker0.
  {
    const std::vector<std::string> show = {
        "sh", "-c", "echo if $GLOO_SOCKET_IFNAME $OMPI_MCA_btl_tcp_if_include"};
    Process first(launcher(0, job_id + "-env", show), env);
    Process second(launcher(1, job_id + "-env", show), env);
    const auto a = first.finish(60);
    const auto b = second.finish(60);
    ASSERT_EQ(a.exit_code, 0) << a.err;
    ASSERT_EQ(b.exit_code, 0) << b.err;
    int told = 0;
    for (const auto& line : lines_of(a.out + b.out))
      told += static_cast<int>(line.find("] if eth0 eth0") != std::string::npos);
    EXPECT_EQ(told, 4) << a.out << b.out;
  }
  Process first(launcher(0, job_id, {MPI_HELLO_BIN}), env);
  Process second(launcher(1, job_id, {MPI_HELLO_BIN}), env);
  const auto a = first.finish(90);
  const auto b = second.finish(90);
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  const std::string out = a.out + b.out;
  for (int k = 0; k < 4; ++k) {
    EXPECT_NE(out.find(std::to_string(k) + "] mpi rank " + std::to_string(k) +
                       "/4, RANK=" + std::to_string(k) + " WORLD_SIZE=4, allreduce(rank)=6"),
              std::string::npos)
        << out;
  }
  EXPECT_TRUE(wait_job_gone(job_id, 10).empty());
}

// Per-node, elastic, three hosts: the launcher hosting the rendezvous (on
// the first host, at its address) is SIGKILLed. The two on the other hosts
// lose the store at once; the one that was node 1 hosts a new store at its
// own address (the one it published when it joined: its route's source
// toward the endpoint), the other finds it there, and they restart as a
// world of 4 across their two hosts, MASTER_ADDR the new node 0's address.
TEST_F(Network, PerNodeRendezvousHostLostASurvivorOnAnotherHostTakesOver) {
  const std::string world = std::string(SOURCE_DIR) + "/tests/integration/pernode_world.py";
  const std::vector<std::string> env = {"DLAUNCH_RDZV_SECRET=netns-successor-secret"};
  const auto job_id = unique_job_id("net-successor");
  auto launcher = [&](int k) {
    return dlaunch_on(
        k, {"--nnodes",
            "2:3",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "1",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            addrs_[0] + ":29635",
            "--rdzv-id",
            job_id,
            "--rdzv-conf",
            "last_call_timeout=1,close_timeout=15",
            "--heartbeat-timeout",
            "3",
            "--kill-grace",
            "2",
            "sh",
            "-c",
            "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then exec " + std::string(kPython) + " " +
                world + " --sleep 60; fi; echo \"master $MASTER_ADDR\"; exec " +
                std::string(kPython) + " " + world});
  };
  Process host(launcher(0), env);
  (void)host.wait_for_stderr([](const std::string&) { return false; }, 0.5);
  Process second(launcher(1), env);
  Process third(launcher(2), env);
  const auto six = [](const std::string& out) { return out.find("sum 21") != std::string::npos; };
  ASSERT_TRUE(second.wait_for_output(six, 40)) << "the world of 6 did not form";
  ASSERT_TRUE(third.wait_for_output(six, 40));
  host.signal(SIGKILL);
  const auto b = second.finish(60);
  const auto c = third.finish(60);
  host.finish(5);
  int hosting = 0;
  for (const auto* r : {&b, &c}) {
    EXPECT_EQ(r->exit_code, 0) << r->out << r->err;
    EXPECT_NE(r->err.find("which hosted the rendezvous, is lost; node 1 ("), std::string::npos)
        << r->err;
    EXPECT_NE(r->out.find("restart 1 sum 10"), std::string::npos) << r->out;
    // The new store and MASTER_ADDR are on one of the survivors' hosts.
    const bool on_1 = r->err.find("hosts it now at " + addrs_[1]) != std::string::npos;
    const bool on_2 = r->err.find("hosts it now at " + addrs_[2]) != std::string::npos;
    EXPECT_TRUE(on_1 || on_2) << r->err;
    EXPECT_NE(r->out.find("master " + (on_1 ? addrs_[1] : addrs_[2])), std::string::npos) << r->out;
    hosting +=
        static_cast<int>(r->err.find("hosting the rendezvous, restart 1") != std::string::npos);
  }
  EXPECT_EQ(hosting, 1);
  EXPECT_TRUE(wait_job_gone(job_id, 10).empty());
}

// Without a bed: what --dry-run says about MASTER_ADDR.
TEST(NetworkDryRun, SaysTheAddressIsChosenAtStartUnlessGiven) {
  const auto hosts =
      temp_file("defaults: {transport: ssh}\nhosts:\n  - 10.9.0.1\n  - 10.9.0.2\n", ".yaml");
  auto r = run(dlaunch_cmd({"-H", hosts, "--dry-run", "true"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("MASTER_ADDR=<chosen at start: node 0's first address every node reaches>"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("GLOO_SOCKET_IFNAME"), std::string::npos) << r.out;
  r = run(dlaunch_cmd({"-H", hosts, "--master-addr", "10.9.0.7", "--dry-run", "true"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("MASTER_ADDR=10.9.0.7 MASTER_PORT"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("<chosen at start"), std::string::npos) << r.out;
}
