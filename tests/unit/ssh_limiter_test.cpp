// The SSH connection limiter: the adaptive window's decisions on a manual
// clock, how failures count, and the queue of connections on an event loop.
#include <algorithm>
#include <functional>
#include <map>
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without it
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "seams/manual_clock.h"
#include "transport/ssh/connect.h"
#include "transport/ssh/limiter.h"

namespace ssh = dlaunch::ssh;
using std::chrono::milliseconds;
using Outcome = ssh::SlotOutcome;

namespace {

ssh::LimiterConfig adaptive(int initial, int min = 4, int max = 1024) {
  ssh::LimiterConfig c = ssh::LimiterConfig::for_timeout(milliseconds(10000), 0);
  c.initial = initial;
  c.min = min;
  c.max = max;
  return c;
}

// `count` connections that start now and end after `took` with `outcome`,
// one after the other in the same instant (as a round of them would).
void round_of(ssh::ConcurrencyPolicy& p, dltest::ManualClock& clock, int count, milliseconds took,
              Outcome outcome) {
  std::vector<ssh::ConcurrencyPolicy::Ticket> tickets;
  tickets.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) tickets.push_back(ssh::ConcurrencyPolicy::started(clock.now()));
  clock.advance(took);
  for (const auto& t : tickets) p.finished(t, clock.now(), outcome);
}

TEST(SshLimiterPolicy, FastAndSlowFollowTheQuickestConnectionWithinTheTimeout) {
  dltest::ManualClock clock;
  ssh::ConcurrencyPolicy p(adaptive(64));
  EXPECT_EQ(p.fast(), milliseconds(1250));  // nothing seen yet: an eighth of 10 s
  EXPECT_EQ(p.slow(), milliseconds(2500));  // and a quarter
  round_of(p, clock, 1, milliseconds(100), Outcome::kDone);
  EXPECT_EQ(p.fast(), milliseconds(1250));  // 2 x 100 ms is under the floor
  round_of(p, clock, 1, milliseconds(1000), Outcome::kDone);
  EXPECT_EQ(p.fast(), milliseconds(1250));  // the quickest still counts
  // A network with a long round trip: every connection takes 1 s at best.
  ssh::ConcurrencyPolicy far(adaptive(64));
  round_of(far, clock, 1, milliseconds(1000), Outcome::kDone);
  EXPECT_EQ(far.fast(), milliseconds(2000));
  EXPECT_EQ(far.slow(), milliseconds(4000));
  ssh::ConcurrencyPolicy farther(adaptive(64));
  round_of(farther, clock, 1, milliseconds(3000), Outcome::kDone);
  const std::chrono::steady_clock::duration ten_s = std::chrono::seconds(10);
  EXPECT_EQ(farther.fast(), ten_s / 3);           // at most a third of the timeout
  EXPECT_EQ(farther.slow(), milliseconds(5000));  // and half
}

TEST(SshLimiterPolicy, TheDefaults) {
  const auto c = ssh::LimiterConfig::for_timeout(milliseconds(10000), 0);
  EXPECT_EQ(c.initial, 64);
  EXPECT_EQ(c.min, 4);
  EXPECT_EQ(c.max, 1024);
  EXPECT_EQ(c.timeout, milliseconds(10000));
}

TEST(SshLimiterPolicy, ALongRoundTripIsNotMistakenForLoad) {
  // 1.5 s per connection however many there are (the network, not the
  // hosts): the window grows to the maximum.
  dltest::ManualClock clock;
  ssh::ConcurrencyPolicy p(adaptive(64));
  for (int i = 0; i < 6; ++i) round_of(p, clock, p.limit(), milliseconds(1500), Outcome::kDone);
  EXPECT_EQ(p.limit(), 1024);
}

TEST(SshLimiterPolicy, AFixedLimitNeverMoves) {
  dltest::ManualClock clock;
  ssh::ConcurrencyPolicy p(ssh::LimiterConfig::for_timeout(milliseconds(10000), 16));
  EXPECT_FALSE(p.adaptive());
  round_of(p, clock, 100, milliseconds(10), Outcome::kDone);
  EXPECT_EQ(p.limit(), 16);
  round_of(p, clock, 100, milliseconds(10), Outcome::kCongested);
  round_of(p, clock, 100, milliseconds(9000), Outcome::kDone);
  EXPECT_EQ(p.limit(), 16);
}

