// Starting a job: nodes lost before they are ready, agents of another
// version, the start deadline. No processes.
#include <signal.h>

#include "controller_test_support.h"

using namespace dltest;
using std::chrono::milliseconds;
namespace proto = dlaunch::proto;

TEST_F(ControllerTest, NodesLostDuringStartAreALaunchFailureNamingEveryOne) {
  make(3, 1);
  controller_->start();
  link(0).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
  link(1).drop("Connection refused");
  link(2).drop("Host key verification failed");
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);
  EXPECT_EQ(controller_->cause().message,
            "could not start the agent on node 1 (host1): Connection refused");
  ASSERT_EQ(controller_->cause().also.size(), 1u);
  EXPECT_EQ(controller_->cause().also[0],
            "could not start the agent on node 2 (host2): Host key verification failed");
  // No worker was ever started anywhere.
  EXPECT_TRUE(link(0).sent_of<proto::Start>().empty());
  EXPECT_EQ(controller_->exit_status(), 1);
}

TEST_F(ControllerTest, ANodeLostAfterHelloIsANodeFailure) {
  make(2, 1);
  controller_->start();
  link(0).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
  link(1).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
  link(1).drop("EOF");
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNode);
  EXPECT_EQ(controller_->cause().message, "lost contact with the agent on node 1 (host1): EOF");
}

TEST_F(ControllerTest, AnAgentThatCannotBeStartedIsReportedWithTheOtherNodesProblems) {
  make(3, 1);
  links_.refuse_node = 1;
  controller_->start();
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);
  EXPECT_EQ(controller_->cause().message, "node 1 (host1): cannot start it");
  // The other nodes still run their checks; nothing is stopped before they did.
  EXPECT_TRUE(link(0).sent_of<proto::Abort>().empty());
  for (std::size_t i : {0, 1}) {
    link(i).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
    ASSERT_EQ(link(i).sent_of<proto::Setup>().size(), 1u);
  }
  link(0).deliver(proto::Fatal{"program 'prog' not found on host0"});
  EXPECT_TRUE(link(1).sent_of<proto::Abort>().empty());
  link(1).deliver(proto::Ready{});
  // Every node has said how it is: now everything stops, and the report
  // names both problems.
  for (std::size_t i : {0, 1}) EXPECT_EQ(link(i).sent_of<proto::Abort>().size(), 1u);
  ASSERT_EQ(controller_->cause().also.size(), 1u);
  EXPECT_EQ(controller_->cause().also[0], "node 0 (host0): program 'prog' not found on host0");
  EXPECT_TRUE(link(1).sent_of<proto::Start>().empty());
}

TEST_F(ControllerTest, ASlowNodeStillGetsItsChecksAfterAnotherFailedThem) {
  make(3, 1);
  controller_->start();
  link(0).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
  link(0).deliver(proto::Fatal{"working directory '/x' does not exist on host0"});
  // Node 2 connects only now (a slow SSH login): it gets its Setup all the same.
  link(2).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
  ASSERT_EQ(link(2).sent_of<proto::Setup>().size(), 1u);
  link(2).deliver(proto::Fatal{"working directory '/x' does not exist on host2"});
  link(1).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
  link(1).deliver(proto::Fatal{"working directory '/x' does not exist on host1"});
  EXPECT_EQ(controller_->cause().also.size(), 2u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(link(i).sent_of<proto::Abort>().size(), 1u);
}

TEST_F(ControllerTest, AnAgentOfAnotherVersionIsRefusedBeforeAnyWork) {
  make(1, 1);
  controller_->start();
  link(0).deliver(proto::Hello{.agent_version = "0.0.1-other"});
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);
  EXPECT_NE(controller_->cause().message.find("dlaunch-agent is version 0.0.1-other"),
            std::string::npos);
  EXPECT_TRUE(link(0).sent_of<proto::Setup>().empty());
}

TEST_F(ControllerTest, TheStartDeadlineNamesTheNodesThatWereNotReady) {
  make(3, 1, {.heartbeat_timeout = milliseconds(0), .start_timeout = milliseconds(4000)});
  controller_->start();
  for (std::size_t i = 0; i < 3; ++i)
    link(i).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
  link(1).deliver(proto::Ready{});
  clock_.advance(milliseconds(3999));
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone);
  clock_.advance(milliseconds(1));
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);
  EXPECT_EQ(controller_->cause().message,
            "gave up waiting 4.0 s for every agent to become ready; not ready: node 0 (host0), "
            "node 2 (host2)");
}

// Issue 34: a thousand launchers on two cores, each with its local agent.
// A local agent still working when the start deadline passes (runnable, or
// it used CPU since the head last looked) is slow, not stuck: the head says
// so once and looks again every kSaturatedLook. An agent that then sleeps
// without using CPU is late as before; a remote one (no process to look at)
// never waits longer.
TEST_F(ControllerTest, ALocalAgentStillWorkingOnASaturatedMachineIsWaitedFor) {
  struct Recorder final : dlaunch::JobObserver {
    void on_text(std::string_view text) override { texts.emplace_back(text); }
    std::vector<std::string> texts;
  } seen;
  observer_ = &seen;
  make(3, 1, {.heartbeat_timeout = milliseconds(0), .start_timeout = milliseconds(4000)});
  controller_->start();
  for (std::size_t i = 0; i < 3; ++i)
    link(i).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
  link(1).deliver(proto::Ready{});
  link(0).work = dlaunch::AgentWork{.cpu_ticks = 3, .runnable = false};
  link(2).work = dlaunch::AgentWork{.cpu_ticks = 0, .runnable = true};
  clock_.advance(milliseconds(4000));
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone);
  ASSERT_EQ(seen.texts.size(), 1u);
  EXPECT_EQ(seen.texts[0],
            "dlaunch: waited 4.0 s for every agent to become ready; 2 agents are still working "
            "on a saturated machine: waiting on, at most 36.0 s more\n");
  // Still working: node 0 used CPU, node 2 waits for one.
  link(0).work->cpu_ticks = 9;
  clock_.advance(dlaunch::timing::kSaturatedLook);
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone);
  link(0).deliver(proto::Ready{});
  // Node 2 now sleeps, its CPU time unchanged since the last look: stuck.
  link(2).work = dlaunch::AgentWork{.cpu_ticks = 0, .runnable = false};
  clock_.advance(dlaunch::timing::kSaturatedLook);
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);
  EXPECT_EQ(controller_->cause().message,
            "gave up waiting 4.0 s for every agent to become ready; not ready: node 2 (host2)");
  EXPECT_EQ(seen.texts.size(), 1u) << "said once";
}

