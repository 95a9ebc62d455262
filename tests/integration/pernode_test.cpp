// Per-node mode (issue 18): several dlaunch launchers on this machine, each
// one node of the job, meeting through a static or c10d rendezvous on
// loopback, as torchrun's are started on every node. A small Python program
// (tests/integration/pernode_world.py) checks that they make one world over
// MASTER_ADDR:MASTER_PORT; examples/train.py too where /usr/bin/python3 has
// torch. Also: mismatched launchers refused naming both, a failed rank on one
// node stopping the others with one report each, and the launcher that hosts
// the rendezvous SIGKILLed.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support.h"

using namespace dltest;

namespace {

const std::string kWorld = std::string(SOURCE_DIR) + "/tests/integration/pernode_world.py";
const std::string kPython = "/usr/bin/python3";
const std::vector<std::string> kEnv = {"DLAUNCH_RDZV_SECRET=pernode-test-secret"};

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("cannot find a free port on 127.0.0.1");
  return ntohs(a.sin_port);
}

std::vector<std::string> c10d(int nnodes, int nproc, int port, const std::string& job,
                              std::vector<std::string> rest) {
  std::vector<std::string> args = {"--nnodes",
                                   std::to_string(nnodes),
                                   "--nproc-per-node",
                                   std::to_string(nproc),
                                   "--rdzv-backend",
                                   "c10d",
                                   "--rdzv-endpoint",
                                   "127.0.0.1:" + std::to_string(port),
                                   "--rdzv-id",
                                   job,
                                   "--heartbeat-timeout",
                                   "4",
                                   "--kill-grace",
                                   "2"};
  args.insert(args.end(), rest.begin(), rest.end());
  return dlaunch_cmd(args);
}

std::vector<std::string> fixed(int nnodes, int nproc, int rank, int port, const std::string& job,
                               std::vector<std::string> rest) {
  std::vector<std::string> args = {"--nnodes",
                                   std::to_string(nnodes),
                                   "--nproc_per_node",
                                   std::to_string(nproc),
                                   "--node_rank",
                                   std::to_string(rank),
                                   "--master_addr",
                                   "127.0.0.1",
                                   "--master_port",
                                   std::to_string(port),
                                   "--rdzv_id",
                                   job,
                                   "--heartbeat-timeout",
                                   "4",
                                   "--kill-grace",
                                   "2"};
  args.insert(args.end(), rest.begin(), rest.end());
  return dlaunch_cmd(args);
}

// Every launcher exited 0 and together they printed each rank of one world
// of nnodes * nproc ranks once, with the node layout and the sum of (rank+1).
void expect_one_world(const std::vector<RunResult>& rs, int nnodes, int nproc) {
  const int world = nnodes * nproc;
  const int sum = world * (world + 1) / 2;
  std::vector<int> seen(static_cast<std::size_t>(world), 0);
  std::vector<int> node_of_launcher;
  for (const auto& r : rs) {
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    std::smatch m;
    for (const auto& line : lines_of(r.out)) {
      static const std::regex re(
          R"(\[(\d+)\] rank (\d+)/(\d+) node (\d+)/(\d+) local (\d+)/(\d+) restart 0 sum (\d+))");
      if (!std::regex_search(line, m, re)) continue;
      const int rank = std::stoi(m[2]);
      EXPECT_EQ(std::stoi(m[1]), rank) << line;
      EXPECT_EQ(std::stoi(m[3]), world) << line;
      EXPECT_EQ(std::stoi(m[4]), rank / nproc) << line;
      EXPECT_EQ(std::stoi(m[5]), nnodes) << line;
      EXPECT_EQ(std::stoi(m[6]), rank % nproc) << line;
      EXPECT_EQ(std::stoi(m[7]), nproc) << line;
      EXPECT_EQ(std::stoi(m[8]), sum) << line;
      ASSERT_GE(rank, 0);
      ASSERT_LT(rank, world);
      ++seen[static_cast<std::size_t>(rank)];
    }
  }
  for (int k = 0; k < world; ++k) EXPECT_EQ(seen[static_cast<std::size_t>(k)], 1) << "rank " << k;
}

std::vector<RunResult> run_all(const std::vector<std::vector<std::string>>& cmds,
                               double timeout_s = 40) {
  std::vector<std::unique_ptr<Process>> ps;
  ps.reserve(cmds.size());
  for (const auto& c : cmds) ps.push_back(std::make_unique<Process>(c, kEnv));
  std::vector<RunResult> rs;
  rs.reserve(ps.size());
  for (auto& p : ps) rs.push_back(p->finish(timeout_s));
  return rs;
}

}  // namespace

TEST(PerNode, StaticTwoLaunchersMakeOneWorld) {
  const int port = free_port();
  const auto job = unique_job_id("pn-static");
  auto rs = run_all({fixed(2, 2, 1, port, job, {"python3", kWorld}),
                     fixed(2, 2, 0, port, job, {"python3", kWorld})});
  expect_one_world(rs, 2, 2);
  EXPECT_NE(rs[1].err.find("node 0 of 2"), std::string::npos) << rs[1].err;
  EXPECT_NE(rs[0].err.find("node 1 of 2"), std::string::npos) << rs[0].err;
  // Issue 29: as torchrun's, the ranks' MASTER_PORT is --master-port (a
  // firewall that opens only that port lets the job through); the
  // launchers' store moved to a port of its own.
  for (const auto& r : rs) {
    EXPECT_NE(r.err.find("MASTER_PORT=" + std::to_string(port)), std::string::npos) << r.err;
  }
  EXPECT_TRUE(wait_job_gone(job, 5).empty());
}

