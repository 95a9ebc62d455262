// The fault matrix: each way a distributed job breaks, injected for real, and
// what dlaunch must do about it: its exit code, how long from the fault until
// dlaunch has exited and every node is clean, and that no process of the job
// is left anywhere (workers, their children and grandchildren, agents, guards).
//
// Faults about the network run on tests/testbed/netns.sh: three hosts, each
// a network namespace with its own stack, address and sshd on port 22, joined
// to this (the head's) namespace by veth pairs on a bridge. It needs root;
// without it those tests skip, and the faults that are not about the network
// run on two logical local nodes (hostfiles/localhost.yaml) instead. All
// namespaces share the PID namespace, so the test sees every process.
//
// Each test prints one line per fault for the table in docs:
//   FAULT-MATRIX|<n>|<fault>|exit=<code>|seconds=<t>|left=<count>|bed=<netns|local>[|...]
// seconds: from the fault until dlaunch has exited and no process of the job
// is left on any node; left: processes of the job still there at the end.
#include <netinet/in.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "dlaunch/process.h"
#include "support.h"

using namespace dltest;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kWorker = TEST_WORKER_BIN;
const std::string kNetns = std::string(SOURCE_DIR) + "/tests/testbed/netns.sh";
constexpr int kBedNodes = 3;
constexpr int kBedSlots = 2;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string comm_of(pid_t p) {
  auto s = slurp("/proc/" + std::to_string(p) + "/comm");
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// State and parent from /proc/PID/stat ('?' and -1 when gone).
std::pair<char, pid_t> stat_of(pid_t p) {
  const auto s = slurp("/proc/" + std::to_string(p) + "/stat");
  const auto close = s.rfind(')');
  if (close == std::string::npos || close + 4 >= s.size()) return {'?', -1};
  std::istringstream rest(s.substr(close + 2));
  char state = '?';
  pid_t ppid = -1;
  rest >> state >> ppid;
  return {state, ppid};
}

bool alive(pid_t p) {
  const char st = stat_of(p).first;
  return st != '?' && st != 'Z' && st != 'X';
}

bool has_env(pid_t p, const std::string& entry) {
  const auto env = slurp("/proc/" + std::to_string(p) + "/environ");
  std::size_t at = 0;
  while (at < env.size()) {
    const auto end = env.find('\0', at);
    if (env.compare(at, (end == std::string::npos ? env.size() : end) - at, entry) == 0)
      return true;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return false;
}

// A field of /proc/PID/status in KiB (VmRSS, VmHWM); -1 when gone.
long status_kib(pid_t p, const std::string& field) {
  std::istringstream in(slurp("/proc/" + std::to_string(p) + "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

std::vector<pid_t> all_pids() {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const auto name = e.path().filename().string();
    if (!name.empty() && std::all_of(name.begin(), name.end(), ::isdigit))
      out.push_back(std::stoi(name));
  }
  return out;
}

void print_row(int n, const std::string& fault, int exit_code, double seconds, std::size_t left,
               bool netns, const std::string& extra = "") {
  std::printf("FAULT-MATRIX|%d|%s|exit=%d|seconds=%.2f|left=%zu|bed=%s%s\n", n, fault.c_str(),
              exit_code, seconds, left, netns ? "netns" : "local", extra.c_str());
  std::fflush(stdout);
}

// Keeps reading a process's output for a while (so its pipes never fill), and
// calls sample, if given, every time round.
void pump_for(Process& p, double s, const std::function<void()>& sample = {}) {
  p.wait_for_output(
      [&](const std::string&) {
        if (sample) sample();
        return false;
      },
      s);
}

class FaultMatrix : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      why_no_bed_ = new std::string("needs root: the multi-host test bed is network namespaces");
      return;
    }
    // A bed left by a run that never reached its tear-down (killed by a
    // timeout, interrupted): its namespaces, bridge and sshd go first.
    remove_stale_beds("dlaunch-netns-", kNetns);
    dir_ = new std::string(
        (fs::temp_directory_path() / ("dlaunch-netns-" + std::to_string(::getpid()))).string());
    // Sessions with the machine's cgroups, as on a real node: each agent
    // puts its ranks in a job cgroup, which the clean-up then relies on.
    auto r = run({kNetns, "start", *dir_, std::to_string(kBedNodes), std::to_string(kBedSlots),
                  DLAUNCH_AGENT_BIN},
                 60, {"TB_NETNS_HOST_SYS=1"});
    if (r.exit_code != 0) {
      why_no_bed_ = new std::string("cannot start the netns test bed (exit " +
                                    std::to_string(r.exit_code) + "): " + r.err);
      return;
    }
    std::istringstream nodes(slurp(*dir_ + "/nodes"));
    int k;
    std::string ns, addr, veth;
    while (nodes >> k >> ns >> addr >> veth) {
      struct stat st {};
      if (::stat(("/run/netns/" + ns).c_str(), &st) == 0) ns_inodes_.insert(st.st_ino);
      addrs_.push_back(addr);
      ns_inodes_by_node_.push_back(st.st_ino);
    }
    if (static_cast<int>(addrs_.size()) != kBedNodes) {
      why_no_bed_ = new std::string("the netns test bed did not list its hosts");
      return;
    }
    bed_ = true;
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) {
      run({kNetns, "stop", *dir_}, 60);
      std::error_code ignored;  // a daemon may still be removing its own files
      fs::remove_all(*dir_, ignored);
    }
  }
  void TearDown() override {
    if (!bed_) return;
    // Whatever a test did to a host's network, undo it for the next one.
    for (int k = 0; k < kBedNodes; ++k) {
      bed_exec(k, {"tc", "qdisc", "del", "dev", "eth0", "root"});
      bed_exec(k, {"ip", "link", "set", "eth0", "up"});
    }
  }

  static bool bed() { return bed_; }
  static std::string bed_skip_reason() {
    return why_no_bed_ != nullptr ? *why_no_bed_ : "no test bed";
  }
  static const std::string& addr(int k) { return addrs_.at(static_cast<std::size_t>(k)); }
  static RunResult bed_exec(int k, std::vector<std::string> cmd) {
    cmd.insert(cmd.begin(), {kNetns, "exec", *dir_, std::to_string(k)});
    return run(cmd, 30);
  }

  // dlaunch on the test bed, or on local logical nodes without one.
  static std::vector<std::string> job_cmd(const std::string& job, std::vector<std::string> args,
                                          bool local = false) {
    std::vector<std::string> head = {"-H", bed() && !local ? *dir_ + "/hosts.yaml" : kLocalhost,
                                     "--job-id", job};
    // The bed's ssh config names its key and known_hosts (dlaunch, like ssh,
    // takes ~ from the passwd entry, not $HOME).
    if (bed() && !local) head.insert(head.begin(), {"-F", *dir_ + "/ssh_config"});
    args.insert(args.begin(), head.begin(), head.end());
    return dlaunch_cmd(args);
  }
  // The environment of dlaunch: no ssh-agent of the machine's, and a tag that
  // local agents, guards and workers inherit so the test can find every one
  // of them.
  static std::vector<std::string> job_env(const std::string& job) {
    std::vector<std::string> e = {"DLTEST_FAULT_TAG=" + job};
    if (bed()) e.emplace_back("SSH_AUTH_SOCK=");
    return e;
  }
  static int world(bool local = false) { return bed() && !local ? kBedNodes * kBedSlots : 4; }
  static std::string node_name(int k) { return bed() ? addr(k) : "node" + std::to_string(k); }

  // Processes in the bed's namespaces other than its sshd (agents, guards,
  // workers and theirs); node -1: every host.
  static std::vector<pid_t> bed_processes(int node = -1) {
    std::vector<pid_t> out;
    if (!bed()) return out;
    for (pid_t p : all_pids()) {
      struct stat st {};
      if (::stat(("/proc/" + std::to_string(p) + "/ns/net").c_str(), &st) != 0) continue;
      const bool ours = node < 0
                            ? ns_inodes_.count(st.st_ino) > 0
                            : ns_inodes_by_node_.at(static_cast<std::size_t>(node)) == st.st_ino;
      if (!ours || !alive(p)) continue;
      if (comm_of(p) == "sshd") continue;  // the bed's sshd and its sessions
      out.push_back(p);
    }
    return out;
  }

  // Everything of the job still alive: processes with its job id (workers and
  // descendants), with its tag (local agents and guards), and, unless
  // only_job, anything in the bed's namespaces.
  static std::set<pid_t> leftovers(const std::string& job, bool only_job = false) {
    std::set<pid_t> out;
    for (pid_t p : job_processes(job)) out.insert(p);
    for (pid_t p : dlaunch::pids_with_env_entry("DLTEST_FAULT_TAG=" + job)) {
      if (alive(p)) out.insert(p);
    }
    if (!only_job) {
      for (pid_t p : bed_processes()) out.insert(p);
    }
    return out;
  }
  // Polls leftovers until none or timeout; returns what is left and when it
  // was first seen empty (or the timeout).
  static std::pair<std::set<pid_t>, Clock::time_point> wait_clean(const std::string& job,
                                                                  double timeout_s,
                                                                  bool only_job = false) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    auto left = leftovers(job, only_job);
    while (!left.empty() && Clock::now() < deadline) {
      ::usleep(10 * 1000);
      left = leftovers(job, only_job);
    }
    return {left, Clock::now()};
  }
  static std::string describe(const std::set<pid_t>& pids) {
    std::string s;
    for (pid_t p : pids) s += std::to_string(p) + " " + comm_of(p) + "; ";
    return s;
  }

  // The worker process of a rank: the job's process with RANK=rank whose
  // parent is an agent (its own children carry the same environment).
  static pid_t worker_pid(const std::string& job, int rank) {
    for (pid_t p : job_processes(job)) {
      if (has_env(p, "RANK=" + std::to_string(rank)) &&
          comm_of(stat_of(p).second) == "dlaunch-agent")
        return p;
    }
    return -1;
  }
  // The agent serving host k of the bed (its parent is sshd; the guard's is the agent).
  static pid_t bed_agent(int k) {
    for (pid_t p : bed_processes(k)) {
      if (comm_of(p) == "dlaunch-agent" && comm_of(stat_of(p).second) == "sshd") return p;
    }
    return -1;
  }

  static bool bed_;
  static std::string* why_no_bed_;
  static std::string* dir_;
  static std::vector<std::string> addrs_;
  static std::set<ino_t> ns_inodes_;
  static std::vector<ino_t> ns_inodes_by_node_;
};

