// The controller's failure handling, without processes: which failure is the
// root cause, how stopping escalates, which causes allow a restart.
#include <signal.h>

#include <filesystem>

#include "controller_test_support.h"

using namespace dltest;
using std::chrono::milliseconds;
namespace proto = dlaunch::proto;

// An observer (jobs/job_observer.h) beside the console: the job's events in
// order, its root cause once, dlaunch's lines as the console gets them.
TEST_F(ControllerTest, AnObserverHearsTheEventsTheCauseOnceAndDlaunchsLines) {
  struct Recorder final : dlaunch::JobObserver {
    void on_text(std::string_view text) override { texts.emplace_back(text); }
    void on_event(std::string_view type, const std::vector<dlaunch::EventField>&) override {
      events.emplace_back(type);
    }
    void on_cause(const dlaunch::RootCause& c) override { causes.push_back(c); }
    std::vector<std::string> texts, events;
    std::vector<dlaunch::RootCause> causes;
  } seen;
  observer_ = &seen;
  make(2, 1);
  start_job();
  EXPECT_EQ(seen.events,
            (std::vector<std::string>{"node_ready", "node_ready", "rank_started", "rank_started"}));
  EXPECT_TRUE(seen.causes.empty());
  exited(1, 3);
  ASSERT_EQ(seen.causes.size(), 1u);
  EXPECT_EQ(seen.causes[0].kind, dlaunch::CauseKind::kWorker);
  EXPECT_EQ(seen.causes[0].exit.rank, 1);
  controller_->interrupt(SIGINT);  // a later cause: said and recorded, never heard as the cause
  agents_stop_everything();
  ASSERT_TRUE(controller_->finished());
  EXPECT_EQ(seen.causes.size(), 1u);
  EXPECT_EQ(seen.events,
            (std::vector<std::string>{"node_ready", "node_ready", "rank_started", "rank_started",
                                      "rank_exited", "signal", "rank_exited"}));
  ASSERT_EQ(seen.texts.size(), 1u);
  EXPECT_EQ(seen.texts[0], "dlaunch: SIGINT: stopping the job (again to kill at once)\n");
}

TEST_F(ControllerTest, TheFirstFailureIsTheRootCauseAndLaterOnesAreConsequences) {
  make(2, 2);
  start_job();
  exited(1, 3);
  // Every agent is told to stop its ranks.
  for (std::size_t i = 0; i < nodes(); ++i) {
    ASSERT_EQ(link(i).sent_of<proto::Abort>().size(), 1u) << "node " << i;
    EXPECT_FALSE(link(i).sent_of<proto::Abort>()[0].immediate);
  }
  // Its consequences: a rank killed by SIGKILL, another failing on its own.
  exited(2, 0, SIGKILL);
  exited(3, 7);
  exited(0, 0, SIGTERM);
  // Every rank accounted for: Shutdown to every agent.
  for (std::size_t i = 0; i < nodes(); ++i)
    EXPECT_EQ(link(i).sent_of<proto::Shutdown>().size(), 1u);
  agents_stop_everything();
  ASSERT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kWorker);
  EXPECT_EQ(controller_->cause().exit.rank, 1);
  EXPECT_EQ(controller_->exit_status(), 3);
}

TEST_F(ControllerTest, ALostNodeAfterAFailedRankDoesNotReplaceTheCause) {
  make(2, 1);
  start_job();
  exited(0, 5);
  link(1).drop("connection reset");
  agents_stop_everything();
  ASSERT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kWorker);
  EXPECT_EQ(controller_->exit_status(), 5);
}

