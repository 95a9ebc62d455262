// Head-node elasticity (issue 18): --min-nodes drops a lost node and restarts
// on the rest, --spares puts a waiting host in its place. Real dlaunch, real
// agents on logical local nodes; "losing a node" is SIGKILL of its agent by
// one of its ranks (the agent's guard takes the ranks down, the head sees the
// control channel close: the same as a host that died).
#include <string>

#include <gtest/gtest.h>

#include "support.h"

using namespace dltest;

namespace {

std::string three_nodes() {
  return temp_file(
      "hosts:\n"
      "  - {host: localhost, name: n0, slots: 1}\n"
      "  - {host: localhost, name: n1, slots: 1}\n"
      "  - {host: localhost, name: n2, slots: 1}\n",
      ".yaml");
}

// Each rank says where it runs; on the first attempt n1's rank kills its
// agent. The ranks of later attempts stay a second, so that a restart that
// went wrong would show.
const char* const kScript =
    "echo attempt $TORCHELASTIC_RESTART_COUNT rank $RANK of $WORLD_SIZE on $DLAUNCH_NODE_NAME; "
    "if [ $TORCHELASTIC_RESTART_COUNT = 0 ] && [ $DLAUNCH_NODE_NAME = n1 ]; then "
    "kill -9 $PPID; sleep 30; fi; sleep 1";

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

}  // namespace

TEST(HeadElasticity, ASpareTakesTheLostNodesPlaceAndTheJobFinishes) {
  const std::string job = unique_job_id("spare");
  auto r = run(dlaunch_cmd({"-H", three_nodes(), "--job-id", job, "--spares", "1", "--max-restarts",
                            "1", "sh", "-c", kScript}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // The spare n2 runs nothing on the first attempt and node 1's ranks on the second.
  EXPECT_FALSE(has(r.out, "attempt 0 rank 1 of 2 on n2")) << r.out;
  EXPECT_TRUE(has(r.out, "attempt 1 rank 0 of 2 on n0")) << r.out;
  EXPECT_TRUE(has(r.out, "attempt 1 rank 1 of 2 on n2")) << r.out;
  EXPECT_FALSE(has(r.out, "attempt 1 rank 1 of 2 on n1")) << r.out;
  EXPECT_TRUE(has(r.err, "node 1 n1 (localhost) excluded; spare n2 (localhost) in its place"))
      << r.err;
  EXPECT_TRUE(has(r.err, "excluded: n1 (localhost): lost contact with the agent")) << r.err;
  EXPECT_TRUE(wait_job_gone(job, 5).empty());
}

TEST(HeadElasticity, MinNodesShrinksTheWorldAndRestartsOnTheRest) {
  const std::string job = unique_job_id("shrink");
  auto r = run(dlaunch_cmd({"-H", three_nodes(), "--job-id", job, "--min-nodes", "2",
                            "--max-restarts", "2", "sh", "-c", kScript}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "attempt 1 rank 0 of 2 on n0")) << r.out;
  EXPECT_TRUE(has(r.out, "attempt 1 rank 1 of 2 on n2")) << r.out;
  EXPECT_TRUE(has(r.err, "2 node(s) run the next attempt")) << r.err;
  EXPECT_TRUE(wait_job_gone(job, 5).empty());
}

TEST(HeadElasticity, TooFewNodesLeftEndsTheJobWithTheReason) {
  const std::string job = unique_job_id("toofew");
  auto r = run(dlaunch_cmd({"-H", three_nodes(), "--job-id", job, "--min-nodes", "3",
                            "--max-restarts", "2", "sh", "-c", kScript}));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_FALSE(has(r.out, "attempt 1")) << r.out;
  EXPECT_TRUE(has(r.err, "2 node(s) left, fewer than --min-nodes 3")) << r.err;
  EXPECT_FALSE(has(r.err, "restarting")) << r.err;
  EXPECT_TRUE(wait_job_gone(job, 5).empty());
}

TEST(HeadElasticity, AFailedRankRestartsOnTheSameNodes) {
  // A rank's own failure is the program's, not the host's: nothing is excluded.
  const std::string job = unique_job_id("samenodes");
  auto r = run(dlaunch_cmd(
      {"-H", three_nodes(), "--job-id", job, "--min-nodes", "1", "--max-restarts", "1", "sh", "-c",
       "echo attempt $TORCHELASTIC_RESTART_COUNT of $WORLD_SIZE on $DLAUNCH_NODE_NAME; "
       "[ $TORCHELASTIC_RESTART_COUNT = 1 ] || [ $RANK != 1 ] || exit 3"}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "attempt 1 of 3 on n1")) << r.out;
  EXPECT_FALSE(has(r.err, "excluded")) << r.err;
}

TEST(HeadElasticity, NumbersThatDoNotFitAreRefusedBeforeAnythingStarts) {
  auto r = run(dlaunch_cmd({"-H", three_nodes(), "--spares", "1", "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "--spares")) << r.err;
  EXPECT_TRUE(has(r.err, "--max-restarts")) << r.err;
  r = run(dlaunch_cmd(
      {"-H", three_nodes(), "--spares", "1", "--min-nodes", "3", "--max-restarts", "1", "true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "--min-nodes")) << r.err;
  r = run(dlaunch_cmd(
      {"-H", three_nodes(), "--spares", "1", "--max-restarts", "1", "--dry-run", "true"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "spare: n2 (localhost)")) << r.out;
  EXPECT_FALSE(has(r.out, "node 2:")) << r.out;
}
