// The one restart loop of both drivers and the attempt summary they print
// after a restart (drivers/attempts.h).
#include "drivers/attempts.h"

#include <deque>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace dlaunch {
namespace {

TEST(AttemptLog, OneAttemptNeedsNoSummary) {
  AttemptLog log;
  EXPECT_EQ(log.count(), 0u);
  EXPECT_EQ(log.summary("succeeded"), "");
  EXPECT_EQ(log.summary(AttemptLog::failed(3), {"n1 (lost)"}), "");
}

TEST(AttemptLog, EachAttemptInOrderThenTheLastThenTheExcludedNodes) {
  AttemptLog log;
  log.ended(AttemptLog::failed(1));
  log.ended("stopped to take in a node waiting to join");
  EXPECT_EQ(log.count(), 2u);
  EXPECT_EQ(log.summary("succeeded", {"node3 (lost: no heartbeat)"}),
            "dlaunch: 3 attempt(s):\n"
            "  attempt 0: failed, exit status 1\n"
            "  attempt 1: stopped to take in a node waiting to join\n"
            "  attempt 2: succeeded\n"
            "  excluded: node3 (lost: no heartbeat)\n");
}

// A driver whose attempts end as `ends` says, in order; what the loop asked
// of it is kept.
struct Script {
  std::deque<AttemptEnd> ends;
  std::vector<int> ran;  // each attempt's number
  std::vector<bool> decisions;
  std::vector<int> prepared;  // each restart's number
  std::string finished_last;
  std::string summary;
  std::optional<std::string> keep_refuses;
  std::optional<std::string> prepare_refuses;
  int prepare_refuses_at = 1;  // from this restart on

  AttemptHooks hooks() {
    AttemptHooks h;
    h.run = [this](int k) {
      ran.push_back(k);
      const AttemptEnd end = ends.front();
      ends.pop_front();
      return end;
    };
    h.decided = [this](bool last) { decisions.push_back(last); };
    h.keep = [this](const AttemptEnd&) { return keep_refuses; };
    h.prepare = [this](const AttemptEnd&, int restart) {
      prepared.push_back(restart);
      return restart >= prepare_refuses_at ? prepare_refuses : std::nullopt;
    };
    h.finish = [this](const std::string& last, const AttemptLog& log) {
      finished_last = last;
      summary = log.summary(last);
    };
    return h;
  }
};

int run_quietly(int max_restarts, const AttemptHooks& hooks, std::string& said) {
  testing::internal::CaptureStderr();
  const int status = run_attempts(max_restarts, hooks);
  said = testing::internal::GetCapturedStderr();
  return status;
}

TEST(RunAttempts, ASuccessEndsTheLoopWithNothingSaid) {
  Script s;
  s.ends = {{.status = 0}};
  std::string said;
  EXPECT_EQ(run_quietly(3, s.hooks(), said), 0);
  EXPECT_EQ(s.ran, std::vector<int>{0});
  EXPECT_EQ(s.decisions, std::vector<bool>{true});
  EXPECT_EQ(s.finished_last, "succeeded");
  EXPECT_EQ(s.summary, "");
  EXPECT_EQ(said, "");
}

TEST(RunAttempts, RestartableFailuresAreRestartedUpToTheLimitAndCounted) {
  Script s;
  s.ends = {{.status = 3, .restartable = true},
            {.status = 4, .restartable = true},
            {.status = 5, .restartable = true}};
  std::string said;
  EXPECT_EQ(run_quietly(2, s.hooks(), said), 5);
  EXPECT_EQ(s.ran, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(s.decisions, (std::vector<bool>{false, false, true}));
  EXPECT_EQ(s.prepared, (std::vector<int>{1, 2}));
  EXPECT_EQ(said,
            "dlaunch: restarting the job (1 of 2 restarts)\n"
            "dlaunch: restarting the job (2 of 2 restarts)\n");
  EXPECT_EQ(s.summary,
            "dlaunch: 3 attempt(s):\n"
            "  attempt 0: failed, exit status 3\n"
            "  attempt 1: failed, exit status 4\n"
            "  attempt 2: failed, exit status 5\n");
}

TEST(RunAttempts, AFailureNoRestartCanHelpEndsItAtOnce) {
  Script s;
  s.ends = {{.status = 130, .restartable = false}};
  std::string said;
  EXPECT_EQ(run_quietly(5, s.hooks(), said), 130);
  EXPECT_EQ(s.ran, std::vector<int>{0});
  EXPECT_TRUE(s.prepared.empty());
  EXPECT_EQ(s.finished_last, "failed, exit status 130");
  EXPECT_EQ(said, "");
}

TEST(RunAttempts, ANodeJoiningIsNotCountedAgainstTheLimit) {
  Script s;
  s.ends = {{.status = 1, .restartable = true, .joining = true},
            {.status = 1, .restartable = true},
            {.status = 0}};
  std::string said;
  AttemptHooks h = s.hooks();
  h.restarting_suffix = " with the nodes that remain";
  EXPECT_EQ(run_quietly(1, h, said), 0);
  EXPECT_EQ(s.prepared, (std::vector<int>{0, 1}));
  EXPECT_EQ(said,
            "dlaunch: restarting the job to take in the node that is waiting\n"
            "dlaunch: restarting the job (1 of 1 restarts) with the nodes that remain\n");
  EXPECT_EQ(s.summary,
            "dlaunch: 3 attempt(s):\n"
            "  attempt 0: stopped to take in a node waiting to join\n"
            "  attempt 1: failed, exit status 1\n"
            "  attempt 2: succeeded\n");
}

TEST(RunAttempts, WhatTheNextAttemptNeedsCanStopTheLoopSayingWhy) {
  Script keep;
  keep.ends = {{.status = 2, .restartable = true}};
  keep.keep_refuses = "too few nodes";
  std::string said;
  EXPECT_EQ(run_quietly(3, keep.hooks(), said), 2);
  EXPECT_EQ(keep.finished_last, "failed, exit status 2 (not restarted: too few nodes)");
  EXPECT_EQ(keep.summary, "");  // refused before it was counted: one attempt
  EXPECT_EQ(said, "");

  Script prepare;
  prepare.ends = {{.status = 2, .restartable = true}};
  prepare.prepare_refuses = "the nodes left cannot hold the job";
  EXPECT_EQ(run_quietly(3, prepare.hooks(), said), 2);
  EXPECT_EQ(said,
            "dlaunch: restarting the job (1 of 3 restarts)\n"
            "dlaunch: the restart did not start: the nodes left cannot hold the job\n");
  // The attempt that never started is in no summary: one attempt ran.
  EXPECT_EQ(prepare.finished_last,
            "failed, exit status 2 (not restarted: the nodes left cannot hold the job)");
  EXPECT_EQ(prepare.summary, "");

  // After a restart that ran, the one refused: the summary ends with the
  // attempt that ran last, saying why no other followed.
  Script second;
  second.ends = {{.status = 2, .restartable = true}, {.status = 3, .restartable = true}};
  second.prepare_refuses_at = 2;
  second.prepare_refuses = "too few nodes passed the checks";
  EXPECT_EQ(run_quietly(3, second.hooks(), said), 3);
  EXPECT_EQ(second.summary,
            "dlaunch: 2 attempt(s):\n"
            "  attempt 0: failed, exit status 2\n"
            "  attempt 1: failed, exit status 3 (not restarted: too few nodes passed the "
            "checks)\n");
}

}  // namespace
}  // namespace dlaunch
