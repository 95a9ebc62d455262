// How many SSH connections may be in their connect/handshake/auth/exec phase
// at once. `--ssh-concurrency N` fixes it at N; by default it adapts:
//
//   - it starts at kInitial and grows by one for every connection that
//     completes fast (doubling per round of connections, as TCP's slow start
//     does), until the first sign of congestion; after that by one per round
//     (additive increase);
//   - a connection that completes slowly, or fails the way an overloaded
//     host or network fails (timed out, reset, dropped during the
//     handshake), halves it (multiplicative decrease), once per round: only
//     a connection that started after the last decrease counts, so the
//     connections already under way when it was cut do not cut it again;
//   - what says nothing about load (refused: nothing listens there;
//     authentication, host key, a missing agent, cancelled) changes nothing.
//
// "Fast" and "slow": twice and four times the quickest connection seen so far
// (what a connection costs with nothing queued before it: a network with a
// long round trip is not a loaded one), but at least an eighth and a quarter
// of the connect timeout and at most a third and a half of it (a connection
// that needs half its deadline is close to failing for lack of it).
// ConcurrencyPolicy is the pure decision (times are arguments: tests drive it
// with a manual clock); Limiter queues the connections on the event loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

namespace dlaunch::ssh {

class ConnectError;

// What became of a connection that held a slot.
enum class SlotOutcome {
  kDone,       // connected, authenticated, the agent's exec channel open
  kCongested,  // timed out, reset or dropped: the host or the network is overloaded
  kNeutral,    // anything that says nothing about load (refused, auth, cancelled)
};

// How a failed connection counts.
SlotOutcome slot_outcome(const ConnectError& e);

struct LimiterConfig {
  int fixed = 0;  // > 0: exactly this many, never adapted (--ssh-concurrency)
  int initial = 64;
  int min = 4;
  int max = 1024;
  // The connect timeout, which bounds "fast" and "slow" (see above).
  std::chrono::steady_clock::duration timeout = std::chrono::seconds(10);

  // Adaptive for this connect timeout, or fixed when `fixed` > 0.
  static LimiterConfig for_timeout(std::chrono::milliseconds connect_timeout, int fixed);
};

class ConcurrencyPolicy {
 public:
  using Time = std::chrono::steady_clock::time_point;
  struct Ticket {
    Time start;
  };

  explicit ConcurrencyPolicy(LimiterConfig cfg);
  // Connections allowed in progress now.
  int limit() const;
  bool adaptive() const { return cfg_.fixed <= 0; }
  bool in_slow_start() const { return slow_start_; }
  // A connection done within fast() leaves room for more; one that needs
  // more than slow() had too many beside it.
  std::chrono::steady_clock::duration fast() const;
  std::chrono::steady_clock::duration slow() const;
  // A connection takes a slot at `now`.
  static Ticket started(Time now) { return Ticket{now}; }
  // ... and gives it back at `now`.
  void finished(const Ticket& t, Time now, SlotOutcome outcome);

 private:
  void decide(const Ticket& t, Time now, SlotOutcome outcome);
  void decrease(Time now);

  LimiterConfig cfg_;
  double window_;
  bool slow_start_ = true;
  Time last_decrease_{};  // the epoch: every connection started after it
  std::chrono::steady_clock::duration quickest_ = std::chrono::steady_clock::duration::max();
};

// At most policy().limit() connections hold a slot; the others wait in order.
// Times come from `now` (tests: a manual clock's), else the steady clock.
class Limiter {
 public:
  using Ticket = ConcurrencyPolicy::Ticket;
  using Now = std::function<ConcurrencyPolicy::Time()>;
  Limiter(boost::asio::io_context& io, LimiterConfig cfg, Now now = {})
      : io_(io), policy_(cfg), now_(std::move(now)) {}
  // Waits for a slot.
  boost::asio::awaitable<Ticket> acquire();
  // Gives the slot back, saying how its connection ended.
  void release(const Ticket& t, SlotOutcome outcome);
  int active() const { return active_; }
  int waiting() const { return static_cast<int>(waiting_.size()); }
  const ConcurrencyPolicy& policy() const { return policy_; }

 private:
  void wake();
  ConcurrencyPolicy::Time now() const;

  boost::asio::io_context& io_;
  ConcurrencyPolicy policy_;
  Now now_;
  int active_ = 0;
  std::deque<std::shared_ptr<boost::asio::steady_timer>> waiting_;
};

}  // namespace dlaunch::ssh
