#include "comm/worker_env.h"

#include <cstdlib>

#include <gtest/gtest.h>

namespace {

class WorkerEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK",
                          "NNODES", "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                          "DLAUNCH_JOB_ID", "TORCHELASTIC_RUN_ID", "LOCAL_SIZE"}) {
      ::unsetenv(v);
    }
    ::setenv("RANK", "3", 1);
    ::setenv("WORLD_SIZE", "4", 1);
    ::setenv("LOCAL_RANK", "1", 1);
    ::setenv("LOCAL_WORLD_SIZE", "2", 1);
    ::setenv("MASTER_ADDR", "10.0.0.1", 1);
    ::setenv("MASTER_PORT", "29500", 1);
  }
};

}  // namespace

TEST_F(WorkerEnvTest, ReadsTheTorchrunVariables) {
  ::setenv("GROUP_RANK", "1", 1);
  ::setenv("GROUP_WORLD_SIZE", "2", 1);
  ::setenv("TORCHELASTIC_RUN_ID", "run", 1);
  auto e = dlaunch::comm::WorkerEnv::from_env();
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.num_nodes, 2);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.job_id, "run");
}

TEST_F(WorkerEnvTest, MissingOrBadVariablesAreNamed) {
  ::unsetenv("MASTER_PORT");
  try {
    dlaunch::comm::WorkerEnv::from_env();
    FAIL();
  } catch (const dlaunch::comm::EnvError& err) {
    EXPECT_EQ(err.variable(), "MASTER_PORT");
    EXPECT_EQ(err.kind(), dlaunch::comm::ErrorKind::kUsage);
  }
  ::setenv("MASTER_PORT", "29500", 1);
  ::setenv("RANK", "4", 1);
  EXPECT_THROW(dlaunch::comm::WorkerEnv::from_env(),
               dlaunch::comm::EnvError);  // RANK >= WORLD_SIZE
  ::setenv("RANK", "x1", 1);
  EXPECT_THROW(dlaunch::comm::WorkerEnv::from_env(), dlaunch::comm::EnvError);
  // One catch for every error of comm.
  EXPECT_THROW(dlaunch::comm::WorkerEnv::from_env(), dlaunch::comm::Error);
}