// Many jobs on one machine (issue 34): concurrent --standalone launchers,
// whose rank 0 each binds and listens on its MASTER_PORT for a moment as
// PyTorch's does. Each node's agent reserves its port itself, so no two jobs
// are ever given one: every job succeeds and every port is its own.
TEST(PerNode, ConcurrentStandaloneJobsNeverShareAMasterPort) {
  const int jobs = 24;
  std::vector<std::vector<std::string>> cmds;
  std::vector<std::string> ids;
  for (int k = 0; k < jobs; ++k) {
    ids.push_back(unique_job_id("pn-many-" + std::to_string(k)));
    cmds.push_back(
        dlaunch_cmd({"--standalone", "--nproc-per-node", "1", "--no-python", "python3", "-c",
                     "import os, socket, time; s = socket.socket(); "
                     "s.bind(('127.0.0.1', int(os.environ['MASTER_PORT']))); s.listen(); "
                     "print('port', os.environ['MASTER_PORT'], flush=True); time.sleep(1)"}));
  }
  const auto rs = run_all(cmds, 120);
  std::set<std::string> ports;
  for (const auto& r : rs) {
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    const auto at = r.out.find("port ");
    if (at == std::string::npos) continue;
    const std::string port = r.out.substr(at + 5, r.out.find('\n', at) - at - 5);
    EXPECT_TRUE(ports.insert(port).second) << "two jobs were given port " << port;
  }
  EXPECT_EQ(ports.size(), static_cast<std::size_t>(jobs));
  // No launcher had to kill its agent.
  for (const auto& r : rs) EXPECT_EQ(r.err.find("killing the agents"), std::string::npos) << r.err;
}

// torchrun's --redirects 0:1 keeps local rank 0's stdout off the console and
// in the --log-dir files; --tee only adds files (dlaunch always shows).
TEST(PerNode, RedirectsKeepAStreamOfARankOffTheConsoleAndInItsFile) {
  const std::string dir = temp_dir("redirects");
  auto r = run(dlaunch_cmd({"--standalone", "--nproc-per-node", "2", "--redirects", "0:1",
                            "--log-dir", dir, "--rdzv-id", unique_job_id("redir"), "sh", "-c",
                            "echo out$LOCAL_RANK; echo err$LOCAL_RANK >&2"}),
               30);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("out0"), std::string::npos) << r.out;  // redirected
  EXPECT_NE(r.out.find("[1] out1"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("[0] err0"), std::string::npos) << r.err;  // only stdout was
  std::string files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files += slurp(e.path().string());
  }
  EXPECT_NE(files.find("out0"), std::string::npos) << files;
  std::filesystem::remove_all(dir);
}

TEST(PerNode, MasterPortPinnedWithDashXIsTheRanksOnC10d) {
  const int port = free_port();
  int pinned = free_port();
  while (pinned == port) pinned = free_port();
  const auto job = unique_job_id("pn-pinned");
  const std::vector<std::string> prog = {"-x", "MASTER_PORT=" + std::to_string(pinned), "python3",
                                         kWorld};
  auto rs = run_all({c10d(2, 1, port, job, prog), c10d(2, 1, port, job, prog)});
  expect_one_world(rs, 2, 1);
  for (const auto& r : rs) {
    EXPECT_NE(r.err.find("MASTER_PORT=" + std::to_string(pinned)), std::string::npos) << r.err;
  }
}

TEST(PerNode, PodEnvironmentsAloneMakeOneWorld) {
  // Two pods' launchers, started together, each with its own environment.
  const auto pods = [](const std::vector<std::string>& args,
                       const std::vector<std::vector<std::string>>& envs) {
    std::vector<std::unique_ptr<Process>> ps;
    ps.reserve(envs.size());
    for (const auto& e : envs) ps.push_back(std::make_unique<Process>(dlaunch_cmd(args), e));
    std::vector<RunResult> rs;
    rs.reserve(ps.size());
    for (auto& p : ps) rs.push_back(p->finish(40));
    return rs;
  };
  // PyTorchJob pods as Kubeflow's operator (1.7+) sets them up: torchrun's
  // PET_* variables and the master's MASTER_ADDR/PORT, no option given.
  const int port = free_port();
  const auto job = unique_job_id("pn-pet");
  std::vector<std::vector<std::string>> envs;
  for (int k : {1, 0}) {
    envs.push_back({kEnv[0], "PET_NNODES=2", "PET_NPROC_PER_NODE=2",
                    "PET_NODE_RANK=" + std::to_string(k), "PET_RDZV_ID=" + job,
                    "KUBERNETES_SERVICE_HOST=10.96.0.1", "WORLD_SIZE=4",
                    "RANK=" + std::to_string(k), "MASTER_ADDR=127.0.0.1",
                    "MASTER_PORT=" + std::to_string(port), "LOCAL_RANK="});
  }
  expect_one_world(pods({"python3", kWorld}, envs), 2, 2);
  EXPECT_TRUE(wait_job_gone(job, 5).empty());

  // An older operator's pods: WORLD_SIZE pods, RANK the pod's index.
  const int port2 = free_port();
  const auto job2 = unique_job_id("pn-legacy");
  envs.clear();
  for (int k : {1, 0}) {
    envs.push_back({kEnv[0], "KUBERNETES_SERVICE_HOST=10.96.0.1", "WORLD_SIZE=2",
                    "RANK=" + std::to_string(k), "MASTER_ADDR=127.0.0.1",
                    "MASTER_PORT=" + std::to_string(port2), "LOCAL_RANK=", "PET_NNODES="});
  }
  expect_one_world(pods({"--nproc-per-node", "2", "--rdzv-id", job2, "python3", kWorld}, envs), 2,
                   2);
  EXPECT_TRUE(wait_job_gone(job2, 5).empty());
}

