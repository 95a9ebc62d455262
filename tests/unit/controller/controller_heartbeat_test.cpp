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

// Before its Hello an agent can send nothing (a slow login, a busy machine).
// The agent heartbeats from its Ready on (or its image's pull, below);
// before, it may be starting the node's container (a slow storage driver
// copying a large image) for longer than the heartbeat timeout, which the
// start's deadline bounds.
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

// A node whose image is pulled (ImagePull) is watched from the pull's start
// (the agent heartbeats while it pulls), and its share of the start's
// deadline grows by the pull's time: --start-timeout bounds the rest of its
// start.
TEST_F(ControllerTest, APullingNodeHasTheStartTimeoutPlusItsPullAndIsWatchedMeanwhile) {
  make(2, 1, {.heartbeat_timeout = milliseconds(3000), .start_timeout = milliseconds(10000)});
  controller_->start();
  for (std::size_t i = 0; i < 2; ++i) {
    link(i).deliver(proto::Hello{.agent_version = dlaunch::kVersion, .hostname = "h"});
  }
  link(0).deliver(proto::Ready{});
  clock_.advance(milliseconds(2000));
  link(1).deliver(proto::ImagePull{.image = "r:5000/img:1"});
  // A pull of 15 s, the node heartbeating (as node 0 does, ready).
  for (int t = 0; t < 15; ++t) {
    clock_.advance(milliseconds(1000));
    link(0).deliver(proto::Heartbeat{});
    link(1).deliver(proto::Heartbeat{});
  }
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone) << controller_->cause().message;
  link(1).deliver(proto::ImagePull{.image = "r:5000/img:1", .done = true});
  // Its deadline: 10 s + the 15 s of its pull, from the start.
  for (int t = 17; t < 25; ++t) {
    clock_.advance(milliseconds(1000));
    link(0).deliver(proto::Heartbeat{});
    link(1).deliver(proto::Heartbeat{});
  }
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone) << controller_->cause().message;
  clock_.advance(milliseconds(2));
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);
  EXPECT_EQ(controller_->cause().message,
            "gave up waiting 10.0 s for every agent to become ready; not ready: node 1 (host1)");
}

TEST_F(ControllerTest, ANodeSilentWhileItPullsIsLostAtTheHeartbeatTimeout) {
  make(1, 1, {.heartbeat_timeout = milliseconds(3000), .start_timeout = milliseconds(60000)});
  controller_->start();
  link(0).deliver(proto::Hello{.agent_version = dlaunch::kVersion, .hostname = "h"});
  link(0).deliver(proto::ImagePull{.image = "img"});
  clock_.advance(milliseconds(3000));
  EXPECT_TRUE(link(0).is_open());
  clock_.advance(milliseconds(1));
  EXPECT_FALSE(link(0).is_open());
  EXPECT_EQ(controller_->cause().message,
            "lost contact with the agent on node 0 (host0): no heartbeat for 3.0 s");
}

// A pull that ended long ago still counts, and two nodes' pulls count each
// for its own node: the one that did not pull is late at --start-timeout.
TEST_F(ControllerTest, OnlyANodesOwnPullMovesItsShareOfTheStartDeadline) {
  make(2, 1, {.heartbeat_timeout = milliseconds(0), .start_timeout = milliseconds(10000)});
  controller_->start();
  for (std::size_t i = 0; i < 2; ++i) {
    link(i).deliver(proto::Hello{.agent_version = dlaunch::kVersion, .hostname = "h"});
  }
  link(0).deliver(proto::ImagePull{.image = "img"});
  clock_.advance(milliseconds(8000));
  link(0).deliver(proto::ImagePull{.image = "img", .done = true});
  clock_.advance(milliseconds(2001));
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);
  EXPECT_EQ(controller_->cause().message,
            "gave up waiting 10.0 s for every agent to become ready; not ready: node 1 (host1) "
            "(still in its time after pulling its image: node 0 (host0))");
}

// The SSH concurrency limit holds node 1's connection back for 8 s (a head
// reaching thousands of nodes, a slow sshd): its --start-timeout runs from
// its turn to connect, not from the job's start, and a node still waiting
// its turn is not late at all.
TEST_F(ControllerTest, ANodeWaitingItsTurnToConnectHasTheStartTimeoutFromItsTurn) {
  make(3, 1, {.heartbeat_timeout = milliseconds(0), .start_timeout = milliseconds(10000)});
  controller_->start();
  link(1).start.queued = true;
  link(2).start.queued = true;
  link(0).deliver(proto::Hello{.agent_version = dlaunch::kVersion, .hostname = "h"});
  link(0).deliver(proto::Ready{});
  clock_.advance(milliseconds(8000));
  link(1).start = {.queued = false, .began = clock_.now()};
  link(1).deliver(proto::Hello{.agent_version = dlaunch::kVersion, .hostname = "h"});
  // Past the job's 10 s: node 1 is in its own time, node 2 still waits its turn.
  clock_.advance(milliseconds(9000));
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone) << controller_->cause().message;
  link(2).start = {.queued = false, .began = clock_.now()};
  // Node 1's own 10 s end at 18 s: node 2 is named apart, in its time.
  clock_.advance(milliseconds(1002));
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);
  EXPECT_EQ(controller_->cause().message,
            "gave up waiting 10.0 s for every agent to become ready; not ready: node 1 (host1) "
            "(still in its time from its turn to connect: node 2 (host2))");
}

// After Shutdown an agent removes its node's container before its Done
// (podman rm -f of a large image on a slow storage driver takes seconds): the
// head waits the removal's bound longer for it before it kills the agents.
TEST_F(ControllerTest, AContainerJobsAgentsAreGivenTheContainersRemovalToExit) {
  for (const bool container : {false, true}) {
    dlaunch::ControllerConfig cfg{.kill_grace = milliseconds(1000),
                                  .heartbeat_timeout = milliseconds(0)};
    if (container) cfg.container.image = "localhost/img:1";
    make(1, 1, cfg);
    start_job();
    exited(0, 0);
    ASSERT_EQ(link(0).sent_of<proto::Shutdown>().size(), 1u);
    const auto bound = milliseconds(1000) + dlaunch::timing::kReportMargin +
                       (container ? dlaunch::timing::kContainerRemoval : milliseconds(0));
    clock_.advance(bound - milliseconds(1));
    EXPECT_FALSE(link(0).killed) << container;
    clock_.advance(milliseconds(2));
    EXPECT_TRUE(link(0).killed) << container;
  }
}
