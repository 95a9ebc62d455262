// The job core's phase of one attempt on the head, with the table of the
// moves it may make (docs/architecture.md, "The job core"):
//
//   starting --Start--> running --every rank exited--> shutting down --> finished
//      |                  |                               ^
//      '---a failure------+--> aborting --ranks stopped---'
//      '---the check is over (--check, nothing started)---'
//
// Shutting down: every agent was sent Shutdown (or, past the last deadline,
// killed); finished: every agent is gone. Staying in a phase is not a move.
#pragma once

#include <cstdint>
#include <string_view>

namespace dlaunch {

enum class JobPhase : std::uint8_t { kStarting, kRunning, kAborting, kShuttingDown, kFinished };
inline constexpr int kJobPhases = 5;

std::string_view job_phase_name(JobPhase p);

// Whether the table allows the move; staying (from == to) is allowed.
bool job_phase_move_allowed(JobPhase from, JobPhase to);

// The job is being stopped or has ended: aborting, shutting down, finished.
inline bool job_stopping(JobPhase p) {
  return p == JobPhase::kAborting || p == JobPhase::kShuttingDown || p == JobPhase::kFinished;
}

// `next` if the table allows the move from `from`; std::logic_error (a bug
// of the head) otherwise.
JobPhase checked_job_phase_move(JobPhase from, JobPhase next);

}  // namespace dlaunch
