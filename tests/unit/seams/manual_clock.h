// ManualClock: a dlaunch::Clock whose time moves only when a test says so.
// advance() fires every timer that falls due on the way, in time order (a
// handler may arm timers; those due within the same step fire too), so a
// test of a state machine is exact and takes no real time.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>

#include "dlaunch/clock.h"

namespace dltest {

class ManualClock final : public dlaunch::Clock {
 public:
  ManualClock() = default;
  ManualClock(const ManualClock&) = delete;
  ManualClock& operator=(const ManualClock&) = delete;

  dlaunch::SteadyTime now() const override { return now_; }
  std::unique_ptr<dlaunch::Timer> make_timer() override {
    return std::make_unique<ManualTimer>(*this);
  }

  // Moves time forward by `d`, firing due timers on the way.
  void advance(std::chrono::steady_clock::duration d) {
    const auto target = now_ + d;
    for (;;) {
      ManualTimer* next = nullptr;
      for (ManualTimer* t : timers_) {
        if (!t->handler_ || t->when_ > target) continue;
        if (next == nullptr || t->when_ < next->when_ ||
            (t->when_ == next->when_ && t->seq_ < next->seq_)) {
          next = t;
        }
      }
      if (next == nullptr) break;
      now_ = std::max(now_, next->when_);
      auto handler = std::move(next->handler_);
      next->handler_ = nullptr;
      handler();
    }
    now_ = target;
  }
  // Fires what is due now (timers armed for a time already passed).
  void run_due() { advance(std::chrono::steady_clock::duration::zero()); }
  // Time until the earliest pending timer; max() when none.
  std::chrono::steady_clock::duration next_due() const {
    auto best = dlaunch::SteadyTime::max();
    for (const ManualTimer* t : timers_) {
      if (t->handler_) best = std::min(best, t->when_);
    }
    return best == dlaunch::SteadyTime::max() ? std::chrono::steady_clock::duration::max()
                                              : best - now_;
  }

 private:
  class ManualTimer final : public dlaunch::Timer {
   public:
    explicit ManualTimer(ManualClock& c) : clock_(c) { clock_.timers_.insert(this); }
    ~ManualTimer() override { clock_.timers_.erase(this); }
    void expires_at(dlaunch::SteadyTime when, std::function<void()> handler) override {
      when_ = when;
      seq_ = ++clock_.seq_;
      handler_ = std::move(handler);
    }
    void cancel() override { handler_ = nullptr; }
    dlaunch::SteadyTime expiry() const override {
      return handler_ ? when_ : dlaunch::SteadyTime::max();
    }

   private:
    friend class ManualClock;
    ManualClock& clock_;
    dlaunch::SteadyTime when_{};
    std::uint64_t seq_ = 0;
    std::function<void()> handler_;
  };

  // Far from the epoch, so that "never happened" (a zero time point) is far in the past.
  dlaunch::SteadyTime now_ = dlaunch::SteadyTime{} + std::chrono::hours(1000);
  std::uint64_t seq_ = 0;
  std::set<ManualTimer*> timers_;
};

}  // namespace dltest
