// The agent's side of the heartbeats: a silent head ends the node's work.
#include "agent_test_support.h"

using namespace dltest;
using std::chrono::milliseconds;

TEST_F(AgentTest, ASilentHeadStopsEveryWorker) {
  start_workers(2);
  advance(milliseconds(3000));
  EXPECT_EQ(os_.count(SIGTERM, true), 0) << "3000 ms of silence is not yet more than the timeout";
  advance(milliseconds(1));
  EXPECT_EQ(os_.count(SIGTERM, true), 2);
  EXPECT_TRUE(head_eof_) << "the agent must drop the channel of a head it gave up on";
}

TEST_F(AgentTest, TheHeadsHeartbeatsKeepTheWorkersRunning) {
  start_workers(2);
  for (int s = 0; s < 10; ++s) {
    advance(milliseconds(1000));
    send(proto::Heartbeat{});
  }
  EXPECT_TRUE(os_.signals.empty());
  EXPECT_FALSE(head_eof_);
}

TEST_F(AgentTest, TheAgentSendsHeartbeatsAtTheIntervalTheHeadAskedFor) {
  auto s = setup_for(1);
  s.heartbeat_interval_ms = 500;
  s.heartbeat_timeout_ms = 0;  // the head does not check: the agent still sends
  start_workers(1, s);
  const auto before = got<proto::Heartbeat>().size();
  advance(milliseconds(2000));
  EXPECT_EQ(got<proto::Heartbeat>().size() - before, 4u);
}

TEST_F(AgentTest, WithoutTheHeadWorkersWhoseExitIsNeverSeenAreKilledAnyway) {
  start_workers(1);
  os_.ignore_sigterm = true;
  ::shutdown(head_, SHUT_RDWR);  // the head is gone
  pump();
  EXPECT_EQ(os_.count(SIGTERM, true), 1);
  // The SIGKILL at the grace "works" but no SIGCHLD ever comes: after the
  // grace plus the margin the agent gives up waiting and ends anyway.
  os_.zombies.clear();
  os_.procs[0].exited = false;
  advance(milliseconds(2000) + dlaunch::timing::kOrphanMargin);
  EXPECT_TRUE(agent_->done());
  EXPECT_TRUE(os_.guard->disarmed);
  EXPECT_EQ(agent_->exit_code(), 1);
}
