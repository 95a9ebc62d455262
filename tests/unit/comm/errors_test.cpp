// Errors of the MPI ProcessGroup and of create(): typed, naming the rank, the
// operation and the reason.
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>

#include "backend/mpi/mpi_process_group.h"
#include "mpi_test_support.h"
#ifdef DLAUNCH_WITH_NCCL
#include "comm/nccl.h"
#endif

namespace comm_test {
namespace {

using dlaunch::comm::CommError;
using dlaunch::comm::DataType;
using dlaunch::comm::ErrorKind;
using ::testing::HasSubstr;

// Every test a fixture of MpiTest: rank 0 reports the other ranks' failures.
using CommErrorTest = MpiTest;
using ParseBackendTest = MpiTest;
using CreateTest = MpiTest;
using LauncherWorldTest = MpiTest;

// Sets (or unsets, with nullopt) environment variables for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Runs f, expecting a CommError; returns it (or a placeholder after a failure).
template <typename F>
CommError catch_comm_error(F&& f) {
  try {
    f();
  } catch (const CommError& e) {
    return e;
  }
  ADD_FAILURE() << "no CommError thrown";
  return {ErrorKind::kInternal, -1, "none", "none"};
}

TEST_F(CommErrorTest, WhatNamesRankOperationAndReason) {
  const CommError e(ErrorKind::kEnvironment, 3, "all_reduce(float32, 1024 elements)", "boom");
  EXPECT_STREQ(e.what(), "rank 3: all_reduce(float32, 1024 elements): boom");
  EXPECT_EQ(e.rank(), 3);
  EXPECT_EQ(e.op(), "all_reduce(float32, 1024 elements)");
  EXPECT_EQ(e.kind(), ErrorKind::kEnvironment);
  EXPECT_STREQ(CommError(ErrorKind::kUsage, -1, "create(nccl)", "no").what(), "create(nccl): no");
}

TEST_F(CommErrorTest, Names) {
  EXPECT_STREQ(dlaunch::comm::to_string(DataType::kFloat32), "float32");
  EXPECT_STREQ(dlaunch::comm::to_string(DataType::kInt64), "int64");
  EXPECT_STREQ(dlaunch::comm::to_string(dlaunch::comm::ReduceOp::kAvg), "avg");
  EXPECT_STREQ(dlaunch::comm::to_string(dlaunch::comm::Backend::kNccl), "nccl");
  EXPECT_EQ(dlaunch::comm::element_size(DataType::kFloat64), 8u);
  EXPECT_EQ(dlaunch::comm::element_size(DataType::kInt32), 4u);
  static_assert(dlaunch::comm::data_type_of<float>() == DataType::kFloat32);
  static_assert(dlaunch::comm::data_type_of<const double>() == DataType::kFloat64);
  static_assert(dlaunch::comm::data_type_of<int>() == DataType::kInt32);
  static_assert(dlaunch::comm::data_type_of<long long>() == DataType::kInt64);
  static_assert(dlaunch::comm::data_type_of<std::int64_t>() == DataType::kInt64);
  static_assert(!dlaunch::comm::CommElement<unsigned>);
  static_assert(!dlaunch::comm::CommElement<short>);
}

TEST_F(ParseBackendTest, KnowsMpiAndNccl) {
  EXPECT_EQ(dlaunch::comm::parse_backend("mpi"), dlaunch::comm::Backend::kMpi);
  EXPECT_EQ(dlaunch::comm::parse_backend("nccl"), dlaunch::comm::Backend::kNccl);
  const CommError e = catch_comm_error([] { dlaunch::comm::parse_backend("gloo"); });
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  EXPECT_THAT(e.what(), HasSubstr("'gloo'"));
  EXPECT_THAT(e.what(), HasSubstr("choices: mpi, nccl"));
}

TEST_F(CreateTest, NcclWithoutTheBackendSaysSo) {
  if (dlaunch::comm::nccl_available())
    GTEST_SKIP() << "this build has the NCCL backend (tests/integration/nccl_test.cpp)";
  const CommError e =
      catch_comm_error([] { dlaunch::comm::ProcessGroup::create(dlaunch::comm::Backend::kNccl); });
  EXPECT_THAT(e.what(), HasSubstr("no NCCL backend"));
  EXPECT_EQ(e.op(), "create(nccl)");
}

// The check create() makes after MPI_Init: run here against the real MPI
// rank and size with RANK / WORLD_SIZE set as a launcher would.
TEST_F(LauncherWorldTest, MatchingOrUnsetValuesPass) {
  const int me = pg().rank(), n = pg().size();
  {
    ScopedEnv r("RANK", std::nullopt), w("WORLD_SIZE", std::nullopt);
    EXPECT_NO_THROW(dlaunch::comm::mpi::check_launcher_world(me, n));
  }
  ScopedEnv r("RANK", std::to_string(me)), w("WORLD_SIZE", std::to_string(n));
  EXPECT_NO_THROW(dlaunch::comm::mpi::check_launcher_world(me, n));
}

TEST_F(LauncherWorldTest, WrongRankNamesBothValues) {
  const int me = pg().rank(), n = pg().size();
  ScopedEnv r("RANK", std::to_string((me + 1) % (n + 1))), w("WORLD_SIZE", std::to_string(n));
  const CommError e = catch_comm_error([&] { dlaunch::comm::mpi::check_launcher_world(me, n); });
  const std::string env =
      "RANK=" + std::to_string((me + 1) % (n + 1)) + " WORLD_SIZE=" + std::to_string(n);
  EXPECT_THAT(e.what(), HasSubstr(env));
  EXPECT_THAT(e.what(), HasSubstr("rank " + std::to_string(me) + " of size " + std::to_string(n)));
  EXPECT_THAT(e.what(), HasSubstr("did not join"));
  EXPECT_EQ(e.op(), "create(mpi)");
}

TEST_F(LauncherWorldTest, WrongWorldSize) {
  const int me = pg().rank(), n = pg().size();
  ScopedEnv r("RANK", std::nullopt), w("WORLD_SIZE", std::to_string(n + 3));
  const CommError e = catch_comm_error([&] { dlaunch::comm::mpi::check_launcher_world(me, n); });
  EXPECT_THAT(e.what(), HasSubstr("WORLD_SIZE=" + std::to_string(n + 3)));
  EXPECT_THAT(e.what(), HasSubstr("of size " + std::to_string(n)));
}

TEST_F(LauncherWorldTest, NotAnInteger) {
  ScopedEnv r("RANK", "zero");
  const CommError e = catch_comm_error([] { dlaunch::comm::mpi::check_launcher_world(0, 1); });
  EXPECT_THAT(e.what(), HasSubstr("RANK='zero' is not an integer"));
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
}

TEST_F(LauncherWorldTest, LocalRank) {
  ScopedEnv l("LOCAL_RANK", "2"), o("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  EXPECT_EQ(dlaunch::comm::mpi::local_rank_from_env(0, 4), 2);
  {
    ScopedEnv none("LOCAL_RANK", std::nullopt);
    EXPECT_EQ(dlaunch::comm::mpi::local_rank_from_env(0, 4), 1);
    ScopedEnv none2("OMPI_COMM_WORLD_LOCAL_RANK", std::nullopt);
    EXPECT_EQ(dlaunch::comm::mpi::local_rank_from_env(0, 4), 0);
  }
  ScopedEnv bad("LOCAL_RANK", "4");
  const CommError e = catch_comm_error([] { dlaunch::comm::mpi::local_rank_from_env(0, 4); });
  EXPECT_THAT(e.what(), HasSubstr("LOCAL_RANK=4 is out of range [0, 4)"));
}

using Errors = MpiTest;

TEST_F(Errors, BadArgumentsNameRankAndOperation) {
  const int n = pg().size();
  const std::string rank = "rank " + std::to_string(pg().rank()) + ": ";
  std::vector<float> buf(4);
  CommError e = catch_comm_error([&] { pg().broadcast(std::span<float>(buf), n); });
  EXPECT_EQ(e.rank(), pg().rank());
  EXPECT_EQ(e.op(), "broadcast(float32, 4 elements, root " + std::to_string(n) + ")");
  EXPECT_EQ(std::string(e.what()),
            rank + e.op() + ": root is not in [0, " + std::to_string(n) + ")");
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);

  e = catch_comm_error([&] { pg().send(buf.data(), 4, DataType::kFloat32, -1, 0); });
  EXPECT_THAT(e.what(), HasSubstr("send(float32, 4 elements, dst -1, tag 0): dst is not in"));
  e = catch_comm_error([&] { pg().recv(buf.data(), 4, DataType::kFloat32, 0, -5); });
  EXPECT_THAT(e.what(), HasSubstr("tag is not in"));
  e = catch_comm_error(
      [&] { pg().all_reduce(nullptr, 3, DataType::kInt32, dlaunch::comm::ReduceOp::kMax); });
  EXPECT_EQ(std::string(e.what()), rank + "all_reduce(int32, 3 elements, max): buf is null");
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  e = catch_comm_error([&] {
    pg().all_reduce(buf.data(), 4, static_cast<DataType>(42), dlaunch::comm::ReduceOp::kSum);
  });
  EXPECT_THAT(e.what(), HasSubstr("invalid data type"));
  e = catch_comm_error(
      [&] { pg().all_reduce(buf.data(), 4, DataType::kBFloat16, dlaunch::comm::ReduceOp::kSum); });
  EXPECT_THAT(e.what(), HasSubstr("bfloat16 is not supported by the mpi backend"));
  e = catch_comm_error([&] {
    pg().all_reduce(buf.data(), 4, DataType::kFloat32, static_cast<dlaunch::comm::ReduceOp>(9));
  });
  EXPECT_THAT(e.what(), HasSubstr("invalid reduce op"));

  std::vector<float> wrong(4 * static_cast<std::size_t>(n) + 1);
  e = catch_comm_error(
      [&] { pg().all_gather(std::span<const float>(buf), std::span<float>(wrong)); });
  EXPECT_THAT(e.what(), HasSubstr("all_gather(float32, 4 elements): recv has"));
  e = catch_comm_error([&] {
    pg().reduce_scatter(std::span<const float>(wrong), std::span<float>(buf),
                        dlaunch::comm::ReduceOp::kSum);
  });
  EXPECT_THAT(e.what(), HasSubstr("reduce_scatter(float32, 4 elements): send has"));
  // Overlapping reduce_scatter buffers.
  std::vector<float> big(4 * static_cast<std::size_t>(n));
  e = catch_comm_error([&] {
    pg().reduce_scatter(big.data(), big.data() + 1, 4, DataType::kFloat32,
                        dlaunch::comm::ReduceOp::kSum);
  });
  EXPECT_THAT(e.what(), HasSubstr("overlap"));
}

TEST_F(Errors, MpiErrorsCarryMpiText) {
  if (pg().size() < 2) GTEST_SKIP() << "needs two ranks";
  std::vector<std::int32_t> ten(10, 5), five(5);
  if (pg().rank() == 0) {
    pg().send(std::span<const std::int32_t>(ten), 1, 11);   // longer than rank 1 takes
    pg().send(std::span<const std::int32_t>(five), 1, 12);  // shorter than rank 1 wants
    pg().send(std::span<const std::int32_t>(five), 1, 13);  // the link still works
  } else if (pg().rank() == 1) {
    CommError e = catch_comm_error([&] { pg().recv(std::span<std::int32_t>(five), 0, 11); });
    EXPECT_THAT(e.what(),
                HasSubstr("rank 1: recv(int32, 5 elements, src 0, tag 11): MPI_Recv failed: "));
    EXPECT_THAT(e.what(), HasSubstr("MPI_ERR_TRUNCATE"));
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);  // the ranks' calls do not match
    e = catch_comm_error([&] { pg().recv(std::span<std::int32_t>(ten), 0, 12); });
    EXPECT_THAT(e.what(), HasSubstr("received 5 elements, expected 10"));
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    std::vector<std::int32_t> ok(5);
    pg().recv(std::span<std::int32_t>(ok), 0, 13);
    EXPECT_EQ(ok, std::vector<std::int32_t>(5));
  }
}

#ifdef DLAUNCH_WITH_NCCL
// comm/nccl.h's accessors on a group of another backend: a CommError naming
// the call and the group's backend, before anything touches CUDA or NCCL.
TEST_F(CommErrorTest, NcclAccessorsRefuseAnMpiGroup) {
  CommError e = catch_comm_error([&] { dlaunch::comm::nccl_communicator(pg()); });
  EXPECT_THAT(e.what(), HasSubstr("nccl_communicator"));
  EXPECT_THAT(e.what(), HasSubstr("the group's backend is mpi, not nccl"));
  e = catch_comm_error([&] { dlaunch::comm::nccl_stream(pg()); });
  EXPECT_THAT(e.what(), HasSubstr("nccl_stream"));
  e = catch_comm_error([&] { dlaunch::comm::cuda_device(pg()); });
  EXPECT_THAT(e.what(), HasSubstr("cuda_device"));
  e = catch_comm_error([&] { dlaunch::comm::nccl_check(pg(), ncclSuccess, "ncclAllReduce"); });
  EXPECT_THAT(e.what(), HasSubstr("nccl_check"));
  EXPECT_THAT(e.what(), HasSubstr("not nccl"));
}
#endif

// The harness itself: a failure on one rank other than 0 must show in rank 0's
// report and fail the whole run (CTest comm_mpi_failure_reported sets this).
using Harness = MpiTest;

TEST_F(Harness, FailureOnOneRankFailsTheRun) {
  const char* rank = std::getenv("COMM_TEST_FAIL_ON_RANK");
  if (rank == nullptr) GTEST_SKIP() << "set COMM_TEST_FAIL_ON_RANK=R to inject a failure on rank R";
  EXPECT_NE(pg().rank(), std::atoi(rank)) << "injected failure";
}

}  // namespace
}  // namespace comm_test
