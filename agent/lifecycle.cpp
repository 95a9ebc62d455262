#include "lifecycle.h"

#include <array>

#include "dlaunch/proto/protocol.h"

namespace dlaunch::agent {

namespace {

using P = AgentPhase;
using namespace proto;

constexpr int idx(P p) { return static_cast<int>(p); }

constexpr std::array<std::array<bool, kAgentPhases>, kAgentPhases> kMoves = [] {
  std::array<std::array<bool, kAgentPhases>, kAgentPhases> m{};
  const auto allow = [&m](P from, P to) { m.at(idx(from)).at(idx(to)) = true; };
  allow(P::kHello, P::kSetup);     // Hello went: Setup may come
  allow(P::kSetup, P::kReady);     // Setup done, Ready went
  allow(P::kSetup, P::kStopping);  // Abort, a signal or the head lost before Ready
  allow(P::kSetup, P::kDone);      // Shutdown before Ready
  allow(P::kReady, P::kRunning);   // Start
  allow(P::kReady, P::kStopping);  // Abort, a signal or the head lost before Start
  allow(P::kReady, P::kDone);      // Shutdown without Start (--check)
  allow(P::kRunning, P::kDone);    // every worker gone, Shutdown or the head gone
  allow(P::kStopping, P::kDone);   // the same, nothing having started
  return m;
}();

template <typename... M>
constexpr bool any_of_ids(std::uint16_t id) {
  return ((id == M::kId) || ...);
}

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
  }
  return "?";
}

bool agent_move_allowed(AgentPhase from, AgentPhase to) {
  return from == to || kMoves.at(idx(from)).at(idx(to));
}

Verdict agent_verdict(AgentPhase p, std::uint16_t id) {
  // Whatever the phase: the head stopping or pacing the job, the fences and
  // the requests that every phase answers (the handlers tell when there is
  // nothing to do: no worker to signal, no stack to take).
  if (any_of_ids<Abort, Shutdown, Heartbeat, FenceDown, PauseOutput, SignalRanks, CollectStacks,
                 StdinData, StdinEof>(id)) {
    return Verdict::kHandle;
  }
  // Once: a second Setup is the head's mistake.
  if (id == Setup::kId) return p == P::kSetup ? Verdict::kHandle : Verdict::kFatal;
  // Start and the tests of the network that come before it: only once ready;
  // after an Abort (stopping) or at any other time, too late or too early.
  if (any_of_ids<Start, Probe, NetListen, NetSend>(id)) {
    return p == P::kReady ? Verdict::kHandle : Verdict::kIgnore;
  }
  // The agent's own messages (Hello, Ready, Output, ...) never come from the head.
  return Verdict::kFatal;
}

}  // namespace dlaunch::agent