TEST(SshLimiterPolicy, FastCompletionsDoubleTheWindowPerRoundUpToTheMaximum) {
  dltest::ManualClock clock;
  ssh::ConcurrencyPolicy p(adaptive(64));
  EXPECT_EQ(p.limit(), 64);
  round_of(p, clock, 64, milliseconds(100), Outcome::kDone);
  EXPECT_EQ(p.limit(), 128);
  round_of(p, clock, 128, milliseconds(100), Outcome::kDone);
  EXPECT_EQ(p.limit(), 256);
  for (int i = 0; i < 5; ++i) round_of(p, clock, p.limit(), milliseconds(100), Outcome::kDone);
  EXPECT_EQ(p.limit(), 1024);
  EXPECT_TRUE(p.in_slow_start());
}

TEST(SshLimiterPolicy, CompletionsBetweenFastAndSlowHold) {
  dltest::ManualClock clock;
  ssh::ConcurrencyPolicy p(adaptive(64));
  round_of(p, clock, 1, milliseconds(100), Outcome::kDone);  // the quickest: 100 ms
  ASSERT_EQ(p.limit(), 65);
  round_of(p, clock, 200, milliseconds(2000), Outcome::kDone);
  EXPECT_EQ(p.limit(), 65);
  EXPECT_TRUE(p.in_slow_start());
}

TEST(SshLimiterPolicy, ATimeoutOrResetHalvesOncePerRound) {
  dltest::ManualClock clock;
  ssh::ConcurrencyPolicy p(adaptive(64));
  // 64 under way when the first of them times out: the window halves once;
  // the others started before that cut and do not cut it again.
  std::vector<ssh::ConcurrencyPolicy::Ticket> under_way;
  under_way.reserve(64);
  for (int i = 0; i < 64; ++i) under_way.push_back(ssh::ConcurrencyPolicy::started(clock.now()));
  clock.advance(milliseconds(10000));
  for (const auto& t : under_way) p.finished(t, clock.now(), Outcome::kCongested);
  EXPECT_EQ(p.limit(), 32);
  EXPECT_FALSE(p.in_slow_start());
  // One started after the cut that fails too: the next halving.
  round_of(p, clock, 1, milliseconds(10000), Outcome::kCongested);
  EXPECT_EQ(p.limit(), 16);
}

TEST(SshLimiterPolicy, ASlowCompletionCountsAsCongestion) {
  dltest::ManualClock clock;
  ssh::ConcurrencyPolicy p(adaptive(64));
  round_of(p, clock, 1, milliseconds(100), Outcome::kDone);  // the quickest: 100 ms
  round_of(p, clock, 64, milliseconds(3000), Outcome::kDone);
  EXPECT_EQ(p.limit(), 32);
}

TEST(SshLimiterPolicy, AfterACutTheWindowGrowsByOnePerRound) {
  dltest::ManualClock clock;
  ssh::ConcurrencyPolicy p(adaptive(64));
  round_of(p, clock, 1, milliseconds(10000), Outcome::kCongested);
  ASSERT_EQ(p.limit(), 32);
  round_of(p, clock, 32, milliseconds(100), Outcome::kDone);
  EXPECT_EQ(p.limit(), 32);  // 32 + 32 x 1/32.x: just under 33
  round_of(p, clock, 33, milliseconds(100), Outcome::kDone);
  EXPECT_EQ(p.limit(), 33);
  for (int i = 0; i < 10; ++i) round_of(p, clock, p.limit() + 1, milliseconds(100), Outcome::kDone);
  EXPECT_GE(p.limit(), 43);
  EXPECT_LE(p.limit(), 44);
}

TEST(SshLimiterPolicy, NeutralOutcomesChangeNothing) {
  dltest::ManualClock clock;
  ssh::ConcurrencyPolicy p(adaptive(64));
  round_of(p, clock, 500, milliseconds(9000), Outcome::kNeutral);
  round_of(p, clock, 500, milliseconds(1), Outcome::kNeutral);
  EXPECT_EQ(p.limit(), 64);
  EXPECT_TRUE(p.in_slow_start());
}

