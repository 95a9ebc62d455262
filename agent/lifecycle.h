// The agent's lifecycle as tables (docs/architecture.md, "The job core"): its
// phases, the moves between them, and what it does with each message from the
// head in each phase. The agent (agent.h) keeps its phase here and asks
// agent_verdict() before any handler runs, so no handler checks the phase for
// whether a message may come.
//
//   hello --Hello sent--> setup --Ready sent--> ready --Start--> running
//                           |                     |                 |
//                           '--Abort, head gone---+--> stopping     |
//                           '----- Shutdown (--check: never started)+--> done
//                           '--Reattach--> relaying --the job's agent ended--> done
//
// Stopping: the job is being stopped before any worker started (an Abort or a
// lost head while setting up). A running job that is stopped stays running
// (its workers are being signalled) until it is done.
#pragma once

#include <cstdint>
#include <string_view>

namespace dlaunch::agent {

enum class AgentPhase : std::uint8_t {
  kHello,
  kSetup,
  kReady,
  kRunning,
  kStopping,
  kDone,
  kRelaying
};
inline constexpr int kAgentPhases = 7;

std::string_view agent_phase_name(AgentPhase p);

// Whether the table allows the move; staying (from == to) is allowed.
bool agent_move_allowed(AgentPhase from, AgentPhase to);

// `next` if the table allows the move from `from`; std::logic_error (a bug
// of the agent) otherwise.
AgentPhase checked_agent_move(AgentPhase from, AgentPhase next);

// What the agent does with a message of wire type `id` (proto's kId) from
// the head in phase `p`:
enum class Verdict : std::uint8_t {
  kHandle,  // its handler runs
  kIgnore,  // dropped: it came too late or too early to matter (Start after an Abort)
  kFatal,   // the head broke the protocol: the agent says Fatal, naming it
};
Verdict agent_verdict(AgentPhase p, std::uint16_t id);

}  // namespace dlaunch::agent
