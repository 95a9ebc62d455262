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

// The head runs on this machine (same boot) and waits for a CPU most of the
// time: its heartbeats are late, not missing, and the workers keep running;
// once it runs freely again and stays silent, it is lost as before.
TEST_F(AgentTest, AHeadOnThisMachineThatWaitsForACpuIsLateNotLost) {
  auto s = setup_for(2);
  s.head_boot_id = os_.boot;
  s.head_pid = 4242;
  s.head_start_ticks = 7;
  os_.delays[4242] = 0;
  start_workers(2, s);
  for (int k = 0; k < 200; ++k) {  // 20 s, the head waiting 80% of it
    os_.delays[4242] += 80'000'000;
    advance(milliseconds(100));
  }
  EXPECT_EQ(os_.count(SIGTERM, true), 0) << "a starved head is not a silent one";
  EXPECT_FALSE(head_eof_);
  advance(milliseconds(8000));  // it no longer waits, and says nothing
  EXPECT_EQ(os_.count(SIGTERM, true), 2);
}

TEST_F(AgentTest, AHeadOnAnotherMachineIsJudgedByItsHeartbeatsAlone) {
  auto s = setup_for(1);
  s.head_boot_id = "another-boot";
  s.head_pid = 4242;
  s.head_start_ticks = 7;
  os_.delays[4242] = 0;
  start_workers(1, s);
  for (int k = 0; k < 31; ++k) {  // a pid on another machine says nothing of the head
    os_.delays[4242] += 100'000'000;
    advance(milliseconds(100));
  }
  EXPECT_EQ(os_.count(SIGTERM, true), 1);
}
