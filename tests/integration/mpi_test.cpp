// Open MPI programs direct-launched by dlaunch --mpi (agents as PMIx servers):
// MPI_COMM_WORLD must be the dlaunch world, with no mpirun anywhere.
#include <filesystem>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "support.h"

using namespace dltest;

namespace {

bool pmix_dirs_left(const std::string& job) {
  for (const auto& e : std::filesystem::directory_iterator("/tmp")) {
    if (e.path().filename().string().rfind("dlaunch-pmix-" + job + "-", 0) == 0) return true;
  }
  return false;
}
}  // namespace

TEST(Mpi, PlainMpiProgramSeesTheDlaunchWorldAcrossLogicalNodes) {
  const auto job = unique_job_id("mpiworld");
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--mpi", "--job-id", job, MPI_HELLO_BIN}), 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::regex re(R"(\[(\d)\] mpi rank (\d)/4, RANK=(\d) WORLD_SIZE=4, allreduce\(rank\)=6)");
  std::set<int> seen;
  for (const auto& line : lines_of(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re)) << line;
    EXPECT_EQ(m[1], m[2]);
    EXPECT_EQ(m[2], m[3]);
    seen.insert(std::stoi(m[2]));
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2, 3}));
  EXPECT_FALSE(pmix_dirs_left(job));
}

// Issue 29: mpirun's command line as users bring it, without --mpi. The
// program links Open MPI, so its ranks are one MPI world, never four
// singletons that each say "rank 0 of 1" and exit 0.
TEST(Mpi, AnOpenMpiProgramStartedWithoutMpiIsOneWorld) {
  auto r = run(dlaunch_cmd({"-np", "4", MPI_HELLO_BIN}), 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("is an Open MPI program (libmpi.so.40)"), std::string::npos) << r.err;
  std::regex re(R"(\[(\d)\] mpi rank (\d)/4, RANK=(\d) WORLD_SIZE=4, allreduce\(rank\)=6)");
  std::set<int> seen;
  for (const auto& line : lines_of(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re)) << line;
    seen.insert(std::stoi(m[2]));
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2, 3}));
  // --no-mpi: the user asked for singletons.
  r = run(dlaunch_cmd({"-np", "2", "--no-mpi", MPI_HELLO_BIN}), 120);
  EXPECT_EQ(r.err.find("is an Open MPI program"), std::string::npos) << r.err;
}

TEST(Mpi, SingleNodeJobNeedsNoFenceThroughTheHead) {
  auto r = run(dlaunch_cmd({"-n", "3", "--mpi", MPI_HELLO_BIN}), 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 3u);
}

TEST(Mpi, MpiAbortEndsTheJobWithItsCodeAndLeavesNothing) {
  const auto job = unique_job_id("mpiabort");
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--mpi", "--job-id", job, MPI_HELLO_BIN, "2"}), 120);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.err.find("rank 2 called MPI_Abort with code 7"), std::string::npos) << r.err;
  EXPECT_EQ(wait_job_gone(job, 2), std::vector<pid_t>{});
  EXPECT_FALSE(pmix_dirs_left(job));
}

namespace {
// "train: loss A -> B (fell Nx); parameters identical on all K ranks" -> N
double loss_fell_by(const std::string& out) {
  auto at = out.find("(fell ");
  return at == std::string::npos ? 0.0 : std::stod(out.substr(at + 6));
}
}  // namespace

TEST(Mpi, TrainConvergesAndKeepsEveryRanksParametersIdentical) {
  auto r = run(dlaunch_cmd({"-H", kLocalhost, "--mpi", TRAIN_BIN, "--backend", "mpi"}), 120,
               mpi_worker_env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(loss_fell_by(r.out), 10.0) << r.out;
  EXPECT_NE(r.out.find("parameters identical on all 4 ranks"), std::string::npos) << r.out;
}

// --backend nccl without NCCL or a GPU: tests/integration/nccl_test.cpp.