TEST_F(ControllerTest, StoppingEscalatesToKillingTheAgentsAtTheDeadline) {
  make(2, 1, {.kill_grace = milliseconds(2000)});
  start_job();
  exited(0, 1);
  // The agents never report rank 1: the head waits the grace plus the margin.
  const auto deadline = milliseconds(2000) + dlaunch::timing::kReportMargin;
  clock_.advance(deadline - milliseconds(1));
  EXPECT_FALSE(link(0).killed);
  EXPECT_FALSE(controller_->finished());
  clock_.advance(milliseconds(1));
  for (std::size_t i = 0; i < nodes(); ++i) {
    EXPECT_TRUE(link(i).killed) << "node " << i;
    EXPECT_FALSE(link(i).is_open()) << "node " << i;
  }
  EXPECT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->exit_status(), 1);
}

TEST_F(ControllerTest, AgentsThatNeverExitAreKilledAtTheShutdownDeadline) {
  make(1, 1, {.kill_grace = milliseconds(500)});
  start_job();
  exited(0, 0);
  ASSERT_EQ(link(0).sent_of<proto::Shutdown>().size(), 1u);
  clock_.advance(milliseconds(500) + dlaunch::timing::kReportMargin - milliseconds(1));
  EXPECT_FALSE(link(0).killed);
  clock_.advance(milliseconds(1));
  EXPECT_TRUE(link(0).killed);
  EXPECT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->exit_status(), 0);
}

TEST_F(ControllerTest, ASecondInterruptKillsAtOnceAndShortensTheDeadline) {
  make(2, 1, {.kill_grace = milliseconds(30000)});
  start_job();
  controller_->interrupt(SIGINT);
  EXPECT_FALSE(link(0).sent_of<proto::Abort>().at(0).immediate);
  controller_->interrupt(SIGINT);
  ASSERT_EQ(link(0).sent_of<proto::Abort>().size(), 2u);
  EXPECT_TRUE(link(0).sent_of<proto::Abort>()[1].immediate);
  // Not the 35 s of the first Abort: the agents get kAfterKill to report.
  clock_.advance(dlaunch::timing::kAfterKill);
  EXPECT_TRUE(link(0).killed);
  EXPECT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->exit_status(), 128 + SIGINT);
}

TEST_F(ControllerTest, TheJobTimeoutStopsTheJobWithExit124) {
  make(1, 2, {.timeout = milliseconds(6000)});
  start_job();
  clock_.advance(milliseconds(5999));
  EXPECT_TRUE(link(0).sent_of<proto::Abort>().empty());
  clock_.advance(milliseconds(1));
  // First every rank's stack (Python ranks are aborted for their traceback),
  // then the Abort, once the agent has answered.
  ASSERT_EQ(link(0).sent_of<proto::CollectStacks>().size(), 1u);
  const auto req = link(0).sent_of<proto::CollectStacks>().front();
  EXPECT_TRUE(req.python_abort);
  EXPECT_TRUE(link(0).sent_of<proto::Abort>().empty());
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kTimeout);
  link(0).deliver(proto::Stacks{
      .request_id = req.request_id,
      .tool = "eu-stack",
      .ranks = {{.rank = 0, .pid = 10, .native = "TID 10:\n#0  0x1 wait_for_gradients\n"},
                {.rank = 1, .pid = 11, .native = "TID 11:\n#0  0x1 wait_for_gradients\n"}}});
  ASSERT_EQ(link(0).sent_of<proto::Abort>().size(), 1u);
  agents_stop_everything();
  EXPECT_EQ(controller_->exit_status(), 124);
  EXPECT_NE(controller_->cause().message.find("2 rank(s) still running: 0 (host0), 1 (host0)"),
            std::string::npos)
      << controller_->cause().message;
  EXPECT_NE(controller_->cause().stacks.find("ranks 0,1 (2 ranks): wait_for_gradients"),
            std::string::npos)
      << controller_->cause().stacks;
  // The full stacks went to a private folder of their own: not left behind by a test.
  const auto& text = controller_->cause().stacks;
  const auto at = text.find("full stacks: ");
  ASSERT_NE(at, std::string::npos) << text;
  const auto file = text.substr(at + 13, text.find(')', at) - at - 13);
  EXPECT_TRUE(std::filesystem::remove_all(std::filesystem::path(file).parent_path()) == 2) << file;
}

