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
// A peer is not declared silent while what carries its heartbeats is
// starved of CPU (StarvationWatch, below).
//
// A timeout of zero turns the silence check off; heartbeats are still sent
// (the peer may be checking). Thread safety: none (the owner's event loop).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "dlaunch/clock.h"
#include "dlaunch/proc_stat.h"

namespace dlaunch::proto {

// The send interval for a silence timeout: a third of it, at most 5 s (5 s
// when the check is off), so that two heartbeats may be lost or late before
// the peer gives up.
std::chrono::milliseconds heartbeat_interval(std::chrono::milliseconds timeout);

// StarvationWatch tells a silent peer from a starved one. On a saturated
// machine a live head or agent, or the sshd that relays for it, can wait
// many seconds for a CPU: with the kernel's autogroups (on by default) every
// login session gets an equal share whatever its processes' nice, so 16
// SSH sessions of 4 Open MPI ranks each, all polling in MPI_Init, left the
// head 2% of two cores and its heartbeat timer ran 20 s late. Such a peer
// is late, not gone. The processes that carry a peer's heartbeats and that
// this process can see (on the same boot of the same machine: the peer
// itself, the sshd or head that relays for it) are watched: every wake of
// the monitor samples how long each has waited for a CPU (run_delay), and a
// peer is starved when one of them spent at least a quarter of the time
// since its silence began runnable but waiting. A process that is gone (or
// is another process now) excuses nothing: a dead head on this machine is
// still declared at the timeout.
class StarvationWatch {
 public:
  // Nanoseconds `p` has waited for a CPU; nullopt when it is gone.
  using DelayReader = std::function<std::optional<std::int64_t>(const ProcessRef&)>;

  explicit StarvationWatch(DelayReader read = run_delay_ns) : read_(std::move(read)) {}

  // Tests read made-up figures.
  void set_reader(DelayReader read) { read_ = std::move(read); }
  // `p` carries `peer`'s heartbeats (a peer may have several).
  void watch(std::size_t peer, ProcessRef p);
  // Records each watched process's figure (a bounded history).
  void sample(SteadyTime now);
  // Whether a process of `peer`'s waited for a CPU for at least a quarter
  // of the time from `since` to `now`.
  bool starved(std::size_t peer, SteadyTime since, SteadyTime now) const;
  bool empty() const { return watched_.empty(); }

 private:
  struct Watched {
    std::size_t peer = 0;
    ProcessRef process;
    std::deque<std::pair<SteadyTime, std::int64_t>> samples;
  };
  DelayReader read_;
  std::vector<Watched> watched_;
};

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

  // Starts sending; watches every peer, counting their silence from now,
  // or (watch_all false) none until watch() names it.
  void start(bool watch_all = true);
  // Watches `peer` from now: its silence counts from this moment (the head
  // watches an agent from its Ready, or from its image's pull: until then
  // an agent may say nothing while it sets its node up, and the start's own
  // deadline bounds that time). Again: from now again.
  void watch(std::size_t peer);
  // Anything at all arrived from `peer`.
  void heard(std::size_t peer);
  // `peer` is gone or done: neither watched nor sent to any more.
  void forget(std::size_t peer);
  // No more sends or checks.
  void stop();

  // The processes whose starvation excuses a peer's silence (none unless
  // the owner adds some).
  StarvationWatch& starvation() { return starvation_; }

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
  StarvationWatch starvation_;
  bool running_ = false;
};

}  // namespace dlaunch::proto
