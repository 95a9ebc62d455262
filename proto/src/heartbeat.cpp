#include "dlaunch/proto/heartbeat.h"

#include <algorithm>

#include "dlaunch/tunables.h"

namespace dlaunch::proto {

using std::chrono::milliseconds;

namespace {
// Samples kept per watched process: with a wake at least every interval (a
// third of the timeout), several timeouts' worth.
constexpr std::size_t kMaxSamples = 64;
}  // namespace

void StarvationWatch::watch(std::size_t peer, ProcessRef p) {
  if (p.pid <= 0 || p.start_ticks == 0) return;
  watched_.push_back({.peer = peer, .process = p, .samples = {}});
}

void StarvationWatch::sample(SteadyTime now) {
  for (auto& w : watched_) {
    const auto delay = read_(w.process);
    if (!delay) {
      w.samples.clear();  // gone: it excuses nothing from now on
      continue;
    }
    w.samples.emplace_back(now, *delay);
    if (w.samples.size() > kMaxSamples) w.samples.pop_front();
  }
}

bool StarvationWatch::starved(std::size_t peer, SteadyTime since, SteadyTime now) const {
  for (const auto& w : watched_) {
    if (w.peer != peer || w.samples.empty()) continue;
    // The figure when the silence began: the last sample at or before it,
    // else the first one after it.
    auto base = w.samples.front();
    for (const auto& s : w.samples) {
      if (s.first > since) break;
      base = s;
    }
    if (base.first >= now) continue;
    const auto delay = read_(w.process);
    if (!delay) continue;
    const auto waited = std::chrono::nanoseconds(*delay - base.second);
    if (waited * 4 >= now - base.first) return true;
  }
  return false;
}

milliseconds heartbeat_interval(milliseconds timeout) {
  return timeout.count() > 0 ? std::min(timing::kMaxHeartbeatInterval, timeout / 3)
                             : timing::kMaxHeartbeatInterval;
}

HeartbeatMonitor::HeartbeatMonitor(Clock& clock, milliseconds timeout, milliseconds interval,
                                   std::size_t peers, Callbacks cb)
    : clock_(clock),
      timeout_(timeout),
      interval_(interval.count() > 0 ? interval : heartbeat_interval(timeout)),
      cb_(std::move(cb)),
      timer_(clock.make_timer()),
      last_heard_(peers),
      watched_(peers, false) {}

HeartbeatMonitor::~HeartbeatMonitor() = default;

void HeartbeatMonitor::start(bool watch_all) {
  const auto now = clock_.now();
  std::fill(last_heard_.begin(), last_heard_.end(), now);
  std::fill(watched_.begin(), watched_.end(), watch_all);
  if (!starvation_.empty()) starvation_.sample(now);
  running_ = true;
  arm();
}

void HeartbeatMonitor::heard(std::size_t peer) {
  if (peer < last_heard_.size()) last_heard_[peer] = clock_.now();
}

void HeartbeatMonitor::watch(std::size_t peer) {
  if (peer >= watched_.size()) return;
  watched_[peer] = true;
  last_heard_[peer] = clock_.now();
  // The next wake is a send at most an interval away, sooner than this
  // peer's timeout: it re-arms for the peer then.
}

void HeartbeatMonitor::forget(std::size_t peer) {
  if (peer < watched_.size()) watched_[peer] = false;
}

void HeartbeatMonitor::stop() {
  running_ = false;
  timer_->cancel();
}

void HeartbeatMonitor::arm() {
  auto wake = sent_ + interval_;
  if (timeout_.count() > 0) {
    for (std::size_t p = 0; p < watched_.size(); ++p) {
      if (watched_[p]) wake = std::min(wake, last_heard_[p] + timeout_ + milliseconds(1));
    }
  }
  timer_->expires_at(std::max(wake, clock_.now() + milliseconds(1)), [this] { on_wake(); });
}

void HeartbeatMonitor::on_wake() {
  if (!running_) return;
  const auto now = clock_.now();
  const bool send = now - sent_ >= interval_;
  if (send) sent_ = now;
  if (!starvation_.empty()) starvation_.sample(now);
  for (std::size_t p = 0; timeout_.count() > 0 && p < watched_.size(); ++p) {
    if (!watched_[p] || clock_.now() - last_heard_[p] <= timeout_) continue;
    // Stalled ourselves? What the peer sent may be waiting unread.
    cb_.read_pending(p);
    if (!running_) return;
    if (!watched_[p] || clock_.now() - last_heard_[p] <= timeout_) continue;
    if (!starvation_.empty() && starvation_.starved(p, last_heard_[p], clock_.now())) {
      // Late, not gone: look again in an interval.
      last_heard_[p] = clock_.now() - timeout_ + interval_;
      continue;
    }
    watched_[p] = false;
    cb_.silent(p);
    if (!running_) return;
  }
  if (send) cb_.send();
  if (running_) arm();
}

}  // namespace dlaunch::proto
