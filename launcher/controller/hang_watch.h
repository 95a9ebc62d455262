// Locating hangs, a feature of the job (controller/feature.h): every rank's
// stack, grouped (controller/stacks.h), on three occasions:
//
// - --timeout (stop_at_timeout): the cause is the job's at once, and the job
//   is stopped once the stacks are in, or after --stack-timeout;
// - SIGQUIT (report_now): a report on stderr, the job goes on;
// - --stall-timeout: no rank wrote a line, and none completed a comm call,
//   for that long (the agents send Progress when their ranks' comm counters
//   move, agent/progress_board.h): a report, once per stall, or with
//   --stall-action abort the job is stopped as at --timeout, exit
//   kStallExitStatus.
//
// Why SIGQUIT: it is the thread-dump signal of the JVM (Ctrl-\ in a
// terminal), and nothing else of dlaunch's uses it. SIGUSR1/SIGUSR2 are
// forwarded to the ranks (mpirun's convention; --signal USR1@S warns them
// before a time limit), so they cannot mean "show me the stacks" here.
//
// Python tracebacks cost the rank its life (faulthandler prints them on
// SIGABRT), so they are taken only when the job is being stopped anyway;
// SIGQUIT and a stall report show the interpreter's native frames.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "controller/feature.h"
#include "dlaunch/clock.h"
#include "output/output_sink.h"

namespace dlaunch {

class HangWatch final : public JobFeature {
 public:
  struct Config {
    std::chrono::milliseconds stack_timeout{0};  // the agents' time to answer; 0: no stacks
    std::chrono::milliseconds stall_timeout{0};  // 0: no stall watch
    bool stall_abort = false;                    // --stall-action abort (else report)
  };
  // The stacks files go where `sink` keeps the job's files (stacks.txt).
  HangWatch(JobAccess& job, Clock& clock, OutputSink& sink, Config cfg);
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  // The job must stop for `cause` (--timeout): the cause is the job's from
  // now on (what fails meanwhile is a consequence), but nothing is stopped
  // until every rank's stack is in; at once when none can be collected.
  void stop_at_timeout(RootCause cause);
  // SIGQUIT: every rank's stack, reported without stopping anything.
  void report_now();
  void on_stacks(std::size_t node, proto::Stacks&& st);
  // A rank wrote output, or a node's ranks completed comm calls: no stall.
  void on_activity();
  void on_progress_damaged(std::size_t node, const proto::ProgressDamaged& m);
  // The job's loop is over: a collection in progress ends with what came.
  void end();
  // The notes every report of a failed job carries from now on (a rank that
  // damaged its progress memory).
  std::vector<std::string> notes() const;

  void on_phase(JobPhase now) override;

 private:
  enum class Reason { kTimeout, kOnDemand, kStall, kStallAbort };
  struct Collection {
    std::uint32_t id = 0;
    Reason reason = Reason::kOnDemand;
    std::vector<bool> asked;     // per node: CollectStacks sent
    std::vector<bool> answered;  // per node
    std::vector<proto::Stacks> got;
    std::vector<std::size_t> got_node;
  };
  void stop_with_stacks(RootCause cause, Reason reason);
  bool collect(Reason reason);
  void complete();
  void arm_stall_timer();
  std::string write_stacks_file(const std::string& text);
  // An answer to SIGQUIT, also written to the job's record (dlaunch stacks).
  void record_answer(const std::string& text);

  JobAccess& job_;
  Clock& clock_;
  OutputSink& sink_;
  Config cfg_;
  std::optional<Collection> collecting_;
  std::uint32_t requests_ = 0;
  std::unique_ptr<Timer> stacks_timer_;
  std::unique_ptr<Timer> stall_timer_;
  SteadyTime last_activity_{};
  bool stalled_ = false;     // a stall was reported; re-armed when output resumes
  bool stop_after_ = false;  // the cause is set; the job stops once the stacks are in
  std::string stacks_dir_;   // without --output-dir: the private folder made for stacks files
  int stacks_files_ = 0;
  int answers_ = 0;
  // Ranks that damaged their progress memory, by rank: what the reports say.
  std::map<int, std::string> damaged_;
};

}  // namespace dlaunch
