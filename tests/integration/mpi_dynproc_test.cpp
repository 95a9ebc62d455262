// MPI's dynamic processes under dlaunch --mpi (issue 35), with a plain Open MPI
// program (tests/helpers/mpi_dynproc.c): names published and looked up
// through the job's store, connect/accept across logical nodes, spawn failing
// at once; and the job-info keys of the agents' PMIx servers beside mpirun's.
#include <unistd.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "support.h"

using namespace dltest;

namespace {

// "[R] text" lines of dlaunch's output -> text by rank.
std::map<int, std::string> by_rank(const std::string& out) {
  std::map<int, std::string> lines;
  std::regex re(R"(\[(\d+)\] (.*))");
  for (const auto& l : lines_of(out)) {
    std::smatch m;
    if (std::regex_match(l, m, re)) lines[std::stoi(m[1])] += m[2].str();
  }
  return lines;
}

}  // namespace

TEST(MpiDynproc, NamesArePublishedLookedUpAndUnpublishedAcrossLogicalNodes) {
  const auto job = unique_job_id("mpinames");
  auto r =
      run(dlaunch_cmd({"-H", kLocalhost, "--mpi", "--job-id", job, MPI_DYNPROC_BIN, "publish"}), 60,
          mpi_worker_env());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto lines = by_rank(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_EQ(lines[0], "published it: looked up 'port-of-rank-0', after unpublish: not found");
  for (int rank : {1, 2, 3}) {
    EXPECT_EQ(lines[rank], "published -: looked up 'port-of-rank-0', after unpublish: not found")
        << rank;
  }
  EXPECT_EQ(wait_job_gone(job, 5), std::vector<pid_t>{});
}

// Two ranks on node0 accept, the others (node1) connect: the connect spans
// both agents, which meet in the job's store. At 3 ranks the sides are 1 and 2.
TEST(MpiDynproc, ConnectAndAcceptJoinRanksOfTwoLogicalNodes) {
  for (const char* n : {"4", "3"}) {
    auto r = run(dlaunch_cmd({"-H", kLocalhost, "-n", n, "--mpi", MPI_DYNPROC_BIN, "connect"}), 60,
                 mpi_worker_env());
    ASSERT_EQ(r.exit_code, 0) << n << " ranks: " << r.out << r.err;
    auto lines = by_rank(r.out);
    if (std::string(n) == "4") {
      EXPECT_EQ(lines[0], "accepted: remote size 2, remote ranks sum 5");
      EXPECT_EQ(lines[1], "accepted: remote size 2, remote ranks sum 5");
      EXPECT_EQ(lines[2], "connected: remote size 2, remote ranks sum 1");
      EXPECT_EQ(lines[3], "connected: remote size 2, remote ranks sum 1");
    } else {
      EXPECT_EQ(lines[0], "accepted: remote size 2, remote ranks sum 3");
      EXPECT_EQ(lines[1], "connected: remote size 1, remote ranks sum 0");
      EXPECT_EQ(lines[2], "connected: remote size 1, remote ranks sum 0");
    }
  }
}

// Until dlaunch starts processes for a running job, MPI_Comm_spawn fails at
// once, and the agent says why; the job ends (the program exits 1) instead of
// hanging.
TEST(MpiDynproc, SpawnFailsAtOnceAndSaysWhy) {
  const auto job = unique_job_id("mpispawn");
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "-n", "2", "--mpi", "--job-id", job, MPI_DYNPROC_BIN,
                            "spawn"}),
               60, mpi_worker_env());
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_NE(r.err.find("asked to start processes (" + std::string(MPI_DYNPROC_BIN) +
                       " x1: MPI_Comm_spawn or PMIx_Spawn): dlaunch does not start processes "
                       "for a running job yet, so the call fails"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("spawn failed: MPI_ERR_SPAWN"), std::string::npos) << r.out;
  EXPECT_EQ(wait_job_gone(job, 5), std::vector<pid_t>{});
}

// The keys Open MPI can ask its runtime for, as mpirun registers them and as
// the agents do, at 2 ranks on one node: equal, line by line, for every rank.
TEST(MpiDynproc, JobInfoKeysAreMpirunsOnes) {
  auto d = run(dlaunch_cmd({"-n", "2", "--oversubscribe", "--mpi", PMIX_KEYS_BIN}), 60);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  std::vector<std::string> env = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};
  auto m = run({"mpirun", "--oversubscribe", "-np", "2", "--tag-output", PMIX_KEYS_BIN}, 60, env);
  if (m.exit_code == 127 || m.err.find("No such file") != std::string::npos) {
    GTEST_SKIP() << "no mpirun here: " << m.err;
  }
  ASSERT_EQ(m.exit_code, 0) << m.err;
  // mpirun: "[1,R]<stdout>:text"; dlaunch: "[R] text".
  std::map<int, std::vector<std::string>> theirs, ours;
  std::regex mre(R"(\[\d+,(\d+)\]<stdout>:(.*))");
  for (const auto& l : lines_of(m.out)) {
    std::smatch x;
    if (std::regex_match(l, x, mre)) theirs[std::stoi(x[1])].push_back(x[2]);
  }
  std::regex dre(R"(\[(\d+)\] (.*))");
  for (const auto& l : lines_of(d.out)) {
    std::smatch x;
    if (std::regex_match(l, x, dre)) ours[std::stoi(x[1])].push_back(x[2]);
  }
  ASSERT_EQ(theirs.size(), 2u) << m.out;
  ASSERT_EQ(ours.size(), 2u) << d.out;
  for (int rank : {0, 1}) {
    ASSERT_EQ(ours[rank].size(), 22u) << d.out;
    EXPECT_EQ(ours[rank], theirs[rank]) << "rank " << rank;
  }
  // Not vacuous: the keys of issue 35 are there.
  const std::string all = d.out;
  for (const char* key :
       {"pmix.job.napps: uint32 1", "pmix.node.size: uint32 2", "pmix.offset: uint32 0",
        "pmix.mapby: string BY", "pmix.bindto: string ", "pmix.pmem: uint64 ",
        "self pmix.appnum: uint32 0", "self pmix.grank: rank "}) {
    EXPECT_NE(all.find(key), std::string::npos) << key << "\n" << all;
  }
}

// MPMD: each rank's app number (MPI_APPNUM) and the number of apps, as
// mpirun gives them for `-np 1 a : -np 2 b : -np 1 c` (0, 1, 1, 2; 3 apps),
// with the second app's ranks on node1 (a node's ranks apart).
TEST(MpiDynproc, MpmdAppNumbersAreMpiruns) {
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--mpi", "-n", "1", PMIX_KEYS_BIN, ":", "-n", "2",
                            "--host", "node1", PMIX_KEYS_BIN, ":", "-n", "1", PMIX_KEYS_BIN}),
               60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::map<int, int> app_of = {{0, 0}, {1, 1}, {2, 1}, {3, 2}};
  for (const auto& [rank, app] : app_of) {
    const std::string tag = "[" + std::to_string(rank) + "] ";
    EXPECT_NE(r.out.find(tag + "self pmix.appnum: uint32 " + std::to_string(app)),
              std::string::npos)
        << rank << "\n"
        << r.out;
    EXPECT_NE(r.out.find(tag + "job pmix.job.napps: uint32 3"), std::string::npos) << r.out;
  }
}
