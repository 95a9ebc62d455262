// Where a node's workers run (agent/node_runtime.h), without an agent: on
// the host without an image (the agent's environment, no child of its own),
// and a runtime the node lacks refused at Setup with its name. The container
// itself (the pull as a child of the loop, the keep-alive, the removal) is
// tested with real podman in container_tests.
#include "node_runtime.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "agent_test_support.h"
#include "dlaunch/process.h"

namespace {

namespace proto = dlaunch::proto;
using dlaunch::agent::NodeRuntime;

class NodeRuntimeTest : public ::testing::Test {
 protected:
  NodeRuntime make() {
    return NodeRuntime(clock_, os_,
                       {.send = [this](const proto::Message& m) { sent_.push_back(m); },
                        .pulling = [this] { ++pulls_; },
                        .made = [this] { ++made_; }});
  }

  dltest::ManualClock clock_;
  dltest::FakeOs os_;
  std::vector<proto::Message> sent_;
  int pulls_ = 0;
  int made_ = 0;
};

TEST_F(NodeRuntimeTest, WithoutAnImageTheWorkersRunOnTheHostInTheAgentsEnvironment) {
  NodeRuntime runtime = make();
  ASSERT_EQ(runtime.choose(proto::ContainerSpec{}), std::nullopt);
  EXPECT_FALSE(runtime.contained());
  ASSERT_NE(runtime.runtime(), nullptr);
  EXPECT_EQ(runtime.base_environment(), dlaunch::current_environment());
  EXPECT_FALSE(runtime.child_exited(4242, 0, true));  // no pull of its own
  runtime.teardown();
  runtime.cancel();
  EXPECT_TRUE(sent_.empty());
  EXPECT_EQ(pulls_ + made_, 0);
}

TEST_F(NodeRuntimeTest, ARuntimeTheNodeLacksIsRefusedByName) {
  if (!dlaunch::find_program("enroot", dlaunch::current_environment(), "/").empty())
    GTEST_SKIP() << "enroot is installed here";
  NodeRuntime runtime = make();
  const auto refused =
      runtime.choose(proto::ContainerSpec{.image = "localhost/x:1", .runtime = "enroot"});
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->find("container runtime 'enroot' not found on " + dlaunch::host_name()),
            std::string::npos)
      << *refused;
  EXPECT_EQ(runtime.runtime(), nullptr);
  EXPECT_FALSE(runtime.contained());
}

}  // namespace
