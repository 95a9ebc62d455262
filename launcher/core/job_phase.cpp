#include "core/job_phase.h"

#include <array>
#include <stdexcept>
#include <string>

namespace dlaunch {

namespace {

using P = JobPhase;

constexpr int idx(P p) { return static_cast<int>(p); }

constexpr std::array<std::array<bool, kJobPhases>, kJobPhases> kMoves = [] {
  std::array<std::array<bool, kJobPhases>, kJobPhases> m{};
  const auto allow = [&m](P from, P to) { m.at(idx(from)).at(idx(to)) = true; };
  allow(P::kStarting, P::kRunning);       // every node ready (and the network chosen): Start
  allow(P::kStarting, P::kAborting);      // a node failed or was lost, a signal, a deadline
  allow(P::kStarting, P::kShuttingDown);  // --check's probes and tests are over
  allow(P::kRunning, P::kAborting);       // a rank failed, a node was lost, a signal, --timeout
  allow(P::kRunning, P::kShuttingDown);   // every rank exited
  allow(P::kAborting, P::kShuttingDown);  // every rank stopped, or the deadline passed
  allow(P::kShuttingDown, P::kFinished);  // every agent gone
  return m;
}();

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
  return from == to || kMoves.at(idx(from)).at(idx(to));
}

JobPhase checked_job_phase_move(JobPhase from, JobPhase next) {
  if (!job_phase_move_allowed(from, next)) {
    throw std::logic_error("job phase: no move from " + std::string(job_phase_name(from)) + " to " +
                           std::string(job_phase_name(next)));
  }
  return next;
}

}  // namespace dlaunch
