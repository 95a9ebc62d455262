// What signals to dlaunch do to the job besides stopping it, a feature of
// the job (controller/feature.h; docs/troubleshooting.md, "Signals", has the
// table):
//
// - SIGUSR1, SIGUSR2, SIGCONT, SIGTSTP and --signals-to-handle's others:
//   forwarded to every running rank on every node (SignalRanks: each
//   worker's process group). dlaunch itself does not stop on SIGTSTP: a
//   stopped head sends no heartbeats, and the agents would count it lost; it
//   keeps serving while the ranks are stopped.
// - --signal SIG@SECONDS: SIG to every rank SECONDS before --timeout (once);
//   and on SIGTERM while the job runs, SIG to every rank first, then, a kill
//   grace later, the stop as after any interrupt (SIGTERM to the ranks, the
//   grace, SIGKILL). The job's cause is the SIGTERM from the start: whatever
//   the ranks do meanwhile (finish a checkpoint and exit 0, or fail), dlaunch
//   exits 128+15, and once every rank has exited it does not wait out the
//   rest.
// - SIGINT, SIGTERM otherwise, SIGHUP: not this feature's; the job's core
//   stops the job (Controller::interrupt). SIGHUP under --nohup is ignored
//   (run() does not handle it, main() ignores it).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "controller/feature.h"
#include "dlaunch/clock.h"

namespace dlaunch {

class SignalRelay final : public JobFeature {
 public:
  struct Config {
    int warn_signal = 0;  // --signal's SIG; 0: none
    std::chrono::milliseconds warn_before{0};
    std::chrono::milliseconds timeout{0};  // --timeout, from dlaunch's start; 0: none
    std::chrono::milliseconds kill_grace{
        0};                            // SIGTERM under --signal: SIG, then this, then the stop
    std::vector<int> forward_signals;  // forwarded besides USR1, USR2, CONT, TSTP
  };
  SignalRelay(JobAccess& job, Clock& clock, Config cfg);
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;

  // dlaunch starts: --signal's time before --timeout is counted from now.
  void start();
  // A signal to dlaunch: true when this feature handled it (forwarded, or
  // --signal's SIGTERM); false: the job's core stops the job.
  bool on_signal(int sig);

 private:
  void forward(int sig);
  void preempt(int sig);
  void send_warning();

  JobAccess& job_;
  Clock& clock_;
  Config cfg_;
  std::unique_ptr<Timer> warn_timer_;     // --signal: its time before --timeout
  std::unique_ptr<Timer> preempt_timer_;  // --signal on SIGTERM: the grace before the stop
  bool warn_sent_ = false;                // --signal's SIG went to the ranks
  bool ranks_held_ = false;               // a forwarded SIGTSTP stopped them, no SIGCONT since
};

}  // namespace dlaunch