TEST(PerNode, C10dTwoLaunchersMakeOneWorldAndADotPyRunsUnderPython) {
  const int port = free_port();
  const auto job = unique_job_id("pn-c10d");
  // kWorld ends in .py: it runs under python3 (PYTHON_EXEC) without saying so.
  auto rs = run_all({c10d(2, 2, port, job, {kWorld}), c10d(2, 2, port, job, {kWorld})});
  expect_one_world(rs, 2, 2);
  // Node ranks: the launcher hosting the rendezvous is node 0, once.
  int hosts = 0;
  for (const auto& r : rs) hosts += r.err.find("hosting the rendezvous") != std::string::npos;
  EXPECT_EQ(hosts, 1);
}

TEST(PerNode, C10dFourLaunchersOfOneRankEach) {
  const int port = free_port();
  const auto job = unique_job_id("pn-c10d4");
  std::vector<std::vector<std::string>> cmds;
  cmds.reserve(4);
  for (int k = 0; k < 4; ++k) cmds.push_back(c10d(4, 1, port, job, {"python3", kWorld}));
  expect_one_world(run_all(cmds), 4, 1);
}

// --mpi: a plain Open MPI program (examples/mpi_hello: MPI rank and size
// against RANK and WORLD_SIZE, an allreduce) across launchers. Every
// launcher's agent serves PMIx for its node with the whole job's map, and the
// fences meet in the rendezvous store: one MPI_COMM_WORLD of all ranks.
void expect_one_mpi_world(const std::vector<RunResult>& rs, int world) {
  std::vector<int> seen(static_cast<std::size_t>(world), 0);
  const int sum = world * (world - 1) / 2;
  for (const auto& r : rs) {
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    std::smatch m;
    for (const auto& line : lines_of(r.out)) {
      static const std::regex re(
          R"(\[(\d+)\] mpi rank (\d+)/(\d+), RANK=(\d+) WORLD_SIZE=(\d+), allreduce\(rank\)=(\d+))");
      if (!std::regex_search(line, m, re)) continue;
      const int rank = std::stoi(m[2]);
      EXPECT_EQ(std::stoi(m[1]), rank) << line;
      EXPECT_EQ(std::stoi(m[3]), world) << line;
      EXPECT_EQ(std::stoi(m[4]), rank) << line;
      EXPECT_EQ(std::stoi(m[5]), world) << line;
      EXPECT_EQ(std::stoi(m[6]), sum) << line;
      ASSERT_GE(rank, 0);
      ASSERT_LT(rank, world);
      ++seen[static_cast<std::size_t>(rank)];
    }
  }
  for (int k = 0; k < world; ++k) EXPECT_EQ(seen[static_cast<std::size_t>(k)], 1) << "rank " << k;
}

TEST(PerNodeMpi, StaticTwoLaunchersMakeOneMpiWorld) {
  const int port = free_port();
  const auto job = unique_job_id("pn-mpi2");
  auto rs = run_all({fixed(2, 2, 1, port, job, {"--mpi", MPI_HELLO_BIN}),
                     fixed(2, 2, 0, port, job, {"--mpi", MPI_HELLO_BIN})},
                    90);
  expect_one_mpi_world(rs, 4);
  EXPECT_TRUE(wait_job_gone(job, 5).empty());
}

TEST(PerNodeMpi, C10dFourLaunchersMakeOneMpiWorld) {
  const int port = free_port();
  const auto job = unique_job_id("pn-mpi4");
  std::vector<std::vector<std::string>> cmds;
  cmds.reserve(4);
  for (int k = 0; k < 4; ++k) cmds.push_back(c10d(4, 1, port, job, {"--mpi", MPI_HELLO_BIN}));
  expect_one_mpi_world(run_all(cmds, 90), 4);
  EXPECT_TRUE(wait_job_gone(job, 5).empty());
}

