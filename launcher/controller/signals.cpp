// What signals to dlaunch do to the job, besides stopping it
// (docs/troubleshooting.md, "Signals", has the table):
//
// - SIGUSR1, SIGUSR2, SIGCONT, SIGTSTP: forwarded to every running rank on
//   every node (SignalRanks: each worker's process group). dlaunch itself
//   does not stop on SIGTSTP: a stopped head sends no heartbeats, and the
//   agents would count it lost; it keeps serving while the ranks are stopped.
// - --signal SIG@SECONDS: SIG to every rank SECONDS before --timeout (once);
//   and on SIGTERM while the job runs, SIG to every rank first, then, a kill
//   grace later, the stop as after any interrupt (SIGTERM to the ranks, the
//   grace, SIGKILL). The job's cause is the SIGTERM from the start: whatever
//   the ranks do meanwhile (finish a checkpoint and exit 0, or fail), dlaunch
//   exits 128+15, and once every rank has exited it does not wait out the rest.
// - SIGHUP under --nohup: ignored (run() does not handle it, main() ignores it).
#include <signal.h>

#include <algorithm>

#include <fmt/format.h>

#include "controller/controller.h"
#include "dlaunch/process.h"

namespace dlaunch {

using std::chrono::milliseconds;

namespace {
std::string seconds(milliseconds d) {
  return fmt::format("{:.1f} s", static_cast<double>(d.count()) / 1000.0);
}
}  // namespace

void Controller::on_signal(int sig) {
  switch (sig) {
    case SIGUSR1:
    case SIGUSR2:
    case SIGCONT:
    case SIGTSTP:
      forward_signal(sig);
      return;
    case SIGTERM:
      if (cfg_.warn_signal != 0 && phase_ == Phase::kRunning && interrupts_ == 0) {
        begin_preempt(sig);
        return;
      }
      break;
    default:
      if (std::find(cfg_.forward_signals.begin(), cfg_.forward_signals.end(), sig) !=
          cfg_.forward_signals.end()) {
        forward_signal(sig);
        return;
      }
      break;
  }
  interrupt(sig);
}

// To the ranks that run now: ranks not started yet do not get it.
void Controller::forward_signal(int sig) {
  if (phase_ == Phase::kFinished) return;
  progress_.clear();
  if (sig == SIGTSTP) {
    ranks_held_ = true;
    say("SIGTSTP: stopping every rank; dlaunch keeps running (send it SIGCONT to resume them)");
  } else if (sig == SIGCONT) {
    // Slurm sends SIGCONT with every SIGTERM: say so only when it resumes.
    if (ranks_held_) say("SIGCONT: resuming every rank");
    ranks_held_ = false;
  } else {
    say(fmt::format("{}: forwarded to every rank", signal_name(sig)));
  }
  send_all(proto::SignalRanks{.signal = sig});
}

// SIGTERM with --signal: the ranks get SIG now, and the kill grace to act on
// it (a checkpoint) before they are stopped. The cause is set now (not through
// fail(), which would stop them at once): a rank that exits meanwhile, with
// any code, does not become the job's cause.
void Controller::begin_preempt(int sig) {
  progress_.clear();
  ++interrupts_;  // a second SIGINT/SIGTERM kills at once, as ever
  say(fmt::format("{}: sending {} to every rank; stopping the job in {} (again to kill at once)",
                  signal_name(sig), signal_name(cfg_.warn_signal), seconds(cfg_.kill_grace)));
  cause_ = {.kind = CauseKind::kInterrupted, .signal = sig};
  for (const auto& r : ranks_) ranks_stopped_ += (r.started && !r.exited) ? 1 : 0;
  warn_sent_ = true;  // not again before --timeout
  send_all(proto::SignalRanks{.signal = cfg_.warn_signal});
  if (!preempt_timer_) preempt_timer_ = env_.clock.make_timer();
  env_.clock.after(*preempt_timer_, cfg_.kill_grace, [this] {
    if (phase_ == Phase::kRunning) abort_all("interrupted", false);
  });
}

// --signal's time before --timeout, counted like --timeout from dlaunch's start.
void Controller::arm_signal_warning() {
  if (cfg_.warn_signal == 0 || cfg_.timeout.count() <= 0) return;
  if (!warn_timer_) warn_timer_ = env_.clock.make_timer();
  const milliseconds at = std::max(milliseconds(0), cfg_.timeout - cfg_.warn_before);
  env_.clock.after(*warn_timer_, at, [this] { send_signal_warning(); });
}

void Controller::send_signal_warning() {
  if (warn_sent_ || phase_ == Phase::kFinished) return;
  warn_sent_ = true;
  if (phase_ == Phase::kStarting) {
    // Ranks that start now would get it before they could set a handler
    // (and most die of SIGUSR1's default action): none is sent.
    say(fmt::format("--signal: the job was still starting {} before --timeout; no {} sent",
                    seconds(cfg_.warn_before), signal_name(cfg_.warn_signal)));
    return;
  }
  if (phase_ != Phase::kRunning) return;
  progress_.clear();
  say(fmt::format("--timeout expires in {}: sending {} to every rank", seconds(cfg_.warn_before),
                  signal_name(cfg_.warn_signal)));
  send_all(proto::SignalRanks{.signal = cfg_.warn_signal});
}

}  // namespace dlaunch
