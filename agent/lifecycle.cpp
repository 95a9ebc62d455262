#include "lifecycle.h"

#include "dlaunch/move_table.h"
#include "dlaunch/proto/protocol.h"

namespace dlaunch::agent {

namespace {

using P = AgentPhase;
using namespace proto;

constexpr auto kMoves = MoveTable<P, kAgentPhases>()
                            .allow(P::kHello, P::kSetup)     // Hello went: Setup may come
                            .allow(P::kSetup, P::kReady)     // Setup done, Ready went
                            .allow(P::kSetup, P::kStopping)  // Abort, a signal or the head lost
                            .allow(P::kSetup, P::kDone)      // Shutdown before Ready
                            .allow(P::kReady, P::kRunning)   // Start
                            .allow(P::kReady, P::kStopping)  // Abort, a signal or the head lost
                            .allow(P::kReady, P::kDone)      // Shutdown without Start (--check)
                            .allow(P::kRunning, P::kDone)    // every worker gone, Shutdown, no head
                            .allow(P::kStopping, P::kDone)   // the same, nothing having started
                            .allow(P::kSetup, P::kRelaying)  // Reattach: a new head's relay
                            .allow(P::kRelaying, P::kDone);  // the job's agent ended

}  // namespace

std::string_view agent_phase_name(AgentPhase p) {
  switch (p) {
    case P::kHello:
      return "hello";
    case P::kSetup:
      return "setup";
    case P::kReady:
      return "ready";
    case P::kRunning:
      return "running";
    case P::kStopping:
      return "stopping";
    case P::kDone:
      return "done";
    case P::kRelaying:
      return "relaying";
  }
  return "?";
}

bool agent_move_allowed(AgentPhase from, AgentPhase to) {
  return from == to || kMoves.allows(from, to);
}

AgentPhase checked_agent_move(AgentPhase from, AgentPhase next) {
  if (!agent_move_allowed(from, next)) {
    throw_bad_move("agent phase", agent_phase_name(from), agent_phase_name(next));
  }
  return next;
}

Verdict agent_verdict(AgentPhase p, std::uint16_t id) {
  // A relay has handed its channel over: nothing comes to it any more.
  if (p == P::kRelaying) return Verdict::kIgnore;
  // Instead of Setup, from a new head: once, and only then.
  if (id == Reattach::kId) return p == P::kSetup ? Verdict::kHandle : Verdict::kFatal;
  // Whatever the phase: the head stopping or pacing the job, the fences and
  // the requests that every phase answers (the handlers tell when there is
  // nothing to do: no worker to signal, no stack to take).
  if (is_one_of<Abort, Shutdown, Heartbeat, FenceDown, PauseOutput, SignalRanks, CollectStacks,
                StdinData, StdinEof>(id)) {
    return Verdict::kHandle;
  }
  // Once: a second Setup is the head's mistake.
  if (id == Setup::kId) return p == P::kSetup ? Verdict::kHandle : Verdict::kFatal;
  // Start and the tests of the network that come before it: only once ready;
  // after an Abort (stopping) or at any other time, too late or too early.
  if (is_one_of<Start, Probe, NetListen, NetSend>(id)) {
    return p == P::kReady ? Verdict::kHandle : Verdict::kIgnore;
  }
  // The agent's own messages (Hello, Ready, Output, ...) never come from the head.
  return Verdict::kFatal;
}

}  // namespace dlaunch::agent
