// Code written before comm moved into dlaunch::comm: it says `comm::`, which
// the public headers keep working for one release through the deprecated
// global alias `namespace comm = dlaunch::comm` (DLAUNCH_COMM_NO_ALIAS is not
// defined in this file). namespace_no_alias_test.cpp is the other side.
#include <string>
#include <type_traits>

#include <gtest/gtest.h>

#include "comm/process_group.h"
#include "comm/store.h"
#include "comm/worker_env.h"
#ifdef DLAUNCH_WITH_NCCL
#include "comm/nccl.h"
#endif

static_assert(std::is_same_v<comm::ProcessGroup, dlaunch::comm::ProcessGroup>);
static_assert(std::is_same_v<comm::CommError, dlaunch::comm::CommError>);
static_assert(std::is_same_v<comm::StoreError, dlaunch::comm::StoreError>);
static_assert(std::is_same_v<comm::EnvError, dlaunch::comm::EnvError>);
static_assert(std::is_same_v<comm::WorkerEnv, dlaunch::comm::WorkerEnv>);

TEST(NamespaceAlias, TheOldSpellingNamesTheSameApi) {
  EXPECT_EQ(comm::parse_backend("mpi"), dlaunch::comm::Backend::kMpi);
  EXPECT_STREQ(comm::to_string(comm::ReduceOp::kAvg), "avg");
  try {
    comm::parse_backend("gloo");
    ADD_FAILURE() << "gloo was accepted";
  } catch (const comm::CommError& e) {
    EXPECT_EQ(std::string(e.what()), "parse_backend: unknown backend 'gloo' (choices: mpi, nccl)");
  }
}
