// The job core's rank table (launcher/core/rank_table.h): each rank's state,
// its moves, and what it refuses, without processes or sockets.
#include <chrono>
#include <stdexcept>

#include <gtest/gtest.h>

#include "core/rank_table.h"

namespace dlaunch {
namespace {

using R = RankState;

constexpr R kAllRankStates[] = {R::kElsewhere, R::kWaiting, R::kRunning, R::kExited, R::kGone};

// Six ranks: node 0 runs 0 and 1, node 1 runs 2 and 3 (local ranks 0, 1);
// ranks 4 and 5 are another launcher's.
RankTable two_nodes() {
  RankTable t(6);
  t.place(0, 0, 0);
  t.place(1, 0, 1);
  t.place(2, 1, 0);
  t.place(3, 1, 1);
  return t;
}

proto::Exited exited(int rank, int code = 0) {
  return {.rank = rank, .kind = proto::ExitKind::kExited, .code = code};
}

TEST(RankState, TheMovesAreTheDiagramsAndNoOthers) {
  int allowed = 0;
  for (R from : kAllRankStates) {
    for (R to : kAllRankStates) allowed += rank_transition_allowed(from, to) ? 1 : 0;
  }
  EXPECT_EQ(allowed, 5);
  EXPECT_TRUE(rank_transition_allowed(R::kWaiting, R::kRunning));
  EXPECT_TRUE(rank_transition_allowed(R::kRunning, R::kExited));
  EXPECT_TRUE(rank_transition_allowed(R::kWaiting, R::kExited)) << "a spawn that failed";
  EXPECT_TRUE(rank_transition_allowed(R::kWaiting, R::kGone));
  EXPECT_TRUE(rank_transition_allowed(R::kRunning, R::kGone));
  for (R to : kAllRankStates) {
    EXPECT_FALSE(rank_transition_allowed(R::kElsewhere, to)) << rank_state_name(to);
    EXPECT_FALSE(rank_transition_allowed(R::kExited, to)) << rank_state_name(to);
    EXPECT_FALSE(rank_transition_allowed(R::kGone, to)) << rank_state_name(to);
  }
}

TEST(RankTable, PlacedRanksWaitAndTheOthersAreElsewhereAndSettled) {
  const RankTable t = two_nodes();
  EXPECT_EQ(t.size(), 6);
  EXPECT_EQ(t.at(3).state, R::kWaiting);
  EXPECT_EQ(t.at(3).node, 1u);
  EXPECT_EQ(t.at(3).local_rank, 1);
  EXPECT_TRUE(t.runs_on(3, 1));
  EXPECT_FALSE(t.runs_on(3, 0));
  EXPECT_FALSE(t.runs_on(4, 0)) << "another launcher's";
  EXPECT_FALSE(t.runs_on(-1, 0));
  EXPECT_FALSE(t.runs_on(6, 0));
  for (int k : {0, 1, 2, 3}) EXPECT_FALSE(t.settled(k)) << k;
  for (int k : {4, 5}) {
    EXPECT_EQ(t.at(k).state, R::kElsewhere);
    EXPECT_TRUE(t.settled(k)) << "nothing here waits for it";
  }
  EXPECT_EQ(t.started(), 0);
  EXPECT_EQ(t.running_now(), 0);
}

TEST(RankTable, StartedThenExitedIsKeptWithItsPidTimeAndExit) {
  RankTable t = two_nodes();
  const SteadyTime at{std::chrono::seconds(5)};
  EXPECT_EQ(t.start(1, 2, 4242, at), "");
  EXPECT_TRUE(t.running(2));
  EXPECT_EQ(t.at(2).pid, 4242);
  EXPECT_EQ(t.at(2).started_at, at);
  EXPECT_EQ(t.started(), 1);
  EXPECT_EQ(t.running_now(), 1);
  EXPECT_EQ(t.exit(1, exited(2, 3)), "");
  EXPECT_EQ(t.at(2).state, R::kExited);
  EXPECT_EQ(t.at(2).exit.code, 3);
  EXPECT_TRUE(t.settled(2));
  EXPECT_EQ(t.started(), 1) << "counts up, never down";
  EXPECT_EQ(t.running_now(), 0);
  // A rank whose spawn failed exits without having started.
  EXPECT_EQ(t.exit(1, {.rank = 3, .kind = proto::ExitKind::kSpawnFailed}), "");
  EXPECT_EQ(t.at(3).state, R::kExited);
}

TEST(RankTable, AMessageThatDoesNotFitIsRefusedNamedAndChangesNothing) {
  RankTable t = two_nodes();
  const SteadyTime at{};
  EXPECT_EQ(t.start(0, 2, 1, at), "rank 2 is not run by this node");
  EXPECT_EQ(t.start(0, 4, 1, at), "rank 4 is not run by this node");
  EXPECT_EQ(t.start(0, 99, 1, at), "rank 99 is not run by this node");
  EXPECT_EQ(t.exit(1, exited(0)), "rank 0 is not run by this node");
  EXPECT_EQ(t.exit(0, exited(-3)), "rank -3 is not run by this node");
  EXPECT_EQ(t.started(), 0);
  ASSERT_EQ(t.start(0, 0, 10, at), "");
  EXPECT_EQ(t.start(0, 0, 11, at), "rank 0 said it started while it was running");
  EXPECT_EQ(t.at(0).pid, 10);
  EXPECT_EQ(t.started(), 1) << "a second Started is not counted";
  ASSERT_EQ(t.exit(0, exited(0)), "");
  EXPECT_EQ(t.exit(0, exited(0, 1)), "rank 0 said it exited while it was exited");
  EXPECT_EQ(t.at(0).exit.code, 0) << "the first exit stays";
  EXPECT_EQ(t.start(0, 0, 12, at), "rank 0 said it started while it was exited");
}

TEST(RankTable, ANodeGoneTakesItsUnsettledRanksAndNoOthers) {
  RankTable t = two_nodes();
  ASSERT_EQ(t.start(0, 0, 1, {}), "");
  ASSERT_EQ(t.start(1, 2, 1, {}), "");
  ASSERT_EQ(t.exit(1, exited(2)), "");
  ASSERT_EQ(t.start(1, 3, 1, {}), "");
  t.node_gone(1);
  EXPECT_EQ(t.at(2).state, R::kExited) << "it said how it ended";
  EXPECT_EQ(t.at(3).state, R::kGone);
  EXPECT_EQ(t.at(0).state, R::kRunning);
  EXPECT_EQ(t.at(1).state, R::kWaiting);
  EXPECT_EQ(t.exit(1, exited(3)), "rank 3 said it exited while it was gone");
  t.node_gone(7);  // a node that runs nothing here
  t.all_gone();
  for (int k : {0, 1, 3}) EXPECT_EQ(t.at(k).state, R::kGone) << k;
  EXPECT_EQ(t.at(2).state, R::kExited);
  EXPECT_EQ(t.at(4).state, R::kElsewhere);
  EXPECT_EQ(t.running_now(), 0);
  for (int k = 0; k < t.size(); ++k) EXPECT_TRUE(t.settled(k)) << k;
}

}  // namespace
}  // namespace dlaunch