// MPI's wire-up is all-or-nothing: a launcher without --mpi in a job whose
// first launcher has it would leave the others in MPI_Init forever.
TEST(PerNodeMpi, ALauncherWithoutMpiIsRefusedNamingBoth) {
  const int port = free_port();
  const auto job = unique_job_id("pn-mpi-mismatch");
  Process first(c10d(2, 1, port, job, {"--rdzv-conf", "join_timeout=3", "--mpi", MPI_HELLO_BIN}),
                kEnv);
  (void)first.wait_for_stderr([](const std::string&) { return false; }, 0.7);
  // --no-mpi: without it the second would see that mpi_hello links Open
  // MPI and run it as --mpi does (issue 29).
  auto second = run(c10d(2, 1, port, job, {"--no-mpi", MPI_HELLO_BIN}), 30, kEnv);
  EXPECT_EQ(second.exit_code, 2) << second.err;
  EXPECT_NE(second.err.find("--mpi off here"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("--mpi on on the launcher that came first"), std::string::npos)
      << second.err;
  first.finish(20);
}

TEST(PerNode, MismatchedNnodesIsRefusedNamingBoth) {
  const int port = free_port();
  const auto job = unique_job_id("pn-mismatch");
  Process first(c10d(2, 1, port, job, {"--rdzv-conf", "join_timeout=3", "python3", kWorld}), kEnv);
  // The first one joins first (it hosts); it prints nothing until the close.
  (void)first.wait_for_stderr([](const std::string&) { return false; }, 0.7);
  auto second = run(c10d(3, 1, port, job, {"python3", kWorld}), 30, kEnv);
  EXPECT_EQ(second.exit_code, 2) << second.err;
  EXPECT_NE(second.err.find("--nnodes 3 here"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("--nnodes 2 on the launcher that came first"), std::string::npos)
      << second.err;
  auto r = first.finish(20);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("did not close within 3 s"), std::string::npos) << r.err;
}

TEST(PerNode, TwoLaunchersClaimingNodeRankZeroAreRefused) {
  const int port = free_port();
  const auto job = unique_job_id("pn-rank0");
  Process first(fixed(2, 1, 0, port, job, {"--rdzv-conf", "join_timeout=3", "python3", kWorld}),
                kEnv);
  (void)first.wait_for_stderr([](const std::string&) { return false; }, 0.7);
  auto second = run(fixed(2, 1, 0, port, job, {"python3", kWorld}), 30, kEnv);
  EXPECT_EQ(second.exit_code, 2) << second.err;
  EXPECT_NE(second.err.find("node rank 0 is claimed by two launchers"), std::string::npos)
      << second.err;
  first.finish(20);
}

TEST(PerNode, FailedRankOnOneNodeStopsTheOtherWithTheSameReport) {
  const int port = free_port();
  const auto job = unique_job_id("pn-fail");
  // Rank 3 (node 1) fails with 7 after the exchange; the others would sleep 60 s.
  auto rs =
      run_all({fixed(2, 2, 0, port, job,
                     {"python3", kWorld, "--fail-rank", "3", "--code", "7", "--sleep", "60"}),
               fixed(2, 2, 1, port, job,
                     {"python3", kWorld, "--fail-rank", "3", "--code", "7", "--sleep", "60"})},
              40);
  for (const auto& r : rs) {
    EXPECT_EQ(r.exit_code, 7) << r.err;
    EXPECT_LT(r.seconds, 20) << r.err;
    EXPECT_NE(r.err.find("failed: rank 3 exited with code 7"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("failing on purpose"), std::string::npos) << r.err;
  }
  EXPECT_NE(rs[0].err.find("ran under node 1's launcher ("), std::string::npos) << rs[0].err;
  EXPECT_NE(rs[0].err.find("; this node's ranks were stopped"), std::string::npos) << rs[0].err;
  EXPECT_TRUE(wait_job_gone(job, 5).empty());
}

// Two ranks on two nodes fail at the same instant: each launcher sees its
// own first, yet the job has one root cause, the failure that got to the
// rendezvous first, and every launcher reports it and exits with its status
// (its own rank's failure goes in a note). Before, each reported its own.
TEST(PerNode, FailuresAtTheSameInstantOnTwoNodesAreOneRootCauseEverywhere) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int port = free_port();
    const auto job = unique_job_id("pn-same-instant");
    const double at =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() +
        3.0;
    const std::vector<std::string> prog = {
        kPython, "-c",
        "import os, sys, time\n"
        "time.sleep(max(0.0, float(sys.argv[1]) - time.time()))\n"
        "sys.exit(3 + int(os.environ['RANK']))\n",
        std::to_string(at)};
    auto rs = run_all({fixed(2, 1, 0, port, job, prog), fixed(2, 1, 1, port, job, prog)});
    const std::regex re(R"(failed: (rank \d+ exited with code \d+))");
    std::smatch a;
    std::smatch b;
    ASSERT_TRUE(std::regex_search(rs[0].err, a, re)) << rs[0].err;
    ASSERT_TRUE(std::regex_search(rs[1].err, b, re)) << rs[1].err;
    EXPECT_EQ(a[1].str(), b[1].str()) << rs[0].err << rs[1].err;
    EXPECT_EQ(rs[0].exit_code, rs[1].exit_code) << rs[0].err << rs[1].err;
    EXPECT_TRUE(rs[0].exit_code == 3 || rs[0].exit_code == 4) << rs[0].err;
    // The launcher whose own rank failed second says so, and not that its
    // ranks were stopped: one of them failed by itself.
    for (const auto& r : rs) {
      if (r.err.find("on this node, after it: rank ") == std::string::npos) continue;
      EXPECT_EQ(r.err.find("ranks were stopped"), std::string::npos) << r.err;
    }
  }
}

