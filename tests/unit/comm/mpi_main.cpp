// main() of comm_mpi_tests, run as `mpirun -np N comm_mpi_tests`: creates the
// MPI ProcessGroup (which initialises MPI) for the whole run, lets every rank
// run every test with only rank 0 printing gtest's report (the other ranks
// print their failed assertions, prefixed with their rank, to stderr), and
// exits non-zero on every rank if any rank failed any test.
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mpi_test_support.h"

namespace comm_test {
namespace {

dlaunch::comm::ProcessGroup* g_pg = nullptr;

// For ranks other than 0: failures only, one line each, with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  // Remembered here: UnitTest::current_test_info() takes the lock that gtest
  // holds while it reports a result.
  void OnTestStart(const ::testing::TestInfo& test) override {
    test_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: %s\n", rank_, test_.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
  std::string test_ = "(outside a test)";
};

}  // namespace

dlaunch::comm::ProcessGroup& pg() { return *g_pg; }

void MpiTest::TearDown() {
  int failed = HasFailure() ? 1 : 0;
  std::vector<int> all(static_cast<std::size_t>(pg().size()));
  pg().all_gather(std::span<const int>(&failed, 1), std::span<int>(all));
  if (pg().rank() != 0) return;
  std::string ranks;
  for (int r = 1; r < pg().size(); ++r) {
    if (all[static_cast<std::size_t>(r)] != 0)
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!ranks.empty()) ADD_FAILURE() << "failed on rank(s) " << ranks << " (see their stderr)";
}

}  // namespace comm_test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<dlaunch::comm::ProcessGroup> group;
  try {
    group = dlaunch::comm::ProcessGroup::create(dlaunch::comm::Backend::kMpi);
  } catch (const dlaunch::comm::CommError& e) {
    std::fprintf(stderr, "comm_mpi_tests: %s\n", e.what());
    return 1;
  }
  comm_test::g_pg = group.get();
  const int rank = group->rank();
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new comm_test::RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  group->all_reduce(std::span<int>(&failed, 1), dlaunch::comm::ReduceOp::kMax);
  if (rank == 0) {
    std::printf("comm_mpi_tests: %d ranks, %s\n", group->size(),
                failed ? "FAILED on at least one rank" : "passed on every rank");
  }
  comm_test::g_pg = nullptr;
  group.reset();
  return failed;
}
