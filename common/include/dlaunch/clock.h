// Clock: the time source of dlaunch's state machines (the head's controller,
// the agent), so that their unit tests can move time by hand.
//
// now() is a steady (monotonic) time. Timers made by a clock call their
// handler once, on the owner's thread, when the clock reaches the expiry;
// setting a new expiry or cancel() drops a pending call, and destroying a
// timer cancels it. AsioClock runs its timers on an io_context (real time);
// tests use a manual clock whose advance() fires due timers in time order.
//
// Thread safety: none; use a clock and its timers from one thread (the
// event loop's).
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include <boost/asio/io_context.hpp>

namespace dlaunch {

using SteadyTime = std::chrono::steady_clock::time_point;

// The wall clock (CLOCK_REALTIME), nanoseconds since the epoch: for comparing
// a node's clock with the head's (--check), never for timing.
inline long long wall_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class Timer {
 public:
  virtual ~Timer() = default;
  // Calls `handler` once when the clock reaches `when` (at once if it has,
  // but never from inside this call). Replaces a pending call.
  virtual void expires_at(SteadyTime when, std::function<void()> handler) = 0;
  // Drops the pending call, if any.
  virtual void cancel() = 0;
  // When the pending call is due; SteadyTime::max() when none is pending.
  virtual SteadyTime expiry() const = 0;
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual SteadyTime now() const = 0;
  virtual std::unique_ptr<Timer> make_timer() = 0;

  // expires_at(now() + after).
  void after(Timer& timer, std::chrono::steady_clock::duration after,
             std::function<void()> handler) {
    timer.expires_at(now() + after, std::move(handler));
  }
};

// The steady clock, with timers on `io`.
class AsioClock final : public Clock {
 public:
  explicit AsioClock(boost::asio::io_context& io) : io_(io) {}
  SteadyTime now() const override { return std::chrono::steady_clock::now(); }
  std::unique_ptr<Timer> make_timer() override;

 private:
  boost::asio::io_context& io_;
};

}  // namespace dlaunch
