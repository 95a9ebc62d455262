// Signals to the head, without processes (controller/signal_relay.h): which are
// forwarded to the ranks, and --signal's warning before --timeout and on
// SIGTERM.
#include <signal.h>

#include "controller_test_support.h"

using namespace dltest;
using std::chrono::milliseconds;
namespace proto = dlaunch::proto;

namespace {
std::vector<int> signals_sent(const FakeLink& l) {
  std::vector<int> out;
  for (const auto& s : l.sent_of<proto::SignalRanks>()) out.push_back(s.signal);
  return out;
}
}  // namespace

TEST_F(ControllerTest, ForwardedSignalsGoToEveryNodeAndTheJobRunsOn) {
  make(2, 2);
  start_job();
  for (int sig : {SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT}) controller_->on_signal(sig);
  for (std::size_t i = 0; i < nodes(); ++i) {
    EXPECT_EQ(signals_sent(link(i)), (std::vector<int>{SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT}));
    EXPECT_TRUE(link(i).sent_of<proto::Abort>().empty());
  }
  agents_stop_everything(0);
  ASSERT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->exit_status(), 0);
}

TEST_F(ControllerTest, SigtermWithoutSignalStopsAtOnce) {
  make(2, 1);
  start_job();
  controller_->on_signal(SIGTERM);
  for (std::size_t i = 0; i < nodes(); ++i) {
    EXPECT_TRUE(link(i).sent_of<proto::SignalRanks>().empty());
    EXPECT_EQ(link(i).sent_of<proto::Abort>().size(), 1u);
  }
}

TEST_F(ControllerTest, SigtermWithSignalWarnsTheRanksThenStopsThemAfterTheGrace) {
  make(2, 1, {.kill_grace = milliseconds(2000), .warn_signal = SIGUSR1});
  start_job();
  controller_->on_signal(SIGTERM);
  for (std::size_t i = 0; i < nodes(); ++i) {
    EXPECT_EQ(signals_sent(link(i)), std::vector<int>{SIGUSR1});
    EXPECT_TRUE(link(i).sent_of<proto::Abort>().empty());
  }
  clock_.advance(milliseconds(1999));
  EXPECT_TRUE(link(0).sent_of<proto::Abort>().empty());
  clock_.advance(milliseconds(1));
  for (std::size_t i = 0; i < nodes(); ++i) {
    ASSERT_EQ(link(i).sent_of<proto::Abort>().size(), 1u);
    EXPECT_FALSE(link(i).sent_of<proto::Abort>()[0].immediate);
  }
  agents_stop_everything();
  ASSERT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->exit_status(), 128 + SIGTERM);
}

TEST_F(ControllerTest, RanksThatExitAfterTheWarningEndTheJobEarlyAsInterrupted) {
  make(2, 1, {.kill_grace = milliseconds(5000), .warn_signal = SIGUSR2});
  start_job();
  controller_->on_signal(SIGTERM);
  exited(0, 0);
  exited(1, 4);  // not the cause: the SIGTERM is
  for (std::size_t i = 0; i < nodes(); ++i) {
    EXPECT_TRUE(link(i).sent_of<proto::Abort>().empty());
    EXPECT_EQ(link(i).sent_of<proto::Shutdown>().size(), 1u);
  }
  agents_stop_everything();
  ASSERT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->cause().kind, dlaunch::CauseKind::kInterrupted);
  EXPECT_EQ(controller_->exit_status(), 128 + SIGTERM);
}

TEST_F(ControllerTest, ASecondSignalDuringTheWarningKillsAtOnce) {
  make(1, 2, {.kill_grace = milliseconds(5000), .warn_signal = SIGUSR1});
  start_job();
  controller_->on_signal(SIGTERM);
  controller_->on_signal(SIGTERM);
  ASSERT_EQ(link(0).sent_of<proto::Abort>().size(), 1u);
  EXPECT_TRUE(link(0).sent_of<proto::Abort>()[0].immediate);
}

TEST_F(ControllerTest, SignalGoesToTheRanksItsTimeBeforeTheTimeout) {
  // No stacks at the timeout (--stack-timeout 0): the Abort follows at once.
  make(2, 1,
       {.timeout = milliseconds(10000),
        .warn_signal = SIGUSR1,
        .warn_before = milliseconds(3000),
        .stack_timeout = milliseconds(0)});
  start_job();
  clock_.advance(milliseconds(6999));
  EXPECT_TRUE(link(0).sent_of<proto::SignalRanks>().empty());
  clock_.advance(milliseconds(1));
  for (std::size_t i = 0; i < nodes(); ++i) {
    EXPECT_EQ(signals_sent(link(i)), std::vector<int>{SIGUSR1});
    EXPECT_TRUE(link(i).sent_of<proto::Abort>().empty());
  }
  clock_.advance(milliseconds(3000));
  for (std::size_t i = 0; i < nodes(); ++i) EXPECT_EQ(link(i).sent_of<proto::Abort>().size(), 1u);
  agents_stop_everything();
  ASSERT_TRUE(controller_->finished());
  EXPECT_EQ(controller_->exit_status(), 124);
  EXPECT_EQ(signals_sent(link(0)), std::vector<int>{SIGUSR1});  // once
}

TEST_F(ControllerTest, NoWarningIsSentWhileTheJobIsStillStarting) {
  make(1, 1,
       {.timeout = milliseconds(10000), .warn_signal = SIGUSR1, .warn_before = milliseconds(9000)});
  controller_->start();
  clock_.advance(milliseconds(1000));
  link(0).deliver(proto::Hello{.agent_version = dlaunch::kVersion, .hostname = "h"});
  link(0).deliver(proto::Ready{.master_port = 29500});
  ASSERT_EQ(link(0).sent_of<proto::Start>().size(), 1u);
  EXPECT_TRUE(link(0).sent_of<proto::SignalRanks>().empty());
}
