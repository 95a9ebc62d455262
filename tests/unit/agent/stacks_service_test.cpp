// The stacks as a node service (agent/stacks.h), without an agent: the
// head's CollectStacks answered with every running rank's stack or why
// there is none, within the request's time. The fake OS starts nothing: the
// stack tool is an executable of that name on PATH that never answers.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "../seams/manual_clock.h"
#include "../seams/scoped_env.h"
#include "agent_test_support.h"
#include "dlaunch/private_dir.h"
#include "fake_node.h"
#include "stacks.h"

namespace {

namespace proto = dlaunch::proto;
using std::chrono::milliseconds;

class StacksServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tools_ = dlaunch::make_private_dir("/tmp", "dlaunch-stacks-service-");
    const auto tool = tools_ / "eu-stack";
    std::ofstream(tool) << "#!/bin/sh\nexit 1\n";
    ::chmod(tool.c_str(), 0755);
    path_.emplace(
        std::initializer_list<std::pair<std::string, std::string>>{{"PATH", tools_.string()}});
  }
  void TearDown() override {
    path_.reset();
    std::filesystem::remove_all(tools_);
  }
  std::vector<proto::Stacks> answers() const { return node_.sent_of<proto::Stacks>(); }

  std::filesystem::path tools_;
  std::optional<dltest::ScopedEnv> path_;
  boost::asio::io_context io_;
  dltest::ManualClock clock_;
  dltest::FakeOs os_;
  dltest::FakeNode node_;
  dlaunch::agent::StacksService service_{io_, clock_, os_, node_};
};

TEST_F(StacksServiceTest, WithNoRankRunningTheAnswerComesAtOnce) {
  ASSERT_TRUE(service_.handle(proto::Message{proto::CollectStacks{.request_id = 4}}));
  io_.poll();
  ASSERT_EQ(answers().size(), 1u);
  EXPECT_EQ(answers()[0].request_id, 4u);
  EXPECT_EQ(answers()[0].tool, "eu-stack");
  EXPECT_TRUE(answers()[0].ranks.empty());
  EXPECT_FALSE(service_.handle(proto::Message{proto::Heartbeat{}}));
}

TEST_F(StacksServiceTest, AToolThatDoesNotAnswerIsKilledAtItsLimitAndSaidSo) {
  node_.workers = {{.rank = 3, .pid = 4242, .program = "/bin/true"}};
  ASSERT_TRUE(
      service_.handle(proto::Message{proto::CollectStacks{.request_id = 9, .timeout_ms = 2000}}));
  ASSERT_EQ(os_.procs.size(), 1u);
  EXPECT_EQ(os_.procs[0].argv,
            (std::vector<std::string>{(tools_ / "eu-stack").string(), "-p", "4242"}));
  clock_.advance(milliseconds(999));
  io_.poll();
  EXPECT_TRUE(answers().empty());
  clock_.advance(milliseconds(1));  // the tool's limit: half the request's time
  io_.poll();
  ASSERT_EQ(answers().size(), 1u);
  ASSERT_EQ(answers()[0].ranks.size(), 1u);
  EXPECT_EQ(answers()[0].ranks[0].rank, 3);
  EXPECT_EQ(answers()[0].ranks[0].pid, 4242);
  EXPECT_EQ(answers()[0].ranks[0].error, "eu-stack did not finish within 1000 ms");
  bool killed = false;
  for (const auto& s : os_.signals) killed |= s.target == os_.procs[0].pid && s.sig == SIGKILL;
  EXPECT_TRUE(killed);
}

}  // namespace
