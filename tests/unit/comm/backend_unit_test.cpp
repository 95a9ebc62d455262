// Parts of comm that need no MPI world and no GPU: the collective timeout from
// the environment, and (where comm has NCCL) the NCCL backend's pure helpers.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "comm/process_group.h"
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
    }
  }
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