TEST(SshLimiterPolicy, NeverBelowTheMinimum) {
  dltest::ManualClock clock;
  ssh::ConcurrencyPolicy p(adaptive(64, 4));
  for (int i = 0; i < 20; ++i) round_of(p, clock, 1, milliseconds(10000), Outcome::kCongested);
  EXPECT_EQ(p.limit(), 4);
  // And it climbs back out.
  for (int i = 0; i < 8; ++i) round_of(p, clock, p.limit() + 1, milliseconds(50), Outcome::kDone);
  EXPECT_GE(p.limit(), 11);
}

// Connections through the policy against a model of the hosts: `model(n)`
// says how a connection that starts with n in progress (itself included)
// ends and how long it takes. Returns what happened.
struct Simulated {
  int peak_window = 0;
  int final_window = 0;
  int congested = 0;
  std::chrono::steady_clock::duration took{};
};
Simulated simulate(ssh::ConcurrencyPolicy& p, dltest::ManualClock& clock, int total,
                   const std::function<std::pair<Outcome, milliseconds>(int)>& model) {
  Simulated r;
  const auto start = clock.now();
  std::multimap<dlaunch::SteadyTime, std::pair<ssh::ConcurrencyPolicy::Ticket, Outcome>> ends;
  int started = 0;
  for (;;) {
    while (started < total && static_cast<int>(ends.size()) < p.limit()) {
      const auto [outcome, took] = model(static_cast<int>(ends.size()) + 1);
      ends.emplace(clock.now() + took,
                   std::make_pair(ssh::ConcurrencyPolicy::started(clock.now()), outcome));
      ++started;
    }
    if (ends.empty()) break;
    const auto next = ends.begin();
    clock.advance(next->first - clock.now());
    p.finished(next->second.first, clock.now(), next->second.second);
    r.congested += next->second.second == Outcome::kCongested ? 1 : 0;
    ends.erase(next);
    r.peak_window = std::max(r.peak_window, p.limit());
  }
  r.final_window = p.limit();
  r.took = clock.now() - start;
  return r;
}

TEST(SshLimiterPolicy, HostsThatSlowDownWithLoadGetAWindowBetweenFastAndSlow) {
  // The one-machine test bed: every connection costs the hosts 10 ms of
  // CPU, shared by all in progress, plus 50 ms of round trips.
  dltest::ManualClock clock;
  ssh::ConcurrencyPolicy p(adaptive(64));
  const auto r = simulate(p, clock, 4096, [](int n) {
    return std::make_pair(Outcome::kDone, milliseconds(50 + 10 * n));
  });
  EXPECT_EQ(r.congested, 0);
  // Fast (1.25 s) up to 120 in progress, slow (2.5 s) from 245.
  EXPECT_GE(r.final_window, 100);
  EXPECT_LE(r.peak_window, 245);
}

TEST(SshLimiterPolicy, HostsThatDropConnectionsPastALimitAreKeptUnderIt) {
  // Fast, but past 300 connections in progress the hosts (or a firewall)
  // drop them: they time out after 10 s.
  dltest::ManualClock clock;
  ssh::ConcurrencyPolicy p(adaptive(64));
  const auto r = simulate(p, clock, 20000, [](int n) {
    return n > 300 ? std::make_pair(Outcome::kCongested, milliseconds(10000))
                   : std::make_pair(Outcome::kDone, milliseconds(50));
  });
  EXPECT_LE(r.final_window, 300 + 20);  // probing above it, additively
  EXPECT_GE(r.final_window, 150);       // but not collapsed
  EXPECT_LT(r.congested, 20000 / 20);   // few of them lost to the probing
}

