// Waiting, many clients at once, barriers, and clients vanishing mid-wait.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "store_test_support.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using store_test::client_options;
using store_test::server_options;

class StoreConcurrency : public ::testing::Test {
 protected:
  dlaunch::comm::Store client() { return dlaunch::comm::Store(client_options(server.port())); }
  dlaunch::comm::ThreadedStoreServer server{server_options()};
};

}  // namespace

TEST_F(StoreConcurrency, GetBlocksUntilAnotherClientSetsTheKey) {
  auto reader = client();
  std::atomic<bool> returned{false};
  std::string value;
  auto start = Clock::now();
  std::thread t([&] {
    value = reader.get("late/key", 10s);
    returned = true;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(returned);
  client().set("late/key", "here");
  t.join();
  EXPECT_EQ(value, "here");
  EXPECT_GE(Clock::now() - start, 190ms);
}

TEST_F(StoreConcurrency, WaitReturnsOnlyOnceEveryKeyExists) {
  auto waiter = client();
  std::atomic<bool> returned{false};
  std::thread t([&] {
    waiter.wait({"a", "b", "c"}, 10s);
    returned = true;
  });
  auto writer = client();
  writer.set("c", "3");
  writer.set("a", "1");
  writer.delete_key("c");  // the waiter passed "c" already; it must notice it is gone
  writer.set("b", "2");
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(returned);
  writer.set("c", "3");
  t.join();
  EXPECT_TRUE(returned);
}

TEST_F(StoreConcurrency, MultiGetWaitsForAllKeys) {
  auto getter = client();
  std::vector<std::string> values;
  std::thread t([&] { values = getter.multi_get({"p", "q"}); });
  auto writer = client();
  writer.set("q", "2");
  writer.add("p", 7);
  t.join();
  EXPECT_EQ(values, (std::vector<std::string>{"7", "2"}));
}

TEST_F(StoreConcurrency, ManyParkedGettersAllWakeOnOneSet) {
  constexpr int kThreads = 32;
  std::vector<std::thread> threads;
  std::atomic<int> woke{0};
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      auto c = client();
      if (c.get("go", 20s) == "now") ++woke;
    });
  }
  std::this_thread::sleep_for(200ms);
  client().set("go", "now");
  for (auto& t : threads) t.join();
  EXPECT_EQ(woke, kThreads);
}

TEST_F(StoreConcurrency, SixtyFourClientsAddSetAndGetConcurrently) {
  constexpr int kThreads = 64;
  constexpr int kRounds = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto c = client();
      for (int r = 0; r < kRounds; ++r) {
        c.add("counter", 1);
        const std::string key =
            std::string("t").append(std::to_string(i)).append("/").append(std::to_string(r));
        c.set(key, std::to_string(i * r));
        if (c.get(key) != std::to_string(i * r)) ++failures;
        // Another thread's key: blocks until that thread gets there.
        const std::string other = std::string("t")
                                      .append(std::to_string((i + 1) % kThreads))
                                      .append("/")
                                      .append(std::to_string(r));
        if (c.get(other, 30s) != std::to_string(((i + 1) % kThreads) * r)) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(client().add("counter", 0), kThreads * kRounds);
}

TEST_F(StoreConcurrency, OneStoreSharedByManyThreadsSerialisesRequests) {
  auto shared = client();
  std::vector<std::thread> threads;
  threads.reserve(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int r = 0; r < 200; ++r) {
        shared.add("n", 1);
        shared.set(std::string("k").append(std::to_string(i)), std::to_string(r));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(shared.add("n", 0), 1600);
  EXPECT_EQ(shared.get("k3"), "199");
}

TEST_F(StoreConcurrency, BarrierOfSixteenThreadsHoldsEveryRoundAndIsReusable) {
  constexpr int kThreads = 16;
  constexpr int kRounds = 3;
  std::atomic<int> arrived[kRounds] = {};
  std::atomic<int> early{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto c = client();
      for (int r = 0; r < kRounds; ++r) {
        // Stagger arrivals so that an early release would be seen.
        std::this_thread::sleep_for(std::chrono::milliseconds((i * 7 + r * 3) % 20));
        ++arrived[r];
        c.barrier("step", kThreads, 30s);
        if (arrived[r] != kThreads) ++early;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(early, 0);
  // Only the last round's marker is left behind, plus the counter.
  EXPECT_EQ(client().num_keys(), 2);
}

TEST_F(StoreConcurrency, BarrierTimesOutNamingHowManyArrived) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(3);
  threads.reserve(3);
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      auto c = client();
      try {
        c.barrier("short", 4, 500ms);
      } catch (const dlaunch::comm::StoreError& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    EXPECT_NE(e.find("barrier(\"short\", 4) timed out after 0.5 s: 3 of 4 arrived"),
              std::string::npos)
        << e;
  }
}

TEST_F(StoreConcurrency, ServerCopesWithAClientVanishingWhileParked) {
  {
    store_test::RawClient raw(server.port());
    raw.authenticate();
    // get("k") with a one-hour timeout, then hang up before the answer.
    raw.send_frame(dlaunch::comm::detail::Writer(uint8_t(dlaunch::comm::detail::Op::get))
                       .u64(3600000)
                       .str("k")
                       .finish());
    std::this_thread::sleep_for(100ms);
  }
  auto c = client();
  c.set("k", "v");
  EXPECT_EQ(c.get("k"), "v");
  auto deadline = Clock::now() + 5s;
  while (server.connections() != 1 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server.connections(), 1u);
}

TEST_F(StoreConcurrency, PipelinedRequestsWaitBehindAParkedOne) {
  store_test::RawClient raw(server.port());
  raw.authenticate();
  using dlaunch::comm::detail::Op;
  using dlaunch::comm::detail::Writer;
  const std::string first = raw.tagged(Writer(uint8_t(Op::get)).u64(10000).str("first").finish());
  raw.send(first + raw.tagged(Writer(uint8_t(Op::set)).str("second").str("2").finish()));
  std::this_thread::sleep_for(100ms);
  auto c = client();
  EXPECT_FALSE(c.check({"second"}));  // held back until "first" is answered
  c.set("first", "1");
  auto a = raw.read_frame();
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, std::string("\0"        // ok
                            "\1\0\0\0"  // u32 length, little-endian
                            "1",
                            6));
  auto b = raw.read_frame();
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, std::string(1, '\0'));
  EXPECT_TRUE(c.check({"second"}));
}