TEST(PerNode, LauncherHostingTheRendezvousKilledIsReportedAtOnce) {
  const int port = free_port();
  const auto job = unique_job_id("pn-hostkill");
  Process host(fixed(2, 1, 0, port, job, {"python3", kWorld, "--sleep", "60"}), kEnv);
  Process other(fixed(2, 1, 1, port, job, {"python3", kWorld, "--sleep", "60"}), kEnv);
  ASSERT_TRUE(other.wait_for_output(
      [](const std::string& out) { return out.find("sum 3") != std::string::npos; }, 30));
  ASSERT_TRUE(host.wait_for_output(
      [](const std::string& out) { return out.find("sum 3") != std::string::npos; }, 30));
  host.signal(SIGKILL);
  auto r = other.finish(30);
  host.finish(5);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 30);
  EXPECT_NE(r.err.find("lost the rendezvous store"), std::string::npos) << r.err;
  EXPECT_TRUE(wait_job_gone(job, 10).empty());
}

TEST(PerNode, RefusedOptionsAndAShortSecretSayWhy) {
  auto r = run(dlaunch_cmd({"--nnodes", "2", "--start-method", "fork", "--rdzv-endpoint",
                            "127.0.0.1:1", "true"}),
               10, kEnv);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--start-method is not supported"), std::string::npos) << r.err;
  r = run(
      dlaunch_cmd({"--nnodes", "2", "-H", "localhost:2", "--rdzv-endpoint", "127.0.0.1:1", "true"}),
      10, kEnv);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--hosts is for the head-node mode"), std::string::npos) << r.err;
  // A secret short enough to guess is refused; no secret at all is an open
  // rendezvous (RendezvousValues.*, rendezvous_security_test.cpp).
  r = run(dlaunch_cmd({"--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1", "true"}), 10,
          {"DLAUNCH_RDZV_SECRET=hunter2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("the rendezvous secret is 7 characters: too short to resist guessing"),
            std::string::npos)
      << r.err;
}

TEST(PerNode, StandaloneRunsOneNode) {
  auto r = run(dlaunch_cmd({"--standalone", "--nproc-per-node", "3", "python3", kWorld}), 30);
  expect_one_world({r}, 1, 3);
  // torchrun --nproc-per-node 2 train.py: one node, nobody to meet, no secret needed.
  r = run(dlaunch_cmd({"--nproc-per-node", "2", kWorld}), 30, {"DLAUNCH_RDZV_SECRET="});
  expect_one_world({r}, 1, 2);
}

TEST(PerNode, TrainPyOnTwoC10dLaunchers) {
  if (run({kPython, "-c", "import torch, torch.distributed"}, 60).exit_code != 0)
    GTEST_SKIP() << kPython << " has no torch: install python3-torch (scripts/install-deps.sh)";
  const int port = free_port();
  const auto job = unique_job_id("pn-torch");
  const std::string train = std::string(SOURCE_DIR) + "/examples/train.py";
  auto rs = run_all({c10d(2, 2, port, job, {kPython, train, "--steps", "20"}),
                     c10d(2, 2, port, job, {kPython, train, "--steps", "20"})},
                    90);
  std::string all;
  for (const auto& r : rs) {
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    all += r.out;
  }
  EXPECT_NE(all.find("[0] parameters identical on all 4 ranks"), std::string::npos) << all;
}

// Four static launchers of one rank each train the same model as the
// head-node mode's four ranks on hostfiles/localhost.yaml, to the same
// parameters (train.py prints their checksum, identical on every rank).
TEST(PerNode, TrainPyOnFourStaticLaunchersEndsWhereTheHeadNodeModeDoes) {
  if (run({kPython, "-c", "import torch, torch.distributed"}, 60).exit_code != 0)
    GTEST_SKIP() << kPython << " has no torch: install python3-torch (scripts/install-deps.sh)";
  const int port = free_port();
  const auto job = unique_job_id("pn-torch4");
  const std::string train = std::string(SOURCE_DIR) + "/examples/train.py";
  std::vector<std::vector<std::string>> cmds;
  cmds.reserve(4);
  for (int k = 0; k < 4; ++k)
    cmds.push_back(fixed(4, 1, k, port, job, {kPython, train, "--steps", "20"}));
  std::string all;
  for (const auto& r : run_all(cmds, 120)) {
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    all += r.out;
  }
  const auto head = run(dlaunch_cmd({"-H", std::string(SOURCE_DIR) + "/hostfiles/localhost.yaml",
                                     kPython, train, "--steps", "20"}),
                        120);
  ASSERT_EQ(head.exit_code, 0) << head.err;
  const std::regex re(R"(parameters identical on all 4 ranks \(checksum (-?[0-9.]+)\))");
  std::smatch a;
  std::smatch b;
  ASSERT_TRUE(std::regex_search(all, a, re)) << all;
  ASSERT_TRUE(std::regex_search(head.out, b, re)) << head.out;
  EXPECT_EQ(a[1].str(), b[1].str()) << all << head.out;
}

namespace {

// Two launchers of a static rendezvous (node 0 hosts it), one rank each that
// sleeps 60 s, started and running (their world of two formed).
struct TwoRunning {
  std::unique_ptr<Process> host;
  std::unique_ptr<Process> other;
};

TwoRunning two_running(const std::string& job, const std::string& heartbeat_timeout) {
  const int port = free_port();
  auto args = [&](int rank) {
    auto a = fixed(2, 1, rank, port, job, {"python3", kWorld, "--sleep", "60"});
    *(std::find(a.begin(), a.end(), "--heartbeat-timeout") + 1) = heartbeat_timeout;
    return a;
  };
  TwoRunning t{std::make_unique<Process>(args(0), kEnv), std::make_unique<Process>(args(1), kEnv)};
  const auto said_sum = [](const std::string& out) {
    return out.find("sum 3") != std::string::npos;
  };
  EXPECT_TRUE(t.other->wait_for_output(said_sum, 30)) << "the world of two did not form";
  EXPECT_TRUE(t.host->wait_for_output(said_sum, 30)) << "the world of two did not form";
  return t;
}

}  // namespace

// A launcher that stops answering without its connection closing (here
// SIGSTOPped; a machine that froze or fell off the network looks the same)
// is lost at the heartbeat timeout.
TEST(PerNode, LauncherStoppedElsewhereIsLostWithinTheHeartbeatTimeout) {
  const auto job = unique_job_id("pn-lost");
  auto [host_p, other_p] = two_running(job, "4");
  if (::testing::Test::HasFailure()) return;
  Process& host = *host_p;
  Process& other = *other_p;
  other.signal(SIGSTOP);
  auto r = host.finish(30);
  other.signal(SIGKILL);
  other.finish(5);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  // --heartbeat-timeout 4, the kill grace 2: well before the ranks' 60 s.
  EXPECT_LT(r.seconds, 15) << r.err;
  EXPECT_NE(r.err.find("node 1 ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is lost: its launcher sent no heartbeat"), std::string::npos) << r.err;
  EXPECT_TRUE(wait_job_gone(job, 10).empty());
}

// The same kill, with the default heartbeat timeout of 30 s: the killed
// launcher's store connection closes, its alive key goes with it, and the
// host knows within about a second (plus the kill grace), not 30 s later.
TEST(PerNode, LauncherKilledElsewhereIsLostAtOnceThroughItsClosedConnection) {
  const auto job = unique_job_id("pn-closed");
  auto [host_p, other_p] = two_running(job, "30");
  if (::testing::Test::HasFailure()) return;
  Process& host = *host_p;
  Process& other = *other_p;
  const auto killed = std::chrono::steady_clock::now();
  other.signal(SIGKILL);
  auto r = host.finish(60);
  const double after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  other.finish(5);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  // The kill grace is 2 s; the heartbeat timeout (30 s) plays no part.
  EXPECT_LT(after, 10) << r.err;
  EXPECT_NE(r.err.find("node 1 ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is lost: its launcher's connection to the rendezvous closed"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(wait_job_gone(job, 10).empty());
}

namespace {

std::string fmt_ok(int rank) { return "attempt 1 rank " + std::to_string(rank) + " of 4 ok"; }

std::vector<std::string> elastic(const std::string& nnodes, int port, const std::string& job,
                                 std::vector<std::string> rest,
                                 const std::string& conf = "last_call_timeout=1,close_timeout=10") {
  std::vector<std::string> args = {"--nnodes",
                                   nnodes,
                                   "--nproc-per-node",
                                   "2",
                                   "--max-restarts",
                                   "2",
                                   "--rdzv-backend",
                                   "c10d",
                                   "--rdzv-endpoint",
                                   "127.0.0.1:" + std::to_string(port),
                                   "--rdzv-id",
                                   job,
                                   "--rdzv-conf",
                                   conf,
                                   "--heartbeat-timeout",
                                   "3",
                                   "--kill-grace",
                                   "2"};
  args.insert(args.end(), rest.begin(), rest.end());
  return dlaunch_cmd(args);
}

// Three launchers of an elastic c10d job (--nnodes NNODES, two ranks each,
// a rank that sleeps 4 s): the first hosts the rendezvous; returned once the
// world of 6 has formed on all three.
struct ThreeRunning {
  std::unique_ptr<Process> host;
  std::unique_ptr<Process> second;
  std::unique_ptr<Process> third;
};

ThreeRunning three_running(const std::string& nnodes, const std::string& job) {
  const int port = free_port();
  const std::vector<std::string> cmd = {"python3", kWorld, "--sleep", "4"};
  ThreeRunning t;
  t.host = std::make_unique<Process>(elastic(nnodes, port, job, cmd), kEnv);
  (void)t.host->wait_for_stderr([](const std::string&) { return false; }, 0.3);
  t.second = std::make_unique<Process>(elastic(nnodes, port, job, cmd), kEnv);
  t.third = std::make_unique<Process>(elastic(nnodes, port, job, cmd), kEnv);
  const auto six = [](const std::string& out) { return out.find("sum 21") != std::string::npos; };
  for (auto* p : {t.host.get(), t.second.get(), t.third.get()})
    EXPECT_TRUE(p->wait_for_output(six, 30)) << "the world of 6 did not form";
  return t;
}

}  // namespace

namespace {

// --nnodes 1:2 --max-restarts 2 with this --rdzv-conf: the launcher that does
// not host is SIGKILLed while its ranks run; the other sees its heartbeat
// stop, stops its ranks, meets alone in the next round and runs the job again
// with WORLD_SIZE 2, TORCHELASTIC_RESTART_COUNT 1. Returns the survivor's run.
RunResult kill_one_of_two(const std::string& job, const std::string& conf) {
  const int port = free_port();
  Process host(elastic("1:2", port, job, {"python3", kWorld, "--sleep", "4"}, conf), kEnv);
  (void)host.wait_for_stderr([](const std::string&) { return false; }, 0.3);
  Process other(elastic("1:2", port, job, {"python3", kWorld, "--sleep", "4"}, conf), kEnv);
  const auto four = [](const std::string& out) { return out.find("sum 10") != std::string::npos; };
  EXPECT_TRUE(other.wait_for_output(four, 30)) << "the world of 4 did not form";
  other.signal(SIGKILL);
  auto r = host.finish(40);
  other.finish(5);
  return r;
}

void expect_restarted_alone(const RunResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[0] rank 0/2 node 0/1 local 0/2 restart 1 sum 3"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("[1] rank 1/2 node 0/1 local 1/2 restart 1 sum 3"), std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("attempt 1: succeeded"), std::string::npos) << r.err;
}

}  // namespace

TEST(PerNodeElastic, OneOfTwoLaunchersKilledTheOtherRestartsAlone) {
  const auto job = unique_job_id("pn-elastic");
  const RunResult r = kill_one_of_two(job, "last_call_timeout=1,close_timeout=10");
  expect_restarted_alone(r);
  EXPECT_NE(r.err.find("node 1 ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is lost"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("restarting the job (1 of 2 restarts)"), std::string::npos) << r.err;
  EXPECT_TRUE(wait_job_gone(job, 10).empty());
}

// --nnodes 2:4 with three launchers: the round closes at the last call with
// three nodes (WORLD_SIZE 6); one is SIGKILLed; the two that remain are at
// MIN, meet again and run with WORLD_SIZE 4 (restart 1), and both exit 0.
TEST(PerNodeElastic, ThreeOfTwoToFourLoseOneAndTheTwoLeftRestart) {
  const auto job = unique_job_id("pn-2to4");
  auto three = three_running("2:4", job);
  if (::testing::Test::HasFailure()) return;
  Process& host = *three.host;
  Process& second = *three.second;
  Process& third = *three.third;
  third.signal(SIGKILL);
  auto a = host.finish(40);
  auto b = second.finish(40);
  third.finish(5);
  for (const auto* r : {&a, &b}) {
    EXPECT_EQ(r->exit_code, 0) << r->out << r->err;
    EXPECT_NE(r->out.find("/6 node "), std::string::npos) << r->out;
    EXPECT_NE(r->out.find("/4 node "), std::string::npos) << r->out;
    EXPECT_NE(r->out.find("restart 1 sum 10"), std::string::npos) << r->out;
    EXPECT_NE(r->err.find("restarting the job (1 of 2 restarts)"), std::string::npos) << r->err;
    EXPECT_NE(r->err.find("is lost: its launcher's connection to the rendezvous closed"),
              std::string::npos)
        << r->err;
  }
  EXPECT_TRUE(wait_job_gone(job, 10).empty());
}

// The launcher hosting the rendezvous is SIGKILLed in a 2:3 job of three:
// its store goes with it. The two left see that at once, the lowest of them
// by node rank (node 1) hosts a new store on its own address and the
// endpoint's port, the other finds it there, and they restart with WORLD_SIZE
// 4 (the successor now node 0) and exit 0; before, both exited 1.
TEST(PerNodeElastic, TheRendezvousHostKilledASurvivorHostsItAndTheJobRestarts) {
  const auto job = unique_job_id("pn-successor");
  auto three = three_running("2:3", job);
  if (::testing::Test::HasFailure()) return;
  Process& host = *three.host;
  Process& second = *three.second;
  Process& third = *three.third;
  host.signal(SIGKILL);
  auto a = second.finish(40);
  auto b = third.finish(40);
  host.finish(5);
  int hosts_now = 0;
  for (const auto* r : {&a, &b}) {
    EXPECT_EQ(r->exit_code, 0) << r->out << r->err;
    EXPECT_NE(r->err.find("lost the rendezvous store"), std::string::npos) << r->err;
    EXPECT_NE(r->err.find("which hosted the rendezvous, is lost; node 1 ("), std::string::npos)
        << r->err;
    EXPECT_NE(r->out.find("restart 1 sum 10"), std::string::npos) << r->out;
    EXPECT_NE(r->err.find("attempt 1: succeeded"), std::string::npos) << r->err;
    hosts_now +=
        static_cast<int>(r->err.find("hosting the rendezvous, restart 1") != std::string::npos);
  }
  EXPECT_EQ(hosts_now, 1);
  EXPECT_TRUE(wait_job_gone(job, 10).empty());
}

// The same with a last call longer than close_timeout (as torchrun's defaults
// are, 30 s each): the survivor, alone but at MIN, waits the last call out
// and restarts; close_timeout bounds only the wait for MIN nodes.
TEST(PerNodeElastic, ALastCallLongerThanTheCloseTimeoutStillRestarts) {
  const auto job = unique_job_id("pn-lastcall");
  expect_restarted_alone(kill_one_of_two(job, "last_call_timeout=3,close_timeout=1"));
  EXPECT_TRUE(wait_job_gone(job, 10).empty());
}

// A rank that fails once: both launchers stop, meet again and run the same
// world again (restart 1), then succeed. The failing rank fails only while
// TORCHELASTIC_RESTART_COUNT is 0.
TEST(PerNodeElastic, FailedRankRestartsBothNodes) {
  const int port = free_port();
  const auto job = unique_job_id("pn-restart");
  const std::string script =
      "import os, runpy, sys\n"
      "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0' and os.environ['RANK'] == '2':\n"
      "    sys.exit(5)\n"
      "sys.argv = [sys.argv[1]]\n"
      "runpy.run_path(sys.argv[0], run_name='__main__')\n";
  const std::string wrapper = temp_file(script, ".py");
  auto rs = run_all(
      {elastic("2:2", port, job, {wrapper, kWorld}), elastic("2:2", port, job, {wrapper, kWorld})},
      60);
  for (const auto& r : rs) {
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.err.find("rank 2 exited with code 5"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("attempt 1: succeeded"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("/4 node "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("restart 1 sum 10"), std::string::npos) << r.out;
  }
  std::remove(wrapper.c_str());
}

// The ranks of one node finish while another node's fail: the job has
// failed, and the restart takes every node in, the finished one too (its
// launcher waits for the others before it exits, as torchrun's exit barrier
// does); before, it left, and the restart found no rendezvous.
TEST(PerNodeElastic, ANodeWhoseRanksFinishedRestartsWithTheOthers) {
  const int port = free_port();
  const auto job = unique_job_id("pn-finished");
  const std::vector<std::string> prog = {
      "sh", "-c",
      "C=$TORCHELASTIC_RESTART_COUNT; if [ \"$C\" = 0 ] && [ \"$GROUP_RANK\" = 1 ]; then sleep 1; "
      "exit 4; fi; echo \"attempt $C rank $RANK of $WORLD_SIZE ok\""};
  auto rs = run_all({elastic("2:2", port, job, prog), elastic("2:2", port, job, prog)}, 60);
  std::vector<int> ok(4, 0);
  int told = 0;
  for (const auto& r : rs) {
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.err.find("exited with code 4"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("attempt 1: succeeded"), std::string::npos) << r.err;
    const bool finished =
        r.err.find("this node's ranks had finished when another node failed") != std::string::npos;
    told += static_cast<int>(finished);
    // Finished, not stopped: the report must not say otherwise.
    if (finished) {
      EXPECT_EQ(r.err.find("ranks were stopped"), std::string::npos) << r.err;
    }
    for (int k = 0; k < 4; ++k) {
      if (r.out.find(fmt_ok(k)) != std::string::npos) ++ok[static_cast<std::size_t>(k)];
    }
  }
  EXPECT_EQ(told, 1);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ok[static_cast<std::size_t>(k)], 1) << "rank " << k;
  EXPECT_TRUE(wait_job_gone(job, 5).empty());
}

// --mpi with restarts: on the first attempt rank 3 exits before MPI_Init,
// while the others wait in MPI_Init's fence (the relay waiting in the store);
// both launchers stop, meet again and run a new MPI world whose fences are
// the new round's.
TEST(PerNodeElastic, AnMpiJobRestartsAfterARankFailsBeforeMpiInit) {
  const int port = free_port();
  const auto job = unique_job_id("pn-mpi-restart");
  // mpi_hello exits 0 only when its MPI world is the dlaunch world and the
  // allreduce adds up: then each rank of the second attempt says so.
  const std::vector<std::string> prog = {
      "--mpi", "sh", "-c",
      "C=$TORCHELASTIC_RESTART_COUNT; if [ \"$C\" = 0 ] && [ \"$RANK\" = 3 ]; then exit 3; fi; "
      "\"$0\" && echo \"attempt $C rank $RANK of $WORLD_SIZE ok\"",
      MPI_HELLO_BIN};
  auto rs = run_all({elastic("2:2", port, job, prog), elastic("2:2", port, job, prog)}, 90);
  std::vector<int> ok(4, 0);
  for (const auto& r : rs) {
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.err.find("rank 3 exited with code 3"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("attempt 1: succeeded"), std::string::npos) << r.err;
    for (int k = 0; k < 4; ++k) {
      if (r.out.find(fmt_ok(k)) != std::string::npos) ++ok[static_cast<std::size_t>(k)];
    }
  }
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ok[static_cast<std::size_t>(k)], 1) << "rank " << k;
  EXPECT_TRUE(wait_job_gone(job, 5).empty());
}

// --nnodes 1:2: a job running on one node; a second launcher that comes later
// waits for the next round and asks for it; the first stops its ranks, both
// meet and run the job with WORLD_SIZE 4 (restart 1, not counted against
// --max-restarts), and both exit 0.
TEST(PerNodeElastic, ALauncherJoiningARunningJobIsTakenInAtARestart) {
  const int port = free_port();
  const auto job = unique_job_id("pn-join");
  Process first(elastic("1:2", port, job, {"python3", kWorld, "--sleep", "3"}), kEnv);
  const auto two = [](const std::string& out) { return out.find("sum 3") != std::string::npos; };
  ASSERT_TRUE(first.wait_for_output(two, 30));
  auto late = run(elastic("1:2", port, job, {"python3", kWorld, "--sleep", "3"}), 40, kEnv);
  auto r = first.finish(40);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(late.exit_code, 0) << late.out << late.err;
  EXPECT_NE(r.err.find("restarting the job to take in the node that is waiting"), std::string::npos)
      << r.err;
  // Said as what it is: no failure.
  EXPECT_NE(r.err.find(" stopped: to take in the launcher waiting to join ("), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("attempt 0: stopped to take in a node waiting to join"), std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("[0] rank 0/4 node 0/2 local 0/2 restart 1 sum 10"), std::string::npos)
      << r.out;
  EXPECT_NE(late.out.find("[2] rank 2/4 node 1/2 local 0/2 restart 1 sum 10"), std::string::npos)
      << late.out;
  EXPECT_TRUE(wait_job_gone(job, 10).empty());
}
