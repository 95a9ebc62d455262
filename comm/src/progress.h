// comm's side of dlaunch's stall detection (--stall-timeout; the agent's
// side is agent/progress_board.h): a rank started by a dlaunch agent that
// watches for stalls gets a shared counter (DLAUNCH_PROGRESS_FD, a memfd,
// and DLAUNCH_PROGRESS_SLOT, its 64-byte slot there), and each completed
// collective, send or receive adds one to it, so that a rank that
// communicates without printing is not taken for a stalled one.
#pragma once

namespace dlaunch::comm::progress {

// One more call of this rank completed. One relaxed atomic add to shared
// memory, or nothing when the rank has no counter (not started by dlaunch,
// no --stall-timeout, or the descriptor is not what the variables say).
void completed() noexcept;

}  // namespace dlaunch::comm::progress
