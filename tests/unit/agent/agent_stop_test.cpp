// The agent stopping its workers, without processes: SIGTERM, the kill
// grace, SIGKILL; what it reports.
#include <sys/socket.h>

#include <boost/asio/executor_work_guard.hpp>

#include "agent_test_support.h"

using namespace dltest;
using std::chrono::milliseconds;

TEST_F(AgentTest, StartsTheGuardAndBecomesASubreaperBeforeAnyWorker) {
  EXPECT_TRUE(os_.subreaper);
  ASSERT_NE(os_.guard, nullptr);
  start_workers(2);
  EXPECT_EQ(os_.guard->groups, (std::vector<pid_t>{5000, 5001}));
  // Every worker's environment carries the agent's token, which the guard
  // uses to find what left the process group.
  for (const auto& p : os_.procs) {
    EXPECT_TRUE(std::any_of(p.env.begin(), p.env.end(), [](const std::string& e) {
      return e.rfind("DLAUNCH_AGENT_TOKEN=", 0) == 0;
    }));
  }
}

TEST_F(AgentTest, AbortSendsSigtermAndSigkillWhenTheGraceRunsOut) {
  start_workers(2);
  os_.ignore_sigterm = true;
  send(proto::Abort{.reason = "job failed"});
  EXPECT_EQ(os_.count(SIGTERM, true), 2);
  advance(milliseconds(1999));
  EXPECT_EQ(os_.count(SIGKILL, true), 0);
  advance(milliseconds(1));
  EXPECT_EQ(os_.count(SIGKILL, true), 2);
  sigchld();
  const auto exits = got<proto::Exited>();
  ASSERT_EQ(exits.size(), 2u);
  for (const auto& e : exits) {
    EXPECT_EQ(e.kind, proto::ExitKind::kSignaled);
    EXPECT_EQ(e.signal, SIGKILL);
  }
}

TEST_F(AgentTest, WorkersThatStopAtSigtermAreNotKilledLater) {
  start_workers(1);
  send(proto::Abort{.reason = "job failed"});
  sigchld();
  ASSERT_EQ(got<proto::Exited>().size(), 1u);
  EXPECT_EQ(got<proto::Exited>()[0].signal, SIGTERM);
  advance(milliseconds(5000));
  EXPECT_EQ(os_.count(SIGKILL, true), 0);
}

TEST_F(AgentTest, AnImmediateAbortKillsAtOnce) {
  start_workers(2);
  os_.ignore_sigterm = true;
  send(proto::Abort{.reason = "interrupted twice", .immediate = true});
  EXPECT_EQ(os_.count(SIGTERM, true), 0);
  EXPECT_EQ(os_.count(SIGKILL, true), 2);
}

TEST_F(AgentTest, AWorkersLastOutputArrivesBeforeItsExit) {
  start_workers(1);
  const auto& w = os_.proc(0);
  ASSERT_EQ(::write(w.out, "hello\nno newline", 16), 16);
  os_.exit(w.pid, 3, false);
  sigchld();
  ASSERT_GE(received_.size(), 3u);
  const auto n = received_.size();
  const auto* whole = std::get_if<proto::Output>(&received_[n - 3]);
  const auto* partial = std::get_if<proto::Output>(&received_[n - 2]);
  const auto* exit = std::get_if<proto::Exited>(&received_[n - 1]);
  ASSERT_TRUE(whole && partial && exit);
  EXPECT_EQ(whole->data, "hello\n");
  EXPECT_EQ(partial->data, "no newline");
  EXPECT_TRUE(partial->partial);
  EXPECT_EQ(exit->kind, proto::ExitKind::kExited);
  EXPECT_EQ(exit->code, 3);
}

TEST_F(AgentTest, APartialLineLeavesAfterTheFlushPeriodOfQuiet) {
  start_workers(1);
  ASSERT_EQ(::write(os_.proc(0).out, "prompt> ", 8), 8);
  pump();
  EXPECT_TRUE(got<proto::Output>().empty());
  advance(milliseconds(99));
  EXPECT_TRUE(got<proto::Output>().empty());
  advance(milliseconds(1));
  ASSERT_EQ(got<proto::Output>().size(), 1u);
  EXPECT_EQ(got<proto::Output>()[0].data, "prompt> ");
}

TEST_F(AgentTest, ASpawnFailureIsReportedAsExit127WithTheReason) {
  os_.spawn_error = "No such file or directory";
  send(setup_for(1));
  send(proto::Start{});
  ASSERT_EQ(got<proto::Exited>().size(), 1u);
  EXPECT_EQ(got<proto::Exited>()[0].kind, proto::ExitKind::kSpawnFailed);
  EXPECT_EQ(got<proto::Exited>()[0].code, 127);
  EXPECT_EQ(got<proto::Exited>()[0].message, "No such file or directory");
}