bool FaultMatrix::bed_ = false;
std::string* FaultMatrix::why_no_bed_ = nullptr;
std::string* FaultMatrix::dir_ = nullptr;
std::vector<std::string> FaultMatrix::addrs_;
std::set<ino_t> FaultMatrix::ns_inodes_;
std::vector<ino_t> FaultMatrix::ns_inodes_by_node_;

#define REQUIRE_BED() \
  if (!bed()) GTEST_SKIP() << bed_skip_reason()

}  // namespace

// 1. A worker exits non-zero: every rank everywhere stops, dlaunch exits with
// that worker's code, within a second.
TEST_F(FaultMatrix, F01_WorkerExitsNonZero) {
  const auto job = unique_job_id("f01");
  Process p(job_cmd(job, {"--kill-grace", "1", kWorker, "usr1-exit", "7", "60"}), job_env(job));
  ASSERT_TRUE(p.wait_for_lines(world(), 30)) << p.finish(1).err;
  const pid_t w = worker_pid(job, 3);
  ASSERT_GT(w, 0);
  const auto t0 = Clock::now();
  ::kill(w, SIGUSR1);
  auto r = p.finish(30);
  const auto t_exit = Clock::now();
  auto [left, t_clean] = wait_clean(job, 10);
  const double s = seconds_between(t0, std::max(t_exit, t_clean));
  print_row(1, "worker-exits-nonzero", r.exit_code, s, left.size(), bed());
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.err.find("rank 3 exited with code 7"), std::string::npos) << r.err;
  EXPECT_LT(s, 2.0) << r.err;
  EXPECT_TRUE(left.empty()) << describe(left);
}

