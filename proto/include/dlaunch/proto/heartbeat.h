// HeartbeatMonitor: both ends of the control protocol send Heartbeat
// messages and declare a peer lost when it has been silent for longer than
// the timeout. The head watches every agent; an agent watches its head. This
// is that logic, once, for both.
//
// One timer does both jobs: it wakes at the next send or at the moment the
// quietest watched peer's silence would pass the timeout, whichever is
// first, so that a silent peer is declared within the timeout (plus a
// millisecond), not up to a send interval later. Before declaring a peer
// silent the monitor asks its owner to read what that peer already sent
// (read_pending): after this process was stalled itself (an overloaded
// machine, SIGSTOP), the timer can run before the reads of the heartbeats
// that arrived meanwhile.
//
// A timeout of zero turns the silence check off; heartbeats are still sent
// (the peer may be checking). Thread safety: none (the owner's event loop).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "dlaunch/clock.h"

namespace dlaunch::proto {

// The send interval for a silence timeout: a third of it, at most 5 s (5 s
// when the check is off), so that two heartbeats may be lost or late before
// the peer gives up.
std::chrono::milliseconds heartbeat_interval(std::chrono::milliseconds timeout);

class HeartbeatMonitor {
 public:
  struct Callbacks {
    // Time to send a Heartbeat to every watched peer.
    std::function<void()> send;
    // Read and dispatch what `peer` has already sent (may call heard() or
    // forget()).
    std::function<void(std::size_t peer)> read_pending;
    // `peer` was silent for longer than the timeout; it is no longer watched.
    std::function<void(std::size_t peer)> silent;
  };

  // interval: how often to send (heartbeat_interval(timeout) unless the peer
  // asked for another).
  HeartbeatMonitor(Clock& clock, std::chrono::milliseconds timeout,
                   std::chrono::milliseconds interval, std::size_t peers, Callbacks cb);
  ~HeartbeatMonitor();
  HeartbeatMonitor(const HeartbeatMonitor&) = delete;
  HeartbeatMonitor& operator=(const HeartbeatMonitor&) = delete;

  // Watches every peer, counting their silence from now, and starts sending.
  void start();
  // Anything at all arrived from `peer`.
  void heard(std::size_t peer);
  // `peer` is gone or done: neither watched nor sent to any more.
  void forget(std::size_t peer);
  // No more sends or checks.
  void stop();

  std::chrono::milliseconds timeout() const { return timeout_; }
  std::chrono::milliseconds interval() const { return interval_; }

 private:
  void arm();
  void on_wake();

  Clock& clock_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds interval_;
  Callbacks cb_;
  std::unique_ptr<Timer> timer_;
  std::vector<SteadyTime> last_heard_;
  std::vector<bool> watched_;
  SteadyTime sent_{};  // the last send
  bool running_ = false;
};

}  // namespace dlaunch::proto