// Issue 15 item 14: a worker is signalled once, through its group, not again
// as one of the agent's descendants.
TEST_F(AgentTest, EachWorkerGetsSigtermOnce) {
  start_workers(2);
  os_.ignore_sigterm = true;
  os_.leftover = {7001};  // a daemonized child in a group of its own
  send(proto::Abort{.reason = "--timeout"});
  for (pid_t pid : {5000, 5001, 7001}) {
    EXPECT_EQ(
        std::count_if(os_.signals.begin(), os_.signals.end(),
                      [&](const FakeOs::Signal& s) { return s.sig == SIGTERM && s.target == pid; }),
        1)
        << "pid " << pid;
  }
}

TEST_F(AgentTest, SignalRanksSignalsEachRunningWorkersGroupAndStopsNothing) {
  start_workers(2);
  os_.exit(5001, 0, false);
  sigchld();
  send(proto::SignalRanks{.signal = SIGUSR1});
  EXPECT_EQ(os_.count(SIGUSR1, true), 1);  // the worker still running, through its group
  EXPECT_EQ(os_.count(SIGUSR1, false), 0);
  EXPECT_EQ(os_.count(SIGTERM, true), 0);
  advance(milliseconds(2500));  // past the kill grace (2 s), within the heartbeat timeout
  EXPECT_EQ(os_.count(SIGKILL, true), 0);
  EXPECT_EQ(got<proto::Exited>().size(), 1u);
  EXPECT_TRUE(got<proto::Fatal>().empty());
}

TEST_F(AgentTest, RanksStoppedBySigtstpAreContinuedAfterTheSigtermOfAStop) {
  start_workers(2);
  os_.ignore_sigterm = true;
  send(proto::SignalRanks{.signal = SIGTSTP});
  EXPECT_EQ(os_.count(SIGTSTP, true), 2);
  send(proto::Abort{.reason = "interrupted"});
  EXPECT_EQ(os_.count(SIGTERM, true), 2);
  EXPECT_EQ(os_.count(SIGCONT, true), 2);
  // SIGCONT after SIGTERM: a stopped process acts on its SIGTERM once continued.
  const auto term = std::find_if(os_.signals.begin(), os_.signals.end(),
                                 [](const auto& s) { return s.sig == SIGTERM; });
  const auto cont = std::find_if(os_.signals.begin(), os_.signals.end(),
                                 [](const auto& s) { return s.sig == SIGCONT; });
  EXPECT_LT(term - os_.signals.begin(), cont - os_.signals.begin());
}

TEST_F(AgentTest, RanksContinuedBeforeAStopGetNoExtraSigcont) {
  start_workers(1);
  os_.ignore_sigterm = true;
  send(proto::SignalRanks{.signal = SIGTSTP});
  send(proto::SignalRanks{.signal = SIGCONT});
  send(proto::Abort{.reason = "interrupted"});
  EXPECT_EQ(os_.count(SIGCONT, true), 1);
}

TEST_F(AgentTest, SignalRanksBeforeStartSignalsNothing) {
  send(setup_for(2));
  send(proto::SignalRanks{.signal = SIGTSTP});
  send(proto::Start{});
  send(proto::Abort{.reason = "interrupted"});
  EXPECT_EQ(os_.count(SIGTSTP, true), 0);
  EXPECT_EQ(os_.count(SIGCONT, true), 0);
}

// The head stops reading before the agent's Done (it gave up waiting for the
// agent to exit, or it was killed): the Done's write fails, the channel ends
// when its read side does, and the agent's loop must end then, even with
// work of its own outstanding (run()'s signal waits, here a work guard).
TEST_F(AgentTest, AnAgentWhoseDoneCannotBeWrittenStillEnds) {
  ::signal(SIGPIPE, SIG_IGN);  // as dlaunch-agent's main: a failed write is EPIPE
  auto work = boost::asio::make_work_guard(io_);
  start_workers(1);
  send(proto::Abort{.reason = "job failed"});
  sigchld();
  ASSERT_EQ(got<proto::Exited>().size(), 1u);
  ASSERT_EQ(::shutdown(head_, SHUT_RD), 0);  // the head reads no more
  send(proto::Shutdown{});
  EXPECT_TRUE(got<proto::Done>().empty());
  ASSERT_EQ(::shutdown(head_, SHUT_WR), 0);  // and then is gone
  bool stopped = false;
  for (int i = 0; i < 20 && !stopped; ++i) {
    io_.restart();
    (void)io_.poll();
    stopped = io_.stopped();
  }
  EXPECT_TRUE(stopped);
}
