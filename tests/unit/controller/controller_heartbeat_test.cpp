// The head's side of the heartbeats, without processes or real time.
#include "controller_test_support.h"

using namespace dltest;
using std::chrono::milliseconds;
namespace proto = dlaunch::proto;

TEST_F(ControllerTest, ASilentNodeIsLostAtTheHeartbeatTimeoutAndAChattyOneIsNot) {
  make(2, 1, {.heartbeat_timeout = milliseconds(3000)});
  start_job();
  // Node 1 keeps talking; node 0 says nothing more.
  for (int t = 0; t < 2; ++t) {
    clock_.advance(milliseconds(1000));
    link(1).deliver(proto::Heartbeat{});
  }
  clock_.advance(milliseconds(1000));  // 3000 ms of silence: not yet more than the timeout
  link(1).deliver(proto::Heartbeat{});
  EXPECT_TRUE(link(0).is_open());
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone);
  clock_.advance(milliseconds(1));
  EXPECT_FALSE(link(0).is_open());
  EXPECT_EQ(link(0).read_pending_calls, 1) << "what node 0 sent must be read before it is lost";
  EXPECT_TRUE(link(1).is_open());
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNode);
  EXPECT_EQ(controller_->cause().message,
            "lost contact with the agent on node 0 (host0): no heartbeat for 3.0 s");
  EXPECT_EQ(link(1).sent_of<proto::Abort>().size(), 1u);
}

TEST_F(ControllerTest, HeartbeatsWaitingUnreadSaveANodeFromBeingDeclaredLost) {
  make(1, 1, {.heartbeat_timeout = milliseconds(3000)});
  start_job();
  // The head was stalled: the agent's heartbeat arrived but is still unread
  // when the timer runs.
  link(0).on_read_pending = [this] { link(0).deliver(proto::Heartbeat{}); };
  clock_.advance(milliseconds(3001));
  EXPECT_EQ(link(0).read_pending_calls, 1);
  EXPECT_TRUE(link(0).is_open());
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone);
}

TEST_F(ControllerTest, HeartbeatsGoOutEveryThirdOfTheTimeout) {
  make(1, 1, {.heartbeat_timeout = milliseconds(3000)});
  start_job();
  const auto heartbeats = [this] { return link(0).sent_of<proto::Heartbeat>().size(); };
  EXPECT_EQ(heartbeats(), 0u);
  // The first goes out at once (within a millisecond), then one a second.
  for (int k = 1; k <= 5; ++k) {
    link(0).deliver(proto::Heartbeat{});
    clock_.advance(milliseconds(1000));
    EXPECT_EQ(heartbeats(), static_cast<std::size_t>(k));
  }
  EXPECT_EQ(link(0).sent_of<proto::Setup>().at(0).heartbeat_interval_ms, 1000u);
  EXPECT_EQ(link(0).sent_of<proto::Setup>().at(0).heartbeat_timeout_ms, 3000u);
}

TEST_F(ControllerTest, WithoutATimeoutNoNodeIsEverDeclaredSilent) {
  make(1, 1, {.heartbeat_timeout = milliseconds(0)});
  start_job();
  clock_.advance(std::chrono::hours(24));
  EXPECT_TRUE(link(0).is_open());
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone);
}

TEST_F(ControllerTest, ANodeThatIsDoneIsNoLongerWatched) {
  make(2, 1, {.heartbeat_timeout = milliseconds(3000)});
  start_job();
  exited(0, 0);
  exited(1, 0);
  link(0).deliver(proto::Done{});  // node 0 is done but its channel stays open a while
  clock_.advance(milliseconds(2000));
  link(1).deliver(proto::Heartbeat{});
  clock_.advance(milliseconds(2000));
  EXPECT_EQ(link(0).read_pending_calls, 0);
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone);
}

// Before its Hello an agent can send nothing (a slow login, a busy machine):
// the start's deadline bounds that time, not the heartbeat timeout; from its
// Hello on, the node is watched.
// The agent heartbeats from its Ready on; before, it may be starting the
// node's container (an image's pull) for longer than the heartbeat timeout,
// which the start's deadline bounds.
TEST_F(ControllerTest, ANodeIsWatchedFromItsReadyAndTheStartTimeoutBoundsTheTimeBefore) {
  make(2, 1, {.heartbeat_timeout = milliseconds(3000), .start_timeout = milliseconds(20000)});
  controller_->start();
  link(1).deliver(proto::Hello{.agent_version = dlaunch::kVersion, .hostname = "h"});
  // Node 0's agent has not run yet; node 1's sets up its node, saying nothing.
  clock_.advance(milliseconds(5000));
  link(0).deliver(proto::Hello{.agent_version = dlaunch::kVersion, .hostname = "h"});
  clock_.advance(milliseconds(5000));
  EXPECT_TRUE(link(0).is_open());
  EXPECT_TRUE(link(1).is_open());
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone);
  // Node 0 is ready, then says nothing more: lost at the heartbeat timeout
  // counted from its Ready; node 1 is still within the start's deadline.
  link(0).deliver(proto::Ready{});
  clock_.advance(milliseconds(2000));
  EXPECT_TRUE(link(0).is_open());
  clock_.advance(milliseconds(1001));
  EXPECT_FALSE(link(0).is_open());
  EXPECT_EQ(controller_->cause().message,
            "lost contact with the agent on node 0 (host0): no heartbeat for 3.0 s");
}

TEST_F(ControllerTest, AnAgentThatNeverSaysHelloIsGivenUpAtTheStartTimeout) {
  make(1, 1, {.heartbeat_timeout = milliseconds(3000), .start_timeout = milliseconds(20000)});
  controller_->start();
  clock_.advance(milliseconds(19000));
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone);
  clock_.advance(milliseconds(1001));
  EXPECT_NE(controller_->cause().kind, dlaunch::CauseKind::kNone);
  EXPECT_NE(controller_->cause().message.find("every agent to become ready"), std::string::npos)
      << controller_->cause().message;
}
