// Signals to dlaunch that are not a stop (signal_relay.h).
#include "controller/signal_relay.h"

#include <signal.h>

#include <algorithm>

#include <fmt/format.h>

#include "dlaunch/process.h"

namespace dlaunch {

using std::chrono::milliseconds;

SignalRelay::SignalRelay(JobAccess& job, Clock& clock, Config cfg)
    : job_(job),
      clock_(clock),
      cfg_(std::move(cfg)),
      warn_timer_(clock.make_timer()),
      preempt_timer_(clock.make_timer()) {}

bool SignalRelay::on_signal(int sig) {
  switch (sig) {
    case SIGUSR1:
    case SIGUSR2:
    case SIGCONT:
    case SIGTSTP:
      forward(sig);
      return true;
    case SIGTERM:
      if (cfg_.warn_signal != 0 && job_.phase() == JobPhase::kRunning && !job_.interrupted()) {
        preempt(sig);
        return true;
      }
      return false;
    default:
      if (std::find(cfg_.forward_signals.begin(), cfg_.forward_signals.end(), sig) !=
          cfg_.forward_signals.end()) {
        forward(sig);
        return true;
      }
      return false;
  }
}

// To the ranks that run now: ranks not started yet do not get it.
void SignalRelay::forward(int sig) {
  if (job_.phase() == JobPhase::kFinished) return;
  if (sig == SIGTSTP) {
    ranks_held_ = true;
    job_.say(
        "SIGTSTP: stopping every rank; dlaunch keeps running (send it SIGCONT to resume them)");
  } else if (sig == SIGCONT) {
    // Slurm sends SIGCONT with every SIGTERM: say so only when it resumes.
    if (ranks_held_) job_.say("SIGCONT: resuming every rank");
    ranks_held_ = false;
  } else {
    job_.say(fmt::format("{}: forwarded to every rank", signal_name(sig)));
  }
  job_.send_all(proto::SignalRanks{.signal = sig});
}

// SIGTERM with --signal: the ranks get SIG now, and the kill grace to act on
// it (a checkpoint) before they are stopped. The cause is set now (not by
// failing the job, which would stop them at once): a rank that exits
// meanwhile, with any code, does not become the job's cause.
void SignalRelay::preempt(int sig) {
  job_.say(
      fmt::format("{}: sending {} to every rank; stopping the job in {} (again to kill at once)",
                  signal_name(sig), signal_name(cfg_.warn_signal), seconds_text(cfg_.kill_grace)));
  job_.begin_interrupt(sig);
  warn_sent_ = true;  // not again before --timeout
  job_.send_all(proto::SignalRanks{.signal = cfg_.warn_signal});
  clock_.after(*preempt_timer_, cfg_.kill_grace, [this] {
    if (job_.phase() == JobPhase::kRunning) job_.stop("interrupted");
  });
}

// --signal's time before --timeout, counted like --timeout from dlaunch's start.
void SignalRelay::start() {
  if (cfg_.warn_signal == 0 || cfg_.timeout.count() <= 0) return;
  const milliseconds at = std::max(milliseconds(0), cfg_.timeout - cfg_.warn_before);
  clock_.after(*warn_timer_, at, [this] { send_warning(); });
}

void SignalRelay::send_warning() {
  if (warn_sent_ || job_.phase() == JobPhase::kFinished) return;
  warn_sent_ = true;
  if (job_.phase() == JobPhase::kStarting) {
    // Ranks that start now would get it before they could set a handler
    // (and most die of SIGUSR1's default action): none is sent.
    job_.say(fmt::format("--signal: the job was still starting {} before --timeout; no {} sent",
                         seconds_text(cfg_.warn_before), signal_name(cfg_.warn_signal)));
    return;
  }
  if (job_.phase() != JobPhase::kRunning) return;
  job_.say(fmt::format("--timeout expires in {}: sending {} to every rank",
                       seconds_text(cfg_.warn_before), signal_name(cfg_.warn_signal)));
  job_.send_all(proto::SignalRanks{.signal = cfg_.warn_signal});
}

}  // namespace dlaunch