TEST(SshLimiterOutcome, OverloadCountsRefusalsAndAuthDoNot) {
  using E = ssh::ConnectError;
  EXPECT_EQ(ssh::slot_outcome(E("connect", "timed out after 10.0 s (connecting with h:22)")),
            Outcome::kCongested);
  EXPECT_EQ(ssh::slot_outcome(E("auth", "timed out after 10.0 s (auth with h:22)")),
            Outcome::kCongested);
  EXPECT_EQ(ssh::slot_outcome(E("exec", "timed out starting the agent")), Outcome::kCongested);
  EXPECT_EQ(ssh::slot_outcome(
                E("handshake", "cannot connect to h:22: Connection reset by peer (3 attempts)")),
            Outcome::kCongested);
  EXPECT_EQ(ssh::slot_outcome(E("handshake", "cannot connect to h:22: End of file (3 attempts)")),
            Outcome::kCongested);
  EXPECT_EQ(
      ssh::slot_outcome(E("connect", "cannot connect to h:22: Connection refused (3 attempts)")),
      Outcome::kNeutral);
  EXPECT_EQ(ssh::slot_outcome(E("auth",
                                "authentication failed for u@h: the server offers "
                                "[publickey]; tried [no keys found]")),
            Outcome::kNeutral);
  EXPECT_EQ(ssh::slot_outcome(E("hostkey", "host key for h is not known")), Outcome::kNeutral);
  EXPECT_EQ(ssh::slot_outcome(E("cancelled", "cancelled (at auth)")), Outcome::kNeutral);
}

// The queue on an event loop: connections wait in order, and a window that
// grows lets several waiters in at once.
class SshLimiterQueue : public ::testing::Test {
 protected:
  void take(ssh::Limiter& l, int n) {
    for (int i = 0; i < n; ++i) {
      boost::asio::co_spawn(
          io_, [&]() -> boost::asio::awaitable<void> { granted_.push_back(co_await l.acquire()); },
          boost::asio::detached);
    }
    io_.poll();
  }
  void give_back(ssh::Limiter& l, Outcome o) {
    ASSERT_FALSE(granted_.empty());
    const auto t = granted_.front();
    granted_.erase(granted_.begin());
    l.release(t, o);
    io_.poll();
  }
  ssh::Limiter::Now now() {
    return [this] { return clock_.now(); };
  }
  boost::asio::io_context io_;
  dltest::ManualClock clock_;
  std::vector<ssh::Limiter::Ticket> granted_;
};

TEST_F(SshLimiterQueue, AFixedLimitPassesSlotsOnInOrder) {
  ssh::Limiter l(io_, ssh::LimiterConfig::for_timeout(milliseconds(10000), 2), now());
  take(l, 5);
  EXPECT_EQ(l.active(), 2);
  EXPECT_EQ(l.waiting(), 3);
  EXPECT_EQ(granted_.size(), 2U);
  give_back(l, Outcome::kDone);
  EXPECT_EQ(l.active(), 2);
  EXPECT_EQ(l.waiting(), 2);
  EXPECT_EQ(granted_.size(), 2U);
  for (int i = 0; i < 4; ++i) give_back(l, Outcome::kCongested);
  EXPECT_EQ(l.active(), 0);
  EXPECT_EQ(l.waiting(), 0);
}

TEST_F(SshLimiterQueue, AGrowingWindowLetsMoreWaitersIn) {
  ssh::Limiter l(io_, adaptive(4), now());
  take(l, 10);
  EXPECT_EQ(l.active(), 4);
  clock_.advance(milliseconds(100));
  give_back(l, Outcome::kDone);  // fast: the window is 5, one left: two more go
  EXPECT_EQ(l.policy().limit(), 5);
  EXPECT_EQ(l.active(), 5);
  EXPECT_EQ(l.waiting(), 4);
}

TEST_F(SshLimiterQueue, AShrunkWindowHoldsWaitersUntilFewerAreActive) {
  ssh::Limiter l(io_, adaptive(8, 2), now());
  take(l, 12);
  EXPECT_EQ(l.active(), 8);
  clock_.advance(milliseconds(10000));
  give_back(l, Outcome::kCongested);  // the window is 4; 7 still active
  EXPECT_EQ(l.policy().limit(), 4);
  EXPECT_EQ(l.active(), 7);
  EXPECT_EQ(l.waiting(), 4);
  for (int i = 0; i < 3; ++i) give_back(l, Outcome::kNeutral);
  EXPECT_EQ(l.active(), 4);
  EXPECT_EQ(l.waiting(), 4);
  give_back(l, Outcome::kNeutral);  // 3 active: one waiter goes
  EXPECT_EQ(l.active(), 4);
  EXPECT_EQ(l.waiting(), 3);
}

}  // namespace
