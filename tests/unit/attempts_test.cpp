// The attempt summary both drivers print after a restart (drivers/attempts.h).
#include "drivers/attempts.h"

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

}  // namespace
}  // namespace dlaunch
