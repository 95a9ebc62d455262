// Parts of comm that need no MPI world and no GPU: the collective timeout from
// the environment, the error types, and (where comm has NCCL) the NCCL
// backend's pure helpers.
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <gtest/gtest.h>

#include "comm/error.h"
#include "comm/process_group.h"
#include "comm/store.h"
#include "comm/worker_env.h"
#ifdef DLAUNCH_WITH_NCCL
#include "backend/nccl/nccl_process_group.h"
#endif

namespace {

class TimeoutEnv : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("DLAUNCH_COLLECTIVE_TIMEOUT"); }
};

}  // namespace

TEST_F(TimeoutEnv, DefaultIsTenMinutesAndTheVariableOverridesIt) {
  unsetenv("DLAUNCH_COLLECTIVE_TIMEOUT");
  EXPECT_EQ(dlaunch::comm::collective_timeout_from_env().count(), 600000);
  setenv("DLAUNCH_COLLECTIVE_TIMEOUT", "2.5", 1);
  EXPECT_EQ(dlaunch::comm::collective_timeout_from_env().count(), 2500);
  setenv("DLAUNCH_COLLECTIVE_TIMEOUT", "0", 1);
  EXPECT_EQ(dlaunch::comm::collective_timeout_from_env().count(), 0);
}

TEST_F(TimeoutEnv, NonsenseIsAnErrorNamingTheVariable) {
  for (const char* bad : {"ten", "-1", "5s", "nan", "1e12"}) {
    setenv("DLAUNCH_COLLECTIVE_TIMEOUT", bad, 1);
    try {
      dlaunch::comm::collective_timeout_from_env();
      ADD_FAILURE() << bad << " was accepted";
    } catch (const dlaunch::comm::CommError& e) {
      EXPECT_NE(std::string(e.what()).find("DLAUNCH_COLLECTIVE_TIMEOUT='" + std::string(bad) + "'"),
                std::string::npos)
          << e.what();
      EXPECT_EQ(e.kind(), dlaunch::comm::ErrorKind::kUsage);
    }
  }
}

// One root for comm's errors, itself a std::runtime_error.
static_assert(std::is_base_of_v<std::runtime_error, dlaunch::comm::Error>);
static_assert(std::is_base_of_v<dlaunch::comm::Error, dlaunch::comm::CommError>);
static_assert(std::is_base_of_v<dlaunch::comm::Error, dlaunch::comm::StoreError>);
static_assert(std::is_base_of_v<dlaunch::comm::Error, dlaunch::comm::EnvError>);

TEST(Errors, KindsHaveNamesAndTheMessagesAreUnchanged) {
  using dlaunch::comm::ErrorKind;
  EXPECT_STREQ(dlaunch::comm::to_string(ErrorKind::kUsage), "usage");
  EXPECT_STREQ(dlaunch::comm::to_string(ErrorKind::kEnvironment), "environment");
  EXPECT_STREQ(dlaunch::comm::to_string(ErrorKind::kInternal), "internal");

  const dlaunch::comm::StoreError store(ErrorKind::kEnvironment, "10.0.0.1:29400", "get(\"k\")",
                                        "timed out after 1.0 s");
  EXPECT_STREQ(store.what(), "store 10.0.0.1:29400: get(\"k\") timed out after 1.0 s");
  EXPECT_EQ(store.kind(), ErrorKind::kEnvironment);
  const dlaunch::comm::EnvError env("RANK", "not set");
  EXPECT_STREQ(env.what(), "RANK: not set");
  EXPECT_EQ(env.kind(), ErrorKind::kUsage);

  try {
    dlaunch::comm::parse_backend("gloo");
    ADD_FAILURE() << "gloo was accepted";
  } catch (const dlaunch::comm::Error& e) {  // one catch for all of comm
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(dynamic_cast<const dlaunch::comm::CommError*>(&e), nullptr);
  }
}

// The constructors without a kind still compile (deprecated) and say kEnvironment.
TEST(Errors, DeprecatedConstructorsStillWork) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const dlaunch::comm::CommError comm_error(2, "barrier()", "boom");
  const dlaunch::comm::StoreError store_error("", "connect", "failed");