// The wait has a limit (kSaturatedWaits times the deadline), and a remote
// agent among the late ones (nothing to look at) ends it at once.
TEST_F(ControllerTest, TheSaturatedWaitHasALimitAndARemoteAgentEndsIt) {
  make(1, 1, {.heartbeat_timeout = milliseconds(0), .start_timeout = milliseconds(4000)});
  controller_->start();
  link(0).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
  link(0).work = dlaunch::AgentWork{.cpu_ticks = 1, .runnable = true};
  clock_.advance(milliseconds(4000 * dlaunch::timing::kSaturatedWaits) - milliseconds(1));
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone);
  clock_.advance(dlaunch::timing::kSaturatedLook);
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);

  make(2, 1, {.heartbeat_timeout = milliseconds(0), .start_timeout = milliseconds(4000)});
  controller_->start();
  for (std::size_t i = 0; i < 2; ++i)
    link(i).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
  link(0).work = dlaunch::AgentWork{.cpu_ticks = 1, .runnable = true};
  clock_.advance(milliseconds(4000));
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);
  EXPECT_EQ(controller_->cause().message,
            "gave up waiting 4.0 s for every agent to become ready; not ready: node 0 (host0), "
            "node 1 (host1)");
}

// At the end, too: local agents still working past the wait for them to exit
// are not killed while they work.
TEST_F(ControllerTest, LocalAgentsStillWorkingAtTheEndAreNotKilled) {
  make(2, 1, {.kill_grace = milliseconds(1000), .heartbeat_timeout = milliseconds(0)});
  start_job();
  exited(0, 0);
  exited(1, 0);
  for (std::size_t i = 0; i < 2; ++i) ASSERT_EQ(link(i).sent_of<proto::Shutdown>().size(), 1u);
  link(0).work = dlaunch::AgentWork{.cpu_ticks = 2, .runnable = true};
  link(1).work = dlaunch::AgentWork{.cpu_ticks = 2, .runnable = false};
  clock_.advance(milliseconds(1000) + dlaunch::timing::kReportMargin);
  EXPECT_FALSE(link(0).killed);
  EXPECT_FALSE(link(1).killed);
  link(1).deliver(proto::Done{});
  link(1).drop("EOF");
  clock_.advance(dlaunch::timing::kSaturatedLook);
  EXPECT_FALSE(link(0).killed) << "runnable";
  link(0).work->runnable = false;
  clock_.advance(dlaunch::timing::kSaturatedLook);
  EXPECT_TRUE(link(0).killed) << "asleep and no CPU used since the last look";
}

TEST_F(ControllerTest, StartCarriesNodeZerosPortsToEveryNode) {
  make(2, 1);
  start_job();
  for (std::size_t i = 0; i < nodes(); ++i) {
    const auto env = link(i).sent_of<proto::Start>().at(0).env;
    const auto value = [&](const std::string& name) {
      for (const auto& [k, v] : env)
        if (k == name) return v;
      return std::string("<unset>");
    };
    EXPECT_EQ(value("MASTER_PORT"), "29500");
    EXPECT_EQ(value("DLAUNCH_STORE_PORT"), "29400");
  }
  // Only node 0 reserves the master port and hosts the store.
  EXPECT_TRUE(link(0).sent_of<proto::Setup>().at(0).reserve_master_port);
  EXPECT_FALSE(link(1).sent_of<proto::Setup>().at(0).reserve_master_port);
}

// Issue 15 item 15: an interrupt, the start deadline or --timeout does not
// wait for a node that is still connecting: its attempt is cancelled at once.
TEST_F(ControllerTest, AnInterruptWhileStartingDropsNodesStillConnecting) {
  make(2, 1);
  controller_->start();
  link(0).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
  // Node 1's host accepted TCP and never answered SSH.
  controller_->interrupt(SIGINT);
  EXPECT_TRUE(link(1).killed);
  EXPECT_FALSE(link(1).is_open());
  EXPECT_EQ(link(0).sent_of<proto::Abort>().size(), 1u);
  link(0).deliver(proto::Done{});
  link(0).drop("EOF");
  EXPECT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->exit_status(), 128 + SIGINT);
}

TEST_F(ControllerTest, TheJobTimeoutCountsFromStartAndEndsAHangingStartWith124) {
  make(2, 1, {.timeout = milliseconds(2000)});
  controller_->start();
  link(0).deliver(proto::Hello{.agent_version = dlaunch::kVersion});
  link(0).deliver(proto::Ready{});
  clock_.advance(milliseconds(1999));
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNone);
  clock_.advance(milliseconds(1));
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kTimeout);
  EXPECT_EQ(controller_->cause().message,
            "--timeout of 2.0 s expired while the job was starting; not ready: node 1 (host1)");
  EXPECT_TRUE(link(1).killed);
  link(0).deliver(proto::Done{});
  link(0).drop("EOF");
  EXPECT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->exit_status(), 124);
}
