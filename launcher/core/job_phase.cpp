#include "core/job_phase.h"

#include "dlaunch/move_table.h"

namespace dlaunch {

namespace {

using P = JobPhase;

constexpr auto kPhaseMoves =
    MoveTable<P, kJobPhases>()
        .allow(P::kStarting, P::kRunning)       // every node ready (and the network chosen): Start
        .allow(P::kStarting, P::kAborting)      // a node failed or was lost, a signal, a deadline
        .allow(P::kStarting, P::kShuttingDown)  // --check's probes and tests are over
        .allow(P::kRunning, P::kAborting)  // a rank failed, a node was lost, a signal, --timeout
        .allow(P::kRunning, P::kShuttingDown)    // every rank exited
        .allow(P::kAborting, P::kShuttingDown)   // every rank stopped, or the deadline passed
        .allow(P::kShuttingDown, P::kFinished);  // every agent gone

}  // namespace

std::string_view job_phase_name(JobPhase p) {
  switch (p) {
    case P::kStarting:
      return "starting";
    case P::kRunning:
      return "running";
    case P::kAborting:
      return "aborting";
    case P::kShuttingDown:
      return "shutting down";
    case P::kFinished:
      return "finished";
  }
  return "?";
}

bool job_phase_move_allowed(JobPhase from, JobPhase to) {
  return from == to || kPhaseMoves.allows(from, to);
}

JobPhase checked_job_phase_move(JobPhase from, JobPhase next) {
  if (!job_phase_move_allowed(from, next)) {
    throw_bad_move("job phase", job_phase_name(from), job_phase_name(next));
  }
  return next;
}

}  // namespace dlaunch