#pragma GCC diagnostic pop
  EXPECT_STREQ(comm_error.what(), "rank 2: barrier(): boom");
  EXPECT_EQ(comm_error.kind(), dlaunch::comm::ErrorKind::kEnvironment);
  EXPECT_STREQ(store_error.what(), "store: connect failed");
  EXPECT_EQ(store_error.kind(), dlaunch::comm::ErrorKind::kEnvironment);
}

TEST(Backend, SixteenBitTypesHaveNamesAndSizes) {
  EXPECT_STREQ(dlaunch::comm::to_string(dlaunch::comm::DataType::kFloat16), "float16");
  EXPECT_STREQ(dlaunch::comm::to_string(dlaunch::comm::DataType::kBFloat16), "bfloat16");
  EXPECT_EQ(dlaunch::comm::element_size(dlaunch::comm::DataType::kFloat16), 2u);
  EXPECT_EQ(dlaunch::comm::element_size(dlaunch::comm::DataType::kBFloat16), 2u);
}

#ifdef DLAUNCH_WITH_NCCL
TEST(NcclHelpers, EveryTypeAndOpMapsToNcclsOwn) {
  ncclDataType_t t{};
  ASSERT_TRUE(dlaunch::comm::nccl::nccl_type(dlaunch::comm::DataType::kFloat16, t));
  EXPECT_EQ(t, ncclFloat16);
  ASSERT_TRUE(dlaunch::comm::nccl::nccl_type(dlaunch::comm::DataType::kBFloat16, t));
  EXPECT_EQ(t, ncclBfloat16);
  ASSERT_TRUE(dlaunch::comm::nccl::nccl_type(dlaunch::comm::DataType::kInt64, t));
  EXPECT_EQ(t, ncclInt64);
  EXPECT_FALSE(dlaunch::comm::nccl::nccl_type(static_cast<dlaunch::comm::DataType>(42), t));
  ncclRedOp_t o{};
  ASSERT_TRUE(dlaunch::comm::nccl::nccl_op(dlaunch::comm::ReduceOp::kAvg, o));
  EXPECT_EQ(o, ncclAvg);
  ASSERT_TRUE(dlaunch::comm::nccl::nccl_op(dlaunch::comm::ReduceOp::kMin, o));
  EXPECT_EQ(o, ncclMin);
  EXPECT_FALSE(dlaunch::comm::nccl::nccl_op(static_cast<dlaunch::comm::ReduceOp>(9), o));
}

TEST(NcclHelpers, UniqueIdSurvivesTheStoreAsHex) {
  ncclUniqueId id{};
  for (std::size_t i = 0; i < sizeof id.internal; ++i) id.internal[i] = static_cast<char>(i * 37);
  const std::string hex = dlaunch::comm::nccl::to_hex(id);
  EXPECT_EQ(hex.size(), 2 * sizeof id.internal);
  ncclUniqueId back{};
  ASSERT_TRUE(dlaunch::comm::nccl::from_hex(hex, back));
  EXPECT_EQ(std::string(back.internal, sizeof back.internal),
            std::string(id.internal, sizeof id.internal));
  EXPECT_FALSE(dlaunch::comm::nccl::from_hex(hex.substr(1), back));
  EXPECT_FALSE(dlaunch::comm::nccl::from_hex(std::string(hex.size(), 'g'), back));
}

TEST(NcclHelpers, EachGroupAndRestartMeetsUnderItsOwnKey) {
  EXPECT_EQ(dlaunch::comm::nccl::unique_id_key(0, ""), "comm/nccl/restart0/group0/unique_id");
  EXPECT_NE(dlaunch::comm::nccl::unique_id_key(1, "0"), dlaunch::comm::nccl::unique_id_key(0, "0"));
  EXPECT_NE(dlaunch::comm::nccl::unique_id_key(0, "1"), dlaunch::comm::nccl::unique_id_key(0, "0"));
}
#endif
