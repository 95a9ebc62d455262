// StoreFence (launcher/pernode/store_fence.h) on one event loop, over the
// rendezvous store in memory (tests/unit/seams/memory_store.h) and a manual
// clock: several launchers' relays meet with no thread, no socket and no real
// time. store_fence_test.cpp runs the same relay over the real TCP store.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "../seams/manual_clock.h"
#include "../seams/memory_store.h"
#include "pernode/store_fence.h"

namespace dlaunch {
namespace {

using namespace std::chrono_literals;

constexpr std::uint16_t kFencePort = 29600;
constexpr const char* kFenceSecret = "the job's secret";

struct Bed {
  boost::asio::io_context io;
  dltest::ManualClock clock;
  dltest::MemoryStoreNetwork net;
  std::unique_ptr<rdzv::StoreHost> store;

  Bed() {
    net.set_clock(clock);
    comm::StoreServerOptions so;
    so.bind_address = "127.0.0.1";
    so.port = kFencePort;
    so.secret = kFenceSecret;
    store = net.host(so);
  }
  std::unique_ptr<StoreFence> relay(int nnodes, int node_rank,
                                    const std::string& secret = kFenceSecret) {
    comm::StoreOptions co;
    co.host = "127.0.0.1";
    co.port = kFencePort;
    co.secret = secret;
    co.connect_timeout = 2s;
    co.timeout = 2s;
    return std::make_unique<StoreFence>(
        net.connect_async(io, co),
        StoreFenceOptions{.prefix = "dlaunch/rdzv/r0/", .nnodes = nnodes, .node_rank = node_rank});
  }
  // Runs what is ready on the loop (no time passes).
  void settle() {
    io.restart();
    io.poll();
  }
};

struct FenceAnswer {
  std::optional<std::string> all;
  std::string error;
};

std::function<void(std::string, std::string)> into(FenceAnswer& a) {
  return [&a](std::string all, std::string error) { a = {std::move(all), std::move(error)}; };
}

TEST(StoreFenceOnTheLoop, ThreeNodesMeetOnOneLoopWithoutTimePassing) {
  Bed bed;
  const auto start = bed.clock.now();
  std::vector<std::unique_ptr<StoreFence>> relays;
  std::vector<FenceAnswer> got(3);
  relays.reserve(3);
  for (int j = 0; j < 3; ++j) relays.push_back(bed.relay(3, j));
  for (int j = 2; j >= 0; --j) {
    relays[static_cast<std::size_t>(j)]->fence(0, "<" + std::to_string(j) + ">",
                                               into(got[static_cast<std::size_t>(j)]));
  }
  bed.settle();
  for (const auto& a : got) {
    ASSERT_TRUE(a.all.has_value());
    EXPECT_EQ(*a.all, "<0><1><2>");
    EXPECT_EQ(a.error, "");
  }
  EXPECT_EQ(bed.clock.now(), start);
}

TEST(StoreFenceOnTheLoop, AFenceWaitsPastItsParkedWaitsUntilTheLastNodeComes) {
  Bed bed;
  auto a = bed.relay(2, 0);
  auto b = bed.relay(2, 1);
  FenceAnswer got_a;
  FenceAnswer got_b;
  a->fence(0, "a", into(got_a));
  bed.settle();
  // Three days: each parked wait (a day) times out and the relay parks another.
  for (int day = 0; day < 3; ++day) {
    bed.clock.advance(25h);
    bed.settle();
  }
  EXPECT_FALSE(got_a.all.has_value()) << "a fence answered before every node came";
  b->fence(0, "b", into(got_b));
  bed.settle();
  ASSERT_TRUE(got_a.all.has_value());
  ASSERT_TRUE(got_b.all.has_value());
  EXPECT_EQ(*got_a.all, "ab");
  EXPECT_EQ(*got_b.all, "ab");
}

TEST(StoreFenceOnTheLoop, FencesAskedAheadCompleteInOrder) {
  Bed bed;
  auto a = bed.relay(2, 0);
  auto b = bed.relay(2, 1);
  std::vector<std::string> order;
  for (std::uint32_t k = 0; k < 3; ++k) {
    a->fence(k, "a" + std::to_string(k),
             [&order](std::string all, const std::string&) { order.push_back(std::move(all)); });
  }
  bed.settle();
  EXPECT_TRUE(order.empty());
  for (std::uint32_t k = 0; k < 3; ++k) {
    b->fence(k, "b" + std::to_string(k), [](const std::string&, const std::string&) {});
  }
  bed.settle();
  EXPECT_EQ(order, (std::vector<std::string>{"a0b0", "a1b1", "a2b2"}));
}

TEST(StoreFenceOnTheLoop, AStoreThatRefusesTheSecretFailsTheFence) {
  Bed bed;
  auto a = bed.relay(1, 0, "not the secret");
  FenceAnswer got;
  a->fence(0, "x", into(got));
  bed.settle();
  ASSERT_TRUE(got.all.has_value());
  EXPECT_NE(got.error.find("secret"), std::string::npos) << got.error;
}

TEST(StoreFenceOnTheLoop, ARelayDestroyedWhileItWaitsNeverAnswers) {
  Bed bed;
  bool answered = false;
  {
    auto a = bed.relay(2, 0);
    a->fence(0, "alone", [&](const std::string&, const std::string&) { answered = true; });
    bed.settle();
    bed.clock.advance(1h);
  }
  bed.clock.advance(48h);
  bed.settle();
  EXPECT_FALSE(answered);
  // Its part stays in the store; nothing else of it is left to run.
  EXPECT_EQ(bed.net.value_at(kFencePort, "dlaunch/rdzv/r0/fence/0/0"), "alone");
  EXPECT_EQ(bed.clock.next_due(), std::chrono::steady_clock::duration::max());
}

}  // namespace
}  // namespace dlaunch
