// A program that defines DLAUNCH_COMM_NO_ALIAS before including comm's
// headers gets no global `comm` from them: this file declares a `comm` of its
// own, which would not compile next to the alias (a namespace alias cannot be
// reopened as a namespace), and uses comm's API as dlaunch::comm.
// tests/unit/comm/CMakeLists.txt also compiles no_alias_misuse.cpp, which says
// `comm::` under DLAUNCH_COMM_NO_ALIAS, and expects the compiler to refuse it.
#ifndef DLAUNCH_COMM_NO_ALIAS
#define DLAUNCH_COMM_NO_ALIAS
#endif

#include <string>

#include <gtest/gtest.h>

#include "comm/process_group.h"
#include "comm/store.h"
#include "comm/worker_env.h"
#ifdef DLAUNCH_WITH_NCCL
#include "comm/nccl.h"
#endif

// The name a user's program is likely to have already.
namespace comm {
int users_own() { return 42; }
}  // namespace comm

TEST(NamespaceNoAlias, CommIsTheProgramsOwnAndTheApiIsDlaunchComm) {
  EXPECT_EQ(comm::users_own(), 42);
  EXPECT_EQ(dlaunch::comm::parse_backend("nccl"), dlaunch::comm::Backend::kNccl);
  EXPECT_EQ(dlaunch::comm::element_size(dlaunch::comm::DataType::kFloat64), 8u);
  EXPECT_EQ(std::string(dlaunch::comm::EnvError("RANK", "not set").what()), "RANK: not set");
}
