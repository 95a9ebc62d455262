// The one failure report dlaunch prints (architecture principle 3).
#pragma once

#include <string>
#include <vector>

#include "dlaunch/proto/protocol.h"

namespace dlaunch {

enum class CauseKind { kNone, kWorker, kNode, kInterrupted, kLaunch, kTimeout, kStall };

struct RootCause {
  CauseKind kind = CauseKind::kNone;
  // kWorker
  proto::Exited exit;
  std::string node;
  int local_rank = 0;
  std::vector<std::string> stderr_tail;
  // kWorker: where the job's record keeps the rank's whole output (dlaunch
  // logs); empty when it does not.
  std::string output_file;
  // kNode, kLaunch: the node (its index in the plan) that was lost, could not
  // start or misbehaved; -1 when the cause is no one node's (--min-nodes and
  // --spares exclude this one).
  int node_index = -1;
  // kNode, kLaunch: what happened; kTimeout: the ranks still running;
  // kStall (--stall-action abort): how long no rank wrote a line;
  // kInterrupted: the signal
  std::string message;
  int signal = 0;
  // kLaunch/kNode: problems of other hosts found while starting
  std::vector<std::string> also;
  // The ranks' stacks, grouped (controller/stacks.h), as the report prints
  // them; empty when none were collected.
  std::string stacks;
  // Printed last, one "note:" line each (what the report cannot vouch for).
  std::vector<std::string> notes;
  // kNode: no failure stopped the job but a restart (per-node mode, to take
  // in a launcher waiting to join): the report says "stopped", not "failed".
  bool for_restart = false;
};

// Whether --max-restarts may start the job again after this cause: a failed
// rank or a lost node, yes; an interrupt, a timeout or a launch error ends
// the job at once (trying again would fail the same way).
bool allows_restart(const RootCause& cause);

// --stall-action abort: no rank wrote a line for --stall-timeout seconds.
inline constexpr int kStallExitStatus = 123;

// The exit status of dlaunch for this cause (0 for kNone, 124 for kTimeout,
// kStallExitStatus for kStall).
int exit_status(const RootCause& cause);

// Indices, ascending, as ranges: {0,1,2,3,5,7,8} -> "0-3,5,7-8".
std::string index_ranges(const std::vector<std::size_t>& sorted);

// Text for stderr: a headline and the details. Empty for kNone.
std::string format_report(const std::string& job_id, const RootCause& cause, int ranks_stopped);

}  // namespace dlaunch
