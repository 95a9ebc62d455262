// A new head taking a running job over (ControllerConfig::recover, dlaunch
// attach --recover): each agent it starts is asked to Reattach instead of
// Setup, the job's agents answer Resumed and replay their ranks, and the job
// goes on with no Start. On fake links and a manual clock.
#include <gtest/gtest.h>

#include "controller_test_support.h"

namespace dltest {
namespace {

class ControllerTakeoverTest : public ControllerTest {
 protected:
  dlaunch::ControllerConfig takeover_config() {
    dlaunch::ControllerConfig cfg;
    cfg.recover = true;
    cfg.store_secret = "the-jobs-secret";
    cfg.head_grace = std::chrono::seconds(60);
    return cfg;
  }
  void hellos() {
    controller_->start();
    for (std::size_t i = 0; i < nodes(); ++i) {
      link(i).deliver(proto::Hello{.agent_version = dlaunch::kVersion, .hostname = "h"});
    }
  }
  proto::Resumed resumed(std::uint16_t store_port = 0) {
    proto::Resumed r{.pid = 77, .headless_ms = 2500, .held_bytes = 12};
    r.ready.store_port = store_port;
    return r;
  }
};

TEST_F(ControllerTakeoverTest, EachAgentIsAskedToReattachWithTheJobsSecretNotSetUp) {
  make(2, 2, takeover_config());
  hellos();
  for (std::size_t i = 0; i < nodes(); ++i) {
    EXPECT_TRUE(link(i).sent_of<proto::Setup>().empty()) << i;
    const auto r = link(i).sent_of<proto::Reattach>();
    ASSERT_EQ(r.size(), 1u) << i;
    EXPECT_EQ(r[0].job_id, "t");
    EXPECT_EQ(r[0].node_rank, static_cast<int>(i));
    EXPECT_EQ(r[0].secret, "the-jobs-secret");
    EXPECT_GT(r[0].head_pid, 0);
  }
}

TEST_F(ControllerTakeoverTest, TheJobGoesOnWithoutAStartAndEndsAsAnyJob) {
  make(2, 2, takeover_config());
  hellos();
  link(0).deliver(resumed(29400));
  EXPECT_FALSE(controller_->finished());
  link(1).deliver(resumed());
  // Its ranks never stopped: nothing starts them again.
  for (std::size_t i = 0; i < nodes(); ++i) EXPECT_TRUE(link(i).sent_of<proto::Start>().empty());
  // Each agent replays its ranks: Started for each, Exited for those that ended.
  link(0).deliver(proto::Started{.rank = 0, .pid = 1000});
  link(0).deliver(proto::Started{.rank = 1, .pid = 1001});
  link(1).deliver(proto::Started{.rank = 2, .pid = 1002});
  link(1).deliver(proto::Started{.rank = 3, .pid = 1003});
  exited(1, 0);  // ended while the job had no head
  EXPECT_TRUE(link(0).sent_of<proto::Shutdown>().empty());
  exited(0, 0);
  exited(2, 0);
  exited(3, 0);
  for (std::size_t i = 0; i < nodes(); ++i) {
    EXPECT_EQ(link(i).sent_of<proto::Shutdown>().size(), 1u) << i;
    link(i).deliver(proto::Done{});
    link(i).drop("EOF");
  }
  EXPECT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->exit_status(), 0);
}

TEST_F(ControllerTakeoverTest, ARankThatFailedWhileHeadlessFailsTheJobOnceHeard) {
  make(2, 1, takeover_config());
  hellos();
  link(0).deliver(resumed());
  link(1).deliver(resumed());
  link(0).deliver(proto::Started{.rank = 0, .pid = 1000});
  link(1).deliver(proto::Started{.rank = 1, .pid = 1001});
  exited(1, 3);
  // Fail-fast as ever: every node is told to stop.
  EXPECT_EQ(link(0).sent_of<proto::Abort>().size(), 1u);
  agents_stop_everything();
  EXPECT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->exit_status(), 3);
  EXPECT_EQ(controller_->cause().exit.rank, 1);
}

TEST_F(ControllerTakeoverTest, ANodeWhoseAgentIsGoneFailsTheTakeOverAndStopsTheOthers) {
  make(2, 1, takeover_config());
  hellos();
  link(0).deliver(resumed());
  link(0).deliver(proto::Started{.rank = 0, .pid = 1000});
  // The relay found no agent of the job there (its grace had passed).
  link(1).deliver(proto::Fatal{.message = "cannot take job t over on h: no agent of job t runs "
                                          "node 1 here (it ended, or its --head-grace passed)"});
  EXPECT_EQ(link(0).sent_of<proto::Abort>().size(), 1u);
  EXPECT_NE(controller_->cause().message.find("no agent of job t runs node 1"), std::string::npos)
      << controller_->cause().message;
  agents_stop_everything();
  EXPECT_TRUE(controller_->finished());
  EXPECT_NE(controller_->exit_status(), 0);
}

TEST_F(ControllerTakeoverTest, AResumedThatNoTakeOverAskedForFailsTheJob) {
  make(1, 1);
  controller_->start();
  link(0).deliver(proto::Hello{.agent_version = dlaunch::kVersion, .hostname = "h"});
  ASSERT_EQ(link(0).sent_of<proto::Setup>().size(), 1u);
  link(0).deliver(resumed());
  EXPECT_NE(controller_->cause().message.find("Resumed"), std::string::npos)
      << controller_->cause().message;
}

// The Setup of a job with --head-grace carries it, and the secret every
// node's door asks a new head to prove.
TEST_F(ControllerTakeoverTest, AJobWithAHeadGraceGivesEveryNodeTheGraceAndTheSecret) {
  dlaunch::ControllerConfig cfg;
  cfg.head_grace = std::chrono::seconds(300);
  cfg.store_secret = "s";
  make(2, 1, cfg);
  controller_->start();
  for (std::size_t i = 0; i < nodes(); ++i) {
    link(i).deliver(proto::Hello{.agent_version = dlaunch::kVersion, .hostname = "h"});
    const auto s = link(i).sent_of<proto::Setup>();
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].head_grace_ms, 300000u);
    EXPECT_EQ(s[0].reattach_secret, "s");
    // Only node 0 hosts the store.
    EXPECT_EQ(s[0].store_secret.empty(), i != 0);
  }
}

TEST_F(ControllerTakeoverTest, AJobWithoutAHeadGraceGivesNoSecretBeyondNodeZero) {
  make(1, 1);
  controller_->start();
  link(0).deliver(proto::Hello{.agent_version = dlaunch::kVersion, .hostname = "h"});
  EXPECT_EQ(link(0).sent_of<proto::Setup>().at(0).head_grace_ms, 0u);
  EXPECT_TRUE(link(0).sent_of<proto::Setup>().at(0).reattach_secret.empty());
}

}  // namespace
}  // namespace dltest