TEST_F(ControllerTest, TheJobTimeoutStopsTheJobWhenTheStacksDoNotCome) {
  make(1, 2, {.timeout = milliseconds(1000), .stack_timeout = milliseconds(3000)});
  start_job();
  clock_.advance(milliseconds(1000));
  ASSERT_EQ(link(0).sent_of<proto::CollectStacks>().size(), 1u);
  clock_.advance(milliseconds(3999));
  EXPECT_TRUE(link(0).sent_of<proto::Abort>().empty());
  clock_.advance(milliseconds(1));
  ASSERT_EQ(link(0).sent_of<proto::Abort>().size(), 1u);
  agents_stop_everything();
  EXPECT_EQ(controller_->exit_status(), 124);
  EXPECT_NE(controller_->cause().stacks.find("sent no stacks within 3.0 s"), std::string::npos)
      << controller_->cause().stacks;
}

TEST_F(ControllerTest, WithoutStackTimeoutTheJobTimeoutAbortsAtOnce) {
  make(1, 2, {.timeout = milliseconds(1000), .stack_timeout = milliseconds(0)});
  start_job();
  clock_.advance(milliseconds(1000));
  EXPECT_TRUE(link(0).sent_of<proto::CollectStacks>().empty());
  ASSERT_EQ(link(0).sent_of<proto::Abort>().size(), 1u);
}

TEST_F(ControllerTest, OnlyAFailedRankOrALostNodeAllowsARestart) {
  make(2, 1, {.timeout = milliseconds(1000)});
  start_job();
  exited(1, 2);
  agents_stop_everything();
  EXPECT_TRUE(dlaunch::allows_restart(controller_->cause()));

  TearDown();
  make(2, 1);
  start_job();
  link(0).drop("connection reset");
  agents_stop_everything();
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNode);
  EXPECT_TRUE(dlaunch::allows_restart(controller_->cause()));

  TearDown();
  make(2, 1);
  start_job();
  controller_->interrupt(SIGTERM);
  agents_stop_everything();
  EXPECT_FALSE(dlaunch::allows_restart(controller_->cause()));

  TearDown();
  make(2, 1, {.timeout = milliseconds(1000)});
  start_job();
  clock_.advance(milliseconds(1000));
  agents_stop_everything();
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kTimeout);
  EXPECT_FALSE(dlaunch::allows_restart(controller_->cause()));

  TearDown();
  make(2, 1);
  controller_->start();
  link(1).drop("Connection refused");
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kLaunch);
  EXPECT_FALSE(dlaunch::allows_restart(controller_->cause()));
}

// The rank table (core/rank_table.h) refuses a rank's message that does not
// fit: the job fails naming the node and the rank, and stops as after any
// node's fault.
TEST_F(ControllerTest, ARankMessageThatDoesNotFitFailsTheJobNamingTheNodeAndTheRank) {
  make(2, 2);
  start_job();
  link(1).deliver(proto::Started{.rank = 2, .pid = 7});
  ASSERT_EQ(controller_->cause().kind, dlaunch::CauseKind::kNode);
  EXPECT_EQ(controller_->cause().message,
            "node 1 (host1): rank 2 said it started while it was running");
  EXPECT_EQ(link(0).sent_of<proto::Abort>().size(), 1u);
  agents_stop_everything();
  EXPECT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->exit_status(), 1);
}

TEST_F(ControllerTest, AnExitOfARankAnotherNodeRunsFailsTheJobNamingTheNodeAndTheRank) {
  make(2, 1);
  start_job();
  link(0).deliver(proto::Exited{.rank = 1, .pid = 1001});
  EXPECT_EQ(controller_->cause().message, "node 0 (host0): rank 1 is not run by this node");
  agents_stop_everything();
  EXPECT_TRUE(controller_->finished());
}