// 2. A worker killed by a signal (SIGSEGV, SIGKILL): exit 128+signal.
TEST_F(FaultMatrix, F02_WorkerKilledBySignal) {
  for (int sig : {SIGSEGV, SIGKILL}) {
    const auto job = unique_job_id("f02");
    // Under ASan the worker would catch the SIGSEGV itself and exit 1.
    Process p(job_cmd(job, {"--kill-grace", "1", "-x", "ASAN_OPTIONS=handle_segv=0", kWorker,
                            "ready-sleep", "60"}),
              job_env(job));
    ASSERT_TRUE(p.wait_for_lines(world(), 30)) << p.finish(1).err;
    const pid_t w = worker_pid(job, 2);
    ASSERT_GT(w, 0);
    const auto t0 = Clock::now();
    ::kill(w, sig);
    auto r = p.finish(30);
    const auto t_exit = Clock::now();
    auto [left, t_clean] = wait_clean(job, 10);
    const double s = seconds_between(t0, std::max(t_exit, t_clean));
    const std::string name = dlaunch::signal_name(sig);
    print_row(2, "worker-" + name, r.exit_code, s, left.size(), bed());
    EXPECT_EQ(r.exit_code, 128 + sig) << r.err;
    EXPECT_NE(r.err.find("rank 2 was killed by " + name), std::string::npos) << r.err;
    EXPECT_LT(s, 2.0) << r.err;
    EXPECT_TRUE(left.empty()) << describe(left);
  }
}

// 3. A worker hangs (the others finish) and --timeout expires: exit 124, the
// report names the rank still running. The fault time is taken as the first
// worker's output plus the timeout (the timer starts a little earlier).
TEST_F(FaultMatrix, F03_HangingWorkerHitsTheTimeout) {
  const auto job = unique_job_id("f03");
  Process p(job_cmd(job, {"--kill-grace", "1", "--timeout", "2", "sh", "-c",
                          "echo ready $RANK; [ \"$RANK\" != 2 ] || exec sleep 60"}),
            job_env(job));
  ASSERT_TRUE(p.wait_for_lines(1, 30)) << p.finish(1).err;
  const auto t0 = Clock::now() + std::chrono::seconds(2);
  auto r = p.finish(30);
  const auto t_exit = Clock::now();
  auto [left, t_clean] = wait_clean(job, 10);
  const double s = std::max(0.0, seconds_between(t0, std::max(t_exit, t_clean)));
  print_row(3, "worker-hangs-timeout", r.exit_code, s, left.size(), bed());
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(
      r.err.find("--timeout of 2.0 s expired; 1 rank(s) still running: 2 (" + node_name(1) + ")"),
      std::string::npos)
      << r.err;
  EXPECT_LT(s, 2.0) << r.err;
  EXPECT_TRUE(left.empty()) << describe(left);
}

// 4. Every worker has forked a child that ignores SIGTERM; one worker fails.
// The children get SIGKILL after the kill grace, and not much later.
TEST_F(FaultMatrix, F04_ChildIgnoringSigtermIsKilledAfterTheGrace) {
  const auto job = unique_job_id("f04");
  Process p(job_cmd(job, {"--kill-grace", "1", kWorker, "stubborn-child", "60"}), job_env(job));
  ASSERT_TRUE(p.wait_for_lines(world(), 30)) << p.finish(1).err;
  EXPECT_GE(job_processes(job).size(), 2u * static_cast<std::size_t>(world()));
  const pid_t w = worker_pid(job, 0);
  ASSERT_GT(w, 0);
  const auto t0 = Clock::now();
  ::kill(w, SIGUSR1);  // rank 0 exits 3
  auto r = p.finish(30);
  const auto t_exit = Clock::now();
  auto [left, t_clean] = wait_clean(job, 10);
  const double s = seconds_between(t0, std::max(t_exit, t_clean));
  print_row(4, "child-ignores-sigterm", r.exit_code, s, left.size(), bed(), "|grace=1");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_GE(s, 0.9) << "SIGTERM-proof children cannot be gone before the grace";
  EXPECT_LT(s, 1.0 + 2.0) << r.err;
  EXPECT_TRUE(left.empty()) << describe(left);
}

// 5. One node's agent is killed with SIGKILL: its guard takes its workers
// (grandchildren included) down, the head loses the channel, fails the job
// (exit 1) and stops every other node.
TEST_F(FaultMatrix, F05_AgentKilled) {
  REQUIRE_BED();
  const auto job = unique_job_id("f05");
  Process p(job_cmd(job, {"--kill-grace", "1", kWorker, "grandchild", "60"}), job_env(job));
  ASSERT_TRUE(p.wait_for_lines(world(), 30)) << p.finish(1).err;
  const pid_t agent = bed_agent(1);
  ASSERT_GT(agent, 0) << "no agent on host 1 among: " << describe(leftovers(job));
  const auto t0 = Clock::now();
  ::kill(agent, SIGKILL);
  auto r = p.finish(30);
  const auto t_exit = Clock::now();
  auto [left, t_clean] = wait_clean(job, 10);
  const double s = seconds_between(t0, std::max(t_exit, t_clean));
  print_row(5, "agent-sigkill", r.exit_code, s, left.size(), bed());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("lost contact with the agent on node 1 (" + addr(1) + ")"),
            std::string::npos)
      << r.err;
  EXPECT_LT(s, 2.0) << r.err;
  EXPECT_TRUE(left.empty()) << describe(left);
}

