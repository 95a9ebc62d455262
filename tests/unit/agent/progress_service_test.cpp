// The ranks' progress counters as a node service (agent/progress_service.h),
// without an agent: one sealed counter per rank of the node from Setup, each
// rank's own at spawn, the sum to the head each interval while the workers
// run and only when it moved, a damaged counter said once with its rank.
// Real memfds; the counters written as comm writes them; a ManualClock.
#include "progress_service.h"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "../seams/manual_clock.h"
#include "fake_node.h"

namespace {

namespace proto = dlaunch::proto;
using dlaunch::agent::NodeService;
using dlaunch::agent::ProgressService;
using std::chrono::milliseconds;

proto::Setup setup_of(std::uint32_t interval_ms, const std::vector<std::int32_t>& ranks) {
  proto::Setup s;
  s.progress_interval_ms = interval_ms;
  for (const auto r : ranks) s.workers.push_back(proto::WorkerSpec{.rank = r});
  return s;
}

// What comm does after a completed call: the slot's counter, at its start.
void set_counter(int fd, std::uint64_t value) {
  ASSERT_EQ(::pwrite(fd, &value, sizeof value, 0), static_cast<ssize_t>(sizeof value));
}

class ProgressServiceTest : public ::testing::Test {
 protected:
  // Setup with these ranks (100 ms apart), each spawned, the workers running:
  // each rank's counter, by rank.
  std::map<int, int> run_ranks(const std::vector<std::int32_t>& ranks) {
    proto::Ready ready;
    EXPECT_EQ(service_.prepare(setup_of(100, ranks), ready), std::nullopt);
    std::map<int, int> counters;
    for (const auto rank : ranks) {
      NodeService::WorkerGift gift;
      service_.before_spawn(rank, gift);
      counters[rank] = gift.keep_fd;
    }
    node_.running = true;
    service_.on_running();
    return counters;
  }

  dltest::ManualClock clock_;
  dltest::FakeNode node_;
  ProgressService service_{clock_, node_};
};

TEST_F(ProgressServiceTest, EachRankGetsItsOwnCounterAtSlotZero) {
  proto::Ready ready;
  ASSERT_EQ(service_.prepare(setup_of(100, {5, 3}), ready), std::nullopt);
  ASSERT_TRUE(service_.active());
  NodeService::WorkerGift three, five, other;
  service_.before_spawn(3, three);
  service_.before_spawn(5, five);
  service_.before_spawn(9, other);
  ASSERT_GE(three.keep_fd, 0);
  ASSERT_GE(five.keep_fd, 0);
  EXPECT_NE(three.keep_fd, five.keep_fd);
  EXPECT_EQ(three.env, (proto::Env{{"DLAUNCH_PROGRESS_FD", std::to_string(three.keep_fd)},
                                   {"DLAUNCH_PROGRESS_SLOT", "0"}}));
  EXPECT_EQ(other.keep_fd, -1);
  EXPECT_TRUE(other.env.empty());
}

TEST_F(ProgressServiceTest, TheSumGoesToTheHeadEachIntervalWhenItMoved) {
  auto counter = run_ranks({0, 1});
  clock_.advance(milliseconds(99));
  EXPECT_TRUE(node_.sent.empty());
  set_counter(counter[0], 4);
  set_counter(counter[1], 3);
  clock_.advance(milliseconds(1));
  ASSERT_EQ(node_.sent_of<proto::Progress>().size(), 1u);
  EXPECT_EQ(node_.sent_of<proto::Progress>()[0].collectives, 7u);
  clock_.advance(milliseconds(300));  // nothing moved: nothing said
  EXPECT_EQ(node_.sent.size(), 1u);
  set_counter(counter[1], 5);
  clock_.advance(milliseconds(100));
  ASSERT_EQ(node_.sent_of<proto::Progress>().size(), 2u);
  EXPECT_EQ(node_.sent_of<proto::Progress>()[1].collectives, 9u);
}

TEST_F(ProgressServiceTest, ACounterSetBackIsThatRanksDamageSaidOnce) {
  auto counter = run_ranks({2, 6});
  set_counter(counter[6], 10);
  clock_.advance(milliseconds(100));
  set_counter(counter[6], 2);
  clock_.advance(milliseconds(100));
  clock_.advance(milliseconds(100));
  const auto damaged = node_.sent_of<proto::ProgressDamaged>();
  ASSERT_EQ(damaged.size(), 1u);
  EXPECT_EQ(damaged[0].rank, 6);
  EXPECT_NE(damaged[0].what.find("set its progress counter back from 10 to 2"), std::string::npos)
      << damaged[0].what;
}

TEST_F(ProgressServiceTest, NothingIsSaidOnceTheWorkersStopOrWithoutAnInterval) {
  auto counter = run_ranks({0});
  node_.running = false;  // an Abort came
  set_counter(counter[0], 1);
  clock_.advance(milliseconds(1000));
  EXPECT_TRUE(node_.sent.empty());

  ProgressService off(clock_, node_);
  proto::Ready ready;
  ASSERT_EQ(off.prepare(setup_of(0, {0}), ready), std::nullopt);
  EXPECT_FALSE(off.active());
  NodeService::WorkerGift none;
  off.before_spawn(0, none);
  EXPECT_EQ(none.keep_fd, -1);
  EXPECT_TRUE(none.env.empty());
}

}  // namespace
