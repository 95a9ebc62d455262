// HeartbeatMonitor with a StarvationWatch: a peer whose heartbeats are
// carried by a process that waits for a CPU is late, not gone; a peer whose
// carriers run freely, or are gone, is declared at the timeout as before.
// The delays are made up (the reader), the clock is manual: no processes.
#include "dlaunch/proto/heartbeat.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "dlaunch/proc_stat.h"
#include "seams/manual_clock.h"

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct Fixture {
  dltest::ManualClock clock;
  std::map<long, std::int64_t> delay_ns;  // pid -> waited so far; absent: gone
  std::vector<std::size_t> silent;
  dlaunch::proto::HeartbeatMonitor monitor{
      clock,
      seconds(10),
      milliseconds(0),
      2,
      {.send = [] {},
       .read_pending = [](std::size_t) {},
       .silent = [this](std::size_t p) { silent.push_back(p); }}};

  Fixture() {
    monitor.starvation().set_reader([this](const dlaunch::ProcessRef& p) {
      const auto it = delay_ns.find(p.pid);
      return it == delay_ns.end() ? std::nullopt : std::optional<std::int64_t>(it->second);
    });
  }
  // `pid` waits for a CPU `share` of the next `d` (in steps of 100 ms).
  void starve(long pid, double share, std::chrono::steady_clock::duration d) {
    for (auto t = d.zero(); t < d; t += milliseconds(100)) {
      delay_ns[pid] += static_cast<std::int64_t>(share * 1e8);
      clock.advance(milliseconds(100));
    }
  }
};

TEST(HeartbeatStarvation, ASilentPeerWithoutWatchedProcessesIsDeclaredAtTheTimeout) {
  Fixture f;
  f.monitor.start();
  f.clock.advance(seconds(10));
  EXPECT_TRUE(f.silent.empty());
  f.clock.advance(milliseconds(2));
  EXPECT_EQ(f.silent, (std::vector<std::size_t>{0, 1}));
}

TEST(HeartbeatStarvation, APeerWhoseCarrierWaitsForACpuIsNotDeclaredWhileItWaits) {
  Fixture f;
  f.delay_ns[100] = 0;
  f.delay_ns[200] = 0;
  f.monitor.starvation().watch(0, {.pid = 100, .start_ticks = 1});
  f.monitor.starvation().watch(1, {.pid = 200, .start_ticks = 1});
  f.monitor.start();
  // Peer 0's relay waits 90% of the time (a saturated machine); peer 1's
  // runs freely (5%).
  for (int k = 0; k < 300; ++k) {
    f.delay_ns[100] += 90'000'000;
    f.delay_ns[200] += 5'000'000;
    f.clock.advance(milliseconds(100));
  }
  EXPECT_EQ(f.silent, (std::vector<std::size_t>{1})) << "30 s: only the unstarved peer is silent";
  // The machine recovers; peer 0 is still silent: declared within a timeout
  // and an interval (its silence counted again from the last excuse).
  f.starve(100, 0.0, seconds(10) + milliseconds(3400));
  EXPECT_EQ(f.silent, (std::vector<std::size_t>{1, 0}));
}

TEST(HeartbeatStarvation, AQuarterOfTheTimeWaitingIsTheLine) {
  Fixture f;
  f.delay_ns[100] = 0;
  f.monitor.starvation().watch(0, {.pid = 100, .start_ticks = 1});
  f.monitor.start();
  f.monitor.forget(1);
  f.starve(100, 0.20, seconds(11));
  EXPECT_EQ(f.silent, (std::vector<std::size_t>{0})) << "waiting 20% of the time is no excuse";

  Fixture g;
  g.delay_ns[100] = 0;
  g.monitor.starvation().watch(0, {.pid = 100, .start_ticks = 1});
  g.monitor.start();
  g.monitor.forget(1);
  g.starve(100, 0.30, seconds(11));
  EXPECT_TRUE(g.silent.empty()) << "waiting 30% of the time is";
}

TEST(HeartbeatStarvation, AGoneCarrierExcusesNothing) {
  Fixture f;
  f.delay_ns[100] = 0;
  f.monitor.starvation().watch(0, {.pid = 100, .start_ticks = 1});
  f.monitor.start();
  f.monitor.forget(1);
  f.starve(100, 1.0, seconds(5));
  f.delay_ns.erase(100);  // the head died: its /proc entry is gone
  f.clock.advance(seconds(5) + milliseconds(2));
  EXPECT_EQ(f.silent, (std::vector<std::size_t>{0}));
}

TEST(HeartbeatStarvation, HeardPeersAreNeverDeclaredWhateverTheirCarriersDo) {
  Fixture f;
  f.delay_ns[100] = 0;
  f.monitor.starvation().watch(0, {.pid = 100, .start_ticks = 1});
  f.monitor.start();
  for (int s = 0; s < 30; ++s) {
    f.clock.advance(seconds(1));
    f.monitor.heard(0);
    f.monitor.heard(1);
  }
  EXPECT_TRUE(f.silent.empty());
}

TEST(HeartbeatStarvation, AProcessRefWithoutAStartTimeIsNotWatched) {
  dlaunch::proto::StarvationWatch w([](const dlaunch::ProcessRef&) { return 0; });
  w.watch(0, {.pid = 100, .start_ticks = 0});
  w.watch(0, {.pid = 0, .start_ticks = 5});
  EXPECT_TRUE(w.empty());
}

TEST(ProcStat, ThisProcessHasADelayFigureAndAnotherStartTimeHasNone) {
  const auto self = dlaunch::this_process();
  ASSERT_GT(self.start_ticks, 0u);
  const auto d = dlaunch::run_delay_ns(self);
  if (!d) GTEST_SKIP() << "this kernel keeps no schedstat figures";
  EXPECT_GE(*d, 0);
  EXPECT_FALSE(dlaunch::run_delay_ns({.pid = self.pid, .start_ticks = self.start_ticks + 1}))
      << "a reused pid must not pass for the process it replaced";
  EXPECT_FALSE(dlaunch::boot_id().empty());
}

}  // namespace