// 6. dlaunch itself is killed with SIGKILL: every sshd sees its connection
// close, every agent its channel, and each stops its own workers.
TEST_F(FaultMatrix, F06_DlaunchKilled) {
  REQUIRE_BED();
  const auto job = unique_job_id("f06");
  Process p(job_cmd(job, {"--kill-grace", "1", kWorker, "grandchild", "60"}), job_env(job));
  ASSERT_TRUE(p.wait_for_lines(world(), 30)) << p.finish(1).err;
  EXPECT_GE(job_processes(job).size(), 3u * static_cast<std::size_t>(world()));
  const auto t0 = Clock::now();
  p.signal(SIGKILL);
  auto r = p.finish(30);
  auto [left, t_clean] = wait_clean(job, 10);
  const double s = seconds_between(t0, t_clean);
  print_row(6, "dlaunch-sigkill", r.exit_code, s, left.size(), bed());
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  EXPECT_LT(s, 2.0);
  EXPECT_TRUE(left.empty()) << describe(left);
}

// 7. The SSH connection of one node is cut: its TCP connection is reset from
// the node's side (ss -K, the kernel's socket destroy: a RST to the head).
TEST_F(FaultMatrix, F07_SshConnectionCut) {
  REQUIRE_BED();
  const auto job = unique_job_id("f07");
  Process p(job_cmd(job, {"--kill-grace", "1", kWorker, "grandchild", "60"}), job_env(job));
  ASSERT_TRUE(p.wait_for_lines(world(), 30)) << p.finish(1).err;
  const auto t0 = Clock::now();
  auto cut = bed_exec(1, {"ss", "-K", "-t", "-n", "state", "established", "( sport = :22 )"});
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  ASSERT_NE(cut.out.find(addr(1) + ":22"), std::string::npos) << "nothing was cut:\n" << cut.out;
  auto r = p.finish(30);
  const auto t_exit = Clock::now();
  auto [left, t_clean] = wait_clean(job, 10);
  const double s = seconds_between(t0, std::max(t_exit, t_clean));
  print_row(7, "ssh-connection-cut", r.exit_code, s, left.size(), bed());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("lost contact with the agent on node 1 (" + addr(1) + ")"),
            std::string::npos)
      << r.err;
  EXPECT_LT(s, 2.0) << r.err;
  EXPECT_TRUE(left.empty()) << describe(left);
}

// 8. One node is partitioned from the network (its link goes down): nothing
// closes, only heartbeats tell. The head fails the job within the heartbeat
// timeout; the cut-off agent, hearing nothing from the head, kills its
// workers within the same bound and exits.
TEST_F(FaultMatrix, F08_NodePartitioned) {
  REQUIRE_BED();
  constexpr double kHeartbeat = 3.0;
  const auto job = unique_job_id("f08");
  Process p(
      job_cmd(job, {"--kill-grace", "1", "--heartbeat-timeout", "3", kWorker, "grandchild", "60"}),
      job_env(job));
  ASSERT_TRUE(p.wait_for_lines(world(), 30)) << p.finish(1).err;
  ASSERT_FALSE(bed_processes(1).empty());
  const auto t0 = Clock::now();
  auto down = bed_exec(1, {"ip", "link", "set", "eth0", "down"});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  // The cut-off side: everything in that namespace but sshd must go.
  double t_node_clean = -1;
  auto r = [&] {
    while (seconds_between(t0, Clock::now()) < 20) {
      pump_for(p, 0.02);
      if (t_node_clean < 0 && bed_processes(1).empty())
        t_node_clean = seconds_between(t0, Clock::now());
      if (stat_of(p.pid()).first == 'Z') break;
    }
    return p.finish(30);
  }();
  const double head_s = seconds_between(t0, Clock::now());
  const auto deadline = t0 + std::chrono::seconds(20);
  while (t_node_clean < 0 && Clock::now() < deadline) {
    if (bed_processes(1).empty()) t_node_clean = seconds_between(t0, Clock::now());
    ::usleep(10 * 1000);
  }
  auto [left, t_clean] = wait_clean(job, 10);
  const double s = std::max({head_s, t_node_clean, seconds_between(t0, t_clean)});
  print_row(8, "node-partitioned", r.exit_code, s, left.size(), bed(),
            "|head=" + std::to_string(head_s).substr(0, 4) + "|cut-off-node=" +
                std::to_string(t_node_clean).substr(0, 4) + "|heartbeat-timeout=3");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(
      r.err.find("lost contact with the agent on node 1 (" + addr(1) + "): no heartbeat for 3.0 s"),
      std::string::npos)
      << r.err;
  // Detection within the timeout itself; the rest is teardown.
  EXPECT_LT(head_s, kHeartbeat + 1.0) << r.err;
  EXPECT_GE(t_node_clean, 0) << "the cut-off node kept its processes: " << describe(left);
  EXPECT_LT(t_node_clean, kHeartbeat + 1.0);
  EXPECT_TRUE(left.empty()) << describe(left);
}

// 9. A host is unreachable when the job starts (its link is down): that host
// times out within --connect-timeout, no worker starts anywhere.
TEST_F(FaultMatrix, F09_HostUnreachableAtStart) {
  REQUIRE_BED();
  auto down = bed_exec(2, {"ip", "link", "set", "eth0", "down"});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  const auto job = unique_job_id("f09");
  const auto t0 = Clock::now();
  Process p(job_cmd(job, {"--connect-timeout", "2", kWorker, "ready-sleep", "30"}), job_env(job));
  auto r = p.finish(30);
  const auto t_exit = Clock::now();
  auto [left, t_clean] = wait_clean(job, 10);
  const double s = seconds_between(t0, std::max(t_exit, t_clean));
  print_row(9, "host-unreachable-at-start", r.exit_code, s, left.size(), bed(),
            "|connect-timeout=2");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("node 2 (" + addr(2) + "): timed out after 2.0 s"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "") << "no worker may start anywhere";
  EXPECT_LT(s, 2.0 + 2.0) << r.err;
  EXPECT_TRUE(left.empty()) << describe(left);
}

