// What the workers leave behind (daemonized children that reparented to the
// agent) is swept at the end, on a timer: the loop keeps serving meanwhile.
#include "agent_test_support.h"

using namespace dltest;
using std::chrono::milliseconds;

TEST_F(AgentTest, NothingLeftBehindMeansDoneAtOnce) {
  start_workers(2);
  os_.exit(5000, 0, false);
  os_.exit(5001, 0, false);
  sigchld();
  send(proto::Shutdown{});
  ASSERT_EQ(got<proto::Done>().size(), 1u);
  EXPECT_EQ(got<proto::Done>()[0].leftovers_killed, 0u);
  EXPECT_TRUE(os_.guard->disarmed);
  EXPECT_EQ(os_.removed.size(), 1u) << "the error-file folder is removed";
}

TEST_F(AgentTest, LeftoversAreSweptOnATimerWhileTheLoopKeepsServing) {
  start_workers(1);
  os_.leftovers_ignore_sigterm = true;  // it takes its time
  os_.leftover = {7001};
  os_.exit(5000, 0, false);
  sigchld();
  send(proto::Shutdown{});
  EXPECT_EQ(os_.signals.back().target, 7001);
  EXPECT_EQ(os_.signals.back().sig, SIGTERM);
  EXPECT_TRUE(got<proto::Done>().empty());
  // The loop still serves the head while the leftover is waited for.
  const auto heartbeats = got<proto::Heartbeat>().size();
  advance(milliseconds(1000));
  EXPECT_GT(got<proto::Heartbeat>().size(), heartbeats);
  EXPECT_TRUE(got<proto::Done>().empty());
  os_.leftover.clear();  // it exits
  advance(dlaunch::timing::kLeftoverPoll);
  ASSERT_EQ(got<proto::Done>().size(), 1u);
  EXPECT_EQ(got<proto::Done>()[0].leftovers_killed, 1u);
  EXPECT_EQ(os_.count(SIGKILL, false), 0);
}

TEST_F(AgentTest, LeftoversThatIgnoreSigtermAreKilledAtTheGrace) {
  start_workers(1);
  os_.leftovers_ignore_sigterm = true;
  os_.leftover = {7001, 7002};
  os_.exit(5000, 0, false);
  sigchld();
  send(proto::Shutdown{});
  advance(milliseconds(1990));
  EXPECT_EQ(os_.count(SIGKILL, false), 0);
  EXPECT_TRUE(got<proto::Done>().empty());
  advance(milliseconds(20));
  EXPECT_EQ(os_.count(SIGKILL, false), 2);
  ASSERT_EQ(got<proto::Done>().size(), 1u);
  EXPECT_EQ(got<proto::Done>()[0].leftovers_killed, 2u);
}
