#include "transport/ssh/limiter.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "dlaunch/debug.h"
#include "transport/ssh/connect.h"

namespace dlaunch::ssh {

namespace asio = boost::asio;

SlotOutcome slot_outcome(const ConnectError& e) {
  const std::string what = e.what();
  if (e.stage() == "cancelled") return SlotOutcome::kNeutral;
  if (what.find("timed out") != std::string::npos) return SlotOutcome::kCongested;
  // sshd drops connections past MaxStartups with a reset or a closed banner
  // (connect() retries those, then reports the last one). A refusal is a
  // fast answer: nothing listens there, which says nothing about load.
  if (e.stage() == "connect" || e.stage() == "handshake") {
    if (what.find("reset") != std::string::npos || what.find("End of file") != std::string::npos)
      return SlotOutcome::kCongested;
  }
  return SlotOutcome::kNeutral;
}

LimiterConfig LimiterConfig::for_timeout(std::chrono::milliseconds connect_timeout, int fixed) {
  LimiterConfig c;
  c.fixed = fixed;
  if (connect_timeout.count() > 0) c.timeout = connect_timeout;
  return c;
}

std::chrono::steady_clock::duration ConcurrencyPolicy::fast() const {
  const auto t = cfg_.timeout;
  if (quickest_ == std::chrono::steady_clock::duration::max()) return t / 8;
  return std::clamp(2 * quickest_, t / 8, t / 3);
}

std::chrono::steady_clock::duration ConcurrencyPolicy::slow() const {
  const auto t = cfg_.timeout;
  if (quickest_ == std::chrono::steady_clock::duration::max()) return t / 4;
  return std::clamp(4 * quickest_, t / 4, t / 2);
}

ConcurrencyPolicy::ConcurrencyPolicy(LimiterConfig cfg)
    : cfg_(cfg), window_(static_cast<double>(std::clamp(cfg.initial, cfg.min, cfg.max))) {}

int ConcurrencyPolicy::limit() const {
  if (cfg_.fixed > 0) return cfg_.fixed;
  return std::clamp(static_cast<int>(window_), cfg_.min, cfg_.max);
}

void ConcurrencyPolicy::finished(const Ticket& t, Time now, SlotOutcome outcome) {
  if (!adaptive() || outcome == SlotOutcome::kNeutral) return;
  const int before = limit();
  decide(t, now, outcome);
  // DLAUNCH_DEBUG=ssh: every change of the window, with what changed it.
  if (limit() != before && debug_enabled("ssh")) {
    std::fprintf(
        stderr, "dlaunch: ssh: concurrency %d -> %d (%s after %.0f ms)\n", before, limit(),
        outcome == SlotOutcome::kCongested ? "a connection failed" : "a connection completed",
        std::chrono::duration<double, std::milli>(now - t.start).count());
  }
}

void ConcurrencyPolicy::decide(const Ticket& t, Time now, SlotOutcome outcome) {
  const auto took = now - t.start;
  if (outcome == SlotOutcome::kDone) quickest_ = std::min(quickest_, took);
  if (outcome == SlotOutcome::kCongested || took > slow()) {
    // Once per round: a connection that was already under way when the
    // window was last cut says nothing about the window since.
    if (t.start >= last_decrease_) decrease(now);
    return;
  }
  if (took > fast()) return;  // neither: hold
  // Slow start: one more per fast completion (the window doubles per
  // round); then one more per round.
  window_ += slow_start_ ? 1.0 : 1.0 / window_;
  window_ = std::min(window_, static_cast<double>(cfg_.max));
}

void ConcurrencyPolicy::decrease(Time now) {
  window_ = std::max(static_cast<double>(cfg_.min), window_ / 2.0);
  slow_start_ = false;
  last_decrease_ = now;
}

asio::awaitable<Limiter::Ticket> Limiter::acquire() {
  if (waiting_.empty() && active_ < policy_.limit()) {
    ++active_;
    co_return ConcurrencyPolicy::started(now());
  }
  auto t = std::make_shared<asio::steady_timer>(io_, asio::steady_timer::time_point::max());
  waiting_.push_back(t);
  boost::system::error_code ec;
  // Cancelled = our turn: wake() counted the slot as ours already.
  co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  co_return ConcurrencyPolicy::started(now());
}

void Limiter::release(const Ticket& t, SlotOutcome outcome) {
  policy_.finished(t, now(), outcome);
  if (active_ > 0) --active_;
  wake();
}

ConcurrencyPolicy::Time Limiter::now() const {
  return now_ ? now_() : std::chrono::steady_clock::now();
}

void Limiter::wake() {
  while (!waiting_.empty() && active_ < policy_.limit()) {
    ++active_;
    waiting_.front()->cancel();
    waiting_.pop_front();
  }
}

}  // namespace dlaunch::ssh