// 10. MASTER_PORT, or the store's port, is already taken on node 0: a clear
// error naming the port, no worker anywhere, nothing left.
TEST_F(FaultMatrix, F10_PortTakenOnNodeZero) {
  int taken = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(taken, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(taken, 8), 0);
  socklen_t len = sizeof a;
  ::getsockname(taken, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string port = std::to_string(ntohs(a.sin_port));
  struct Case {
    std::string fault, option, error;
  };
  for (const auto& c : {Case{"master-port-taken", "--master-port",
                             "node 0 (node0, localhost): MASTER_PORT " + port +
                                 " is not free on node 0: Address "
                                 "already in use"},
                        Case{"store-port-taken", "--store-port",
                             "node 0 (node0, localhost): cannot start the comm store: store "
                             "server: cannot listen on "
                             "127.0.0.1:" +
                                 port}}) {
    const auto job = unique_job_id("f10");
    const auto t0 = Clock::now();
    auto r = run(job_cmd(job, {c.option, port, kWorker, "ready-sleep", "30"}, /*local=*/true), 30,
                 job_env(job));
    const auto t_exit = Clock::now();
    auto [left, t_clean] = wait_clean(job, 10, /*only_job=*/true);
    const double s = seconds_between(t0, std::max(t_exit, t_clean));
    print_row(10, c.fault, r.exit_code, s, left.size(), false);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(c.error), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_LT(s, 2.0) << r.err;
    EXPECT_TRUE(left.empty()) << describe(left);
  }
  ::close(taken);
}

// 11. Two jobs on the same nodes; one is interrupted (SIGINT): it stops, and
// the other runs on untouched and exits 0.
TEST_F(FaultMatrix, F11_AbortingOneJobSparesTheOther) {
  REQUIRE_BED();
  const auto keep = unique_job_id("f11keep");
  const auto stop = unique_job_id("f11stop");
  Process a(job_cmd(keep, {"--kill-grace", "1", kWorker, "ready-sleep", "6"}), job_env(keep));
  Process b(job_cmd(stop, {"--kill-grace", "1", kWorker, "grandchild", "60"}), job_env(stop));
  ASSERT_TRUE(a.wait_for_lines(world(), 30)) << a.finish(1).err;
  ASSERT_TRUE(b.wait_for_lines(world(), 30)) << b.finish(1).err;
  const auto before = job_processes(keep);
  ASSERT_EQ(before.size(), static_cast<std::size_t>(world()));
  const auto t0 = Clock::now();
  b.signal(SIGINT);
  auto rb = b.finish(30);
  const auto t_exit = Clock::now();
  auto [left_b, t_clean] = wait_clean(stop, 10, /*only_job=*/true);
  const double s = seconds_between(t0, std::max(t_exit, t_clean));
  std::vector<pid_t> touched;
  for (pid_t pid : before) {
    if (!alive(pid)) touched.push_back(pid);
  }
  auto ra = a.finish(30);
  auto [left_all, t_all] = wait_clean(keep, 10);
  const auto left = left_b.size() + left_all.size();
  print_row(11, "two-jobs-one-aborted", rb.exit_code, s, left, bed(),
            "|other-exit=" + std::to_string(ra.exit_code));
  EXPECT_EQ(rb.exit_code, 130) << rb.err;
  EXPECT_LT(s, 2.0) << rb.err;
  EXPECT_TRUE(touched.empty()) << touched.size()
                               << " process(es) of the other job died with the aborted one";
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(lines_of(ra.out).size(), static_cast<std::size_t>(world())) << ra.out;
  EXPECT_EQ(left, 0u) << describe(left_b) << describe(left_all);
}

// 13. A host is cut off mid-run in a job that may lose a node (--min-nodes 2
// --max-restarts 1): the head drops it within the heartbeat timeout and the
// job restarts on the two hosts left (WORLD_SIZE 4, not 6) and ends with
// exit 0; the cut-off host's agent stops its workers itself.
TEST_F(FaultMatrix, F13_PartitionedNodeIsDroppedWithMinNodes) {
  REQUIRE_BED();
  const auto job = unique_job_id("f13");
  Process p(job_cmd(job, {"--kill-grace", "1", "--heartbeat-timeout", "3", "--min-nodes", "2",
                          "--max-restarts", "1", "--no-prefix", "sh", "-c",
                          "echo attempt $TORCHELASTIC_RESTART_COUNT rank $RANK of $WORLD_SIZE; "
                          "[ $TORCHELASTIC_RESTART_COUNT = 1 ] || exec sleep 60"}),
            job_env(job));
  ASSERT_TRUE(p.wait_for_lines(world(), 30)) << p.finish(1).err;
  const auto t0 = Clock::now();
  auto down = bed_exec(1, {"ip", "link", "set", "eth0", "down"});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  auto r = p.finish(60);
  const double s = seconds_between(t0, Clock::now());
  auto [left, t_clean] = wait_clean(job, 10);
  print_row(13, "node-partitioned-min-nodes", r.exit_code, s, left.size(), bed(),
            "|heartbeat-timeout=3|restarted-on=2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  int second = 0;
  for (const auto& l : lines_of(r.out)) second += l.starts_with("attempt 1 ") ? 1 : 0;
  EXPECT_EQ(second, 2 * kBedSlots) << r.out;
  EXPECT_NE(r.out.find("of " + std::to_string(2 * kBedSlots)), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("node 1 " + addr(1) + " excluded; 2 node(s) run the next attempt"),
            std::string::npos)
      << r.err;
  EXPECT_LT(s, 3.0 + 10.0) << r.err;
  EXPECT_TRUE(left.empty()) << describe(left);
}

// 12. Every worker floods stdout faster than its output can leave: dlaunch's
// and the agents' memory stays bounded (the agents stop reading their workers
// above a watermark), and dlaunch stays responsive: it acknowledges SIGINT at
// once, and the job ends within a bound. Three cases:
//  - each host's link shaped to 8 Mbit/s, one SIGINT: the agents still hold
//    megabytes of output (up to their 1 MiB watermark, plus the SSH window in
//    flight) ahead of their workers' exit reports, so the job ends when that
//    has crossed the network or, at the latest, at the abort deadline (kill
//    grace + 5 s);
//  - the same with a second SIGINT ("again to kill at once"): ends at once;
//  - a fast network but a slow reader of dlaunch's stdout (2 MB/s): the
//    head's event loop must still serve signals, heartbeats and every link.
TEST_F(FaultMatrix, F12_StdoutFlood) {
  REQUIRE_BED();
  constexpr double kGrace = 1.0;
  struct Case {
    std::string fault;
    bool shaped;
    int interrupts;
  };
  for (const auto& c : {Case{"stdout-flood-slow-network", true, 1},
                        Case{"stdout-flood-slow-network-2xSIGINT", true, 2},
                        Case{"stdout-flood-slow-reader-2xSIGINT", false, 2}}) {
    for (int k = 0; k < kBedNodes; ++k) {
      bed_exec(k, {"tc", "qdisc", "del", "dev", "eth0", "root"});
      if (!c.shaped) continue;
      auto tc = bed_exec(k, {"tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "8mbit",
                             "burst", "64kb", "latency", "100ms"});
      ASSERT_EQ(tc.exit_code, 0) << tc.err;
    }
    const auto job = unique_job_id("f12");
    auto cmd = job_cmd(
        job, {"--kill-grace", "1", "--nproc-per-node", "1", kWorker, "lines", "1000000000", "200"});
    if (!c.shaped) {
      cmd.insert(cmd.begin(), {"bash", "-c",
                               "set -o pipefail; \"$@\" | " + kWorker + " slow-read 2000", "bash"});
    }
    Process p(cmd, job_env(job));
    pid_t head = p.pid();
    if (!c.shaped) {
      const auto until = Clock::now() + std::chrono::seconds(5);
      head = -1;
      while (head < 0 && Clock::now() < until) {
        for (pid_t d : dlaunch::descendants_of(p.pid())) {
          if (comm_of(d) == "dlaunch") head = d;
        }
        ::usleep(10 * 1000);
      }
      ASSERT_GT(head, 0);
      // Flooding once every agent has started its worker.
      const auto flooding = Clock::now() + std::chrono::seconds(30);
      while (Clock::now() < flooding &&
             job_processes(job).size() < static_cast<std::size_t>(kBedNodes)) {
        ::usleep(20 * 1000);
      }
    } else {
      ASSERT_TRUE(p.wait_for_lines(1000, 30)) << p.finish(1).err;
    }
    long peak_rss = 0;
    auto sample = [&] { peak_rss = std::max(peak_rss, status_kib(head, "VmRSS")); };
    std::size_t bytes_before = 0;
    p.wait_for_output(
        [&](const std::string& out) {
          bytes_before = out.size();
          return true;
        },
        1);
    const auto flood_start = Clock::now();
    pump_for(p, 3, sample);
    std::size_t bytes_after = 0;
    p.wait_for_output(
        [&](const std::string& out) {
          bytes_after = out.size();
          return true;
        },
        1);
    const double rate = static_cast<double>(bytes_after - bytes_before) /
                        seconds_between(flood_start, Clock::now());
    const long hwm = status_kib(head, "VmHWM");
    long agent_hwm = 0;
    for (int k = 0; k < kBedNodes; ++k) {
      const pid_t ag = bed_agent(k);
      if (ag > 0) agent_hwm = std::max(agent_hwm, status_kib(ag, "VmHWM"));
    }
    const auto t0 = Clock::now();
    ::kill(head, SIGINT);
    const bool acked = p.wait_for_stderr(
        [](const std::string& err) {
          return err.find("SIGINT: stopping the job") != std::string::npos;
        },
        10);
    const double ack_s = seconds_between(t0, Clock::now());
    auto t_last = t0;
    if (c.interrupts == 2) {
      pump_for(p, 0.5);
      t_last = Clock::now();
      ::kill(head, SIGINT);
    }
    auto r = p.finish(60);
    const auto t_exit = Clock::now();
    auto [left, t_clean] = wait_clean(job, 10);
    const double s = seconds_between(t0, std::max(t_exit, t_clean));
    const double after_last = seconds_between(t_last, std::max(t_exit, t_clean));
    char extra[300];
    std::snprintf(
        extra, sizeof extra,
        "|sigints=%d|ack=%.2f|after-last-sigint=%.2f|stdout_mb_s=%.1f|dlaunch_hwm_mib=%.1f|"
        "dlaunch_rss_mib=%.1f|agent_hwm_mib=%.1f",
        c.interrupts, ack_s, after_last, rate / 1e6, static_cast<double>(hwm) / 1024,
        static_cast<double>(peak_rss) / 1024, static_cast<double>(agent_hwm) / 1024);
    print_row(12, c.fault, r.exit_code, s, left.size(), bed(), extra);
    if (c.shaped) {
      EXPECT_LT(rate, 8e6) << "the network, not the workers, must be the bottleneck";
    }
    EXPECT_TRUE(acked) << r.err.substr(0, 2000);
    EXPECT_LT(ack_s, 1.0) << c.fault;
    EXPECT_EQ(r.exit_code, 130) << r.err.substr(0, 2000);
    if (c.interrupts == 1) {
      EXPECT_LT(s, kGrace + 5.0 + 2.0) << r.err.substr(0, 2000);
    } else {
      EXPECT_LT(after_last, 2.5) << r.err.substr(0, 2000);
    }
    EXPECT_GT(hwm, 0);
    // ASan's shadow memory adds about 40 MiB to every process, and its
    // quarantine keeps up to 256 MiB of freed memory: with a slow reader the
    // console's queue churns through buffers (seen: 167.5 MiB under ASan,
    // 28.4 MiB in the release build), so the bound that means something is
    // the release one.
    const long limit_kib = kSanitizedBuild ? 320 * 1024 : 64 * 1024;
    EXPECT_LT(hwm, limit_kib) << "dlaunch's peak RSS in KiB";
    EXPECT_LT(agent_hwm, limit_kib) << "an agent's peak RSS in KiB";
    EXPECT_TRUE(left.empty()) << describe(left);
  }
}

// ---------------------------------------------------------------- chaos
//
// Random faults at random times on the netns bed: a job of 3 hosts x 2 ranks
// starts, and after a random delay one fault hits, drawn from a shuffled round
// of every kind (so each comes up about as often). For each run: the exit code
// is the documented one for that fault, dlaunch has exited and every host is
// clean within the fault's bound, and nothing of the job is left anywhere.
// Prints a table (CHAOS|...): runs, wrong exit codes, late exits, leftovers per
// fault; all must be 0. Bounded: DLAUNCH_CHAOS_SECONDS (default 120, 30 under
// a sanitizer) of new runs; DLAUNCH_CHAOS_SEED replays a run's choices.
namespace {

constexpr double kChaosHeartbeat = 3.0;  // --heartbeat-timeout of every chaos job
constexpr double kChaosGrace = 1.0;      // --kill-grace
// How long an agent or dlaunch is stopped, or a link down: past the
// heartbeat timeout, so that the other side must notice.
constexpr double kChaosOutage = kChaosHeartbeat + 1.5;
constexpr int kPacedLines = 30000;  // per rank, for the output faults

enum class Chaos {
  kWorkerCrash,
  kWorkerHang,
  kAgentKill,
  kAgentStop,
  kHeadStop,
  kLinkFlap,
  kSshReset,
  kReaderStall,
  kDiskFull,
  kSigint,
  kCount
};

const char* chaos_name(Chaos f) {
  switch (f) {
    case Chaos::kWorkerCrash:
      return "worker-crash (SIGKILL)";
    case Chaos::kWorkerHang:
      return "worker-hang (SIGSTOP, --timeout)";
    case Chaos::kAgentKill:
      return "agent-sigkill";
    case Chaos::kAgentStop:
      return "agent-sigstop-past-heartbeat";
    case Chaos::kHeadStop:
      return "dlaunch-sigstop-past-heartbeat";
    case Chaos::kLinkFlap:
      return "link-down-then-up";
    case Chaos::kSshReset:
      return "ssh-connection-reset";
    case Chaos::kReaderStall:
      return "stdout-reader-stalled";
    case Chaos::kDiskFull:
      return "disk-full-output-dir";
    case Chaos::kSigint:
      return "sigint";
    case Chaos::kCount:
      break;
  }
  return "?";
}

double env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atof(v) : fallback;
}

struct ChaosTally {
  int runs = 0;
  int wrong_exit = 0;
  int late = 0;
  int leftovers = 0;
};

}  // namespace

TEST_F(FaultMatrix, Chaos) {
  REQUIRE_BED();
  const double budget = env_seconds("DLAUNCH_CHAOS_SECONDS", kSanitizedBuild ? 30 : 120);
  const char* seed_env = std::getenv("DLAUNCH_CHAOS_SEED");
  const unsigned seed = seed_env != nullptr
                            ? static_cast<unsigned>(std::strtoul(seed_env, nullptr, 10))
                            : std::random_device{}();
  std::printf("CHAOS|seed=%u|budget=%.0fs (replay: DLAUNCH_CHAOS_SEED=%u)\n", seed, budget, seed);
  std::mt19937 rng(seed);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<>(lo, hi)(rng);
  };
  auto pick = [&](int n) { return std::uniform_int_distribution<>(0, n - 1)(rng); };

  constexpr auto kKinds = static_cast<std::size_t>(Chaos::kCount);
  std::array<ChaosTally, kKinds> tally{};
  std::vector<std::string> problems;
  std::vector<Chaos> round;
  const auto began = Clock::now();
  int run_no = 0;
  while (seconds_between(began, Clock::now()) < budget) {
    if (round.empty()) {
      for (std::size_t i = 0; i < kKinds; ++i) round.push_back(static_cast<Chaos>(i));
      std::shuffle(round.begin(), round.end(), rng);
    }
    const Chaos fault = round.back();
    round.pop_back();
    ++run_no;
    const int node = pick(kBedNodes);
    const int rank = pick(world());
    const double delay = uniform(0.0, 1.0);

    const auto job = unique_job_id("chaos" + std::to_string(run_no));
    std::vector<std::string> args = {"--kill-grace",    "1", "--heartbeat-timeout", "3",
                                     "--stack-timeout", "2"};
    std::string out_dir;
    bool paced = false;
    if (fault == Chaos::kWorkerHang) args.insert(args.end(), {"--timeout", "6"});
    if (fault == Chaos::kDiskFull) {
      out_dir = (fs::temp_directory_path() / ("dlaunch-chaos-full-" + job)).string();
      fs::create_directories(out_dir);
      if (::mount("tmpfs", out_dir.c_str(), "tmpfs", 0, "size=64k") != 0) {
        problems.push_back(std::string("cannot mount a tmpfs for disk-full: ") +
                           std::strerror(errno));
        fs::remove(out_dir);
        continue;
      }
      args.insert(args.end(), {"--output-dir", out_dir});
    }
    if (fault == Chaos::kReaderStall || fault == Chaos::kDiskFull) {
      paced = true;
      args.insert(args.end(), {kWorker, "paced", std::to_string(kPacedLines), "10000"});
    } else {
      args.insert(args.end(), {kWorker, "grandchild", "60"});
    }
    Process p(job_cmd(job, args), job_env(job));
    const bool started = p.wait_for_lines(paced ? world() * 100 : world(), 30);
    int expected = 1;
    double bound = 2.5;  // from the fault to dlaunch gone and every host clean
    std::string detail;
    Clock::time_point t0;
    if (!started) {
      detail = "the job did not start";
      t0 = Clock::now();
      p.signal(SIGKILL);
    } else {
      pump_for(p, delay);
      t0 = Clock::now();
      switch (fault) {
        case Chaos::kWorkerCrash: {
          const pid_t w = worker_pid(job, rank);
          if (w > 0) ::kill(w, SIGKILL);
          expected = 128 + SIGKILL;
          break;
        }
        case Chaos::kWorkerHang: {
          const pid_t w = worker_pid(job, rank);
          if (w > 0) ::kill(w, SIGSTOP);
          expected = 124;
          // The rest of the 6 s limit (counted from dlaunch's start, before
          // t0), the stacks (--stack-timeout 2 + 1), the grace, a margin.
          bound = 6.0 + 3.0 + kChaosGrace + 1.5;
          break;
        }
        case Chaos::kAgentKill: {
          const pid_t a = bed_agent(node);
          if (a > 0) ::kill(a, SIGKILL);
          break;
        }
        case Chaos::kAgentStop: {
          const pid_t a = bed_agent(node);
          if (a > 0) ::kill(a, SIGSTOP);
          // The whole outage, even once dlaunch has given up on the node.
          ::usleep(static_cast<useconds_t>(kChaosOutage * 1e6));
          if (a > 0) ::kill(a, SIGCONT);
          // Its workers run until it wakes, sees the head gone and stops them.
          bound = kChaosOutage + kChaosGrace + 2.0;
          break;
        }
        case Chaos::kHeadStop: {
          p.signal(SIGSTOP);
          ::usleep(static_cast<useconds_t>(kChaosOutage * 1e6));
          p.signal(SIGCONT);
          // Every agent stops its workers once the head is silent past the
          // heartbeat timeout; dlaunch, woken, finds them gone.
          bound = kChaosOutage + kChaosGrace + 2.0;
          break;
        }
        case Chaos::kLinkFlap: {
          bed_exec(node, {"ip", "link", "set", "eth0", "down"});
          ::usleep(static_cast<useconds_t>(kChaosOutage * 1e6));
          bed_exec(node, {"ip", "link", "set", "eth0", "up"});
          bound = kChaosOutage + kChaosGrace + 2.0;
          break;
        }
        case Chaos::kSshReset:
          bed_exec(node, {"ss", "-K", "-t", "-n", "state", "established", "( sport = :22 )"});
          break;
        case Chaos::kReaderStall:
          // No reading for longer than the heartbeat timeout: the job must
          // go on and lose nothing.
          ::usleep(static_cast<useconds_t>(kChaosOutage * 1e6));
          expected = 0;
          bound = kChaosOutage + 3.0 + 3.0;  // the stall, the 3 s of output, a margin
          break;
        case Chaos::kDiskFull:
          // The 64 KiB tmpfs fills within the first lines: said once, the job goes on.
          expected = 0;
          bound = 3.0 + 3.0;
          break;
        case Chaos::kSigint:
          p.signal(SIGINT);
          expected = 130;
          bound = kChaosGrace + 2.0;
          break;
        case Chaos::kCount:
          break;
      }
    }
    auto r = p.finish(60);
    const auto t_exit = Clock::now();
    if (fault == Chaos::kLinkFlap) bed_exec(node, {"ip", "link", "set", "eth0", "up"});
    auto [left, t_clean] = wait_clean(job, 10);
    const double s = seconds_between(t0, std::max(t_exit, t_clean));
    if (!out_dir.empty()) {
      ::umount2(out_dir.c_str(), MNT_DETACH);
      std::error_code ignored;
      fs::remove_all(out_dir, ignored);
    }
    if (paced && started) {
      int lines = 0;
      for (const auto& l : lines_of(r.out)) lines += l.rfind('[', 0) == 0 ? 1 : 0;
      if (lines != world() * kPacedLines)
        detail += "console had " + std::to_string(lines) + " lines of " +
                  std::to_string(world() * kPacedLines) + "; ";
      if (fault == Chaos::kDiskFull && r.err.find("No space left on device") == std::string::npos)
        detail += "the full disk was not reported; ";
    }
    auto& t = tally[static_cast<std::size_t>(fault)];
    ++t.runs;
    const bool wrong = r.exit_code != expected || !detail.empty();
    const bool late = s > bound;
    t.wrong_exit += wrong ? 1 : 0;
    t.late += late ? 1 : 0;
    t.leftovers += left.empty() ? 0 : 1;
    std::printf(
        "CHAOS|run=%d|%s|node=%d|rank=%d|delay=%.2f|exit=%d (expected %d)|seconds=%.2f "
        "(bound %.1f)|left=%zu%s%s\n",
        run_no, chaos_name(fault), node, rank, delay, r.exit_code, expected, s, bound, left.size(),
        detail.empty() ? "" : "|", detail.c_str());
    std::fflush(stdout);
    if (wrong || late || !left.empty()) {
      problems.push_back(std::string("run ") + std::to_string(run_no) + " " + chaos_name(fault) +
                         ": exit " + std::to_string(r.exit_code) + " (expected " +
                         std::to_string(expected) + "), " + std::to_string(s) + " s (bound " +
                         std::to_string(bound) + "), left: " + describe(left) + " " + detail +
                         "\n  stderr: " + r.err.substr(0, 1500));
    }
  }

  std::printf("CHAOS|%-34s|%5s|%11s|%5s|%10s\n", "fault", "runs", "wrong exits", "late",
              "leftovers");
  ChaosTally total;
  for (std::size_t i = 0; i < kKinds; ++i) {
    const auto& t = tally[i];
    std::printf("CHAOS|%-34s|%5d|%11d|%5d|%10d\n", chaos_name(static_cast<Chaos>(i)), t.runs,
                t.wrong_exit, t.late, t.leftovers);
    total.runs += t.runs;
    total.wrong_exit += t.wrong_exit;
    total.late += t.late;
    total.leftovers += t.leftovers;
  }
  std::printf("CHAOS|%-34s|%5d|%11d|%5d|%10d\n", "all", total.runs, total.wrong_exit, total.late,
              total.leftovers);
  std::fflush(stdout);
  EXPECT_GE(total.runs, 1);
  for (const auto& pr : problems) ADD_FAILURE() << pr;
}
