#include "core/node_state.h"

#include <array>
#include <stdexcept>
#include <string>
#include <variant>

namespace dlaunch {

namespace {

using S = NodeState;
using namespace proto;

constexpr int idx(S s) { return static_cast<int>(s); }

// kMoves[from][to]: the moves the head may make. Done may come before Ready
// (an agent that said Fatal, or got Abort, ends without being ready) and,
// from an agent of another version, before Hello (left starting).
constexpr std::array<std::array<bool, kNodeStates>, kNodeStates> kMoves = [] {
  std::array<std::array<bool, kNodeStates>, kNodeStates> m{};
  const auto allow = [&m](S from, S to) { m.at(idx(from)).at(idx(to)) = true; };
  allow(S::kStarting, S::kHello);
  allow(S::kStarting, S::kDone);
  allow(S::kStarting, S::kLost);
  allow(S::kHello, S::kReady);
  allow(S::kHello, S::kDone);
  allow(S::kHello, S::kLost);
  allow(S::kReady, S::kDone);
  allow(S::kReady, S::kLost);
  allow(S::kDone, S::kEnded);
  return m;
}();

// What an agent sends, by the state it is in on the head. Setup, Start,
// Abort, Shutdown, FenceDown, Probe, PauseOutput, SignalRanks, CollectStacks,
// StdinData, StdinEof, NetListen and NetSend go the other way: never.
template <typename... M>
constexpr bool any_of_ids(std::uint16_t id) {
  return ((id == M::kId) || ...);
}

bool accepted(S s, std::uint16_t id) {
  switch (s) {
    case S::kStarting:
      // Hello; an agent of another version (left starting) may still say
      // why it stops, and end.
      return any_of_ids<Hello, Fatal, Done>(id);
    case S::kHello:
      // Setup went: its checks answer (Ready or Fatal), heartbeats run, and
      // the requests that go to every node that said Hello are answered
      // (CollectStacks: Stacks; StdinAck for the stdin it was sent).
      return any_of_ids<Ready, Fatal, Done, Heartbeat, Stacks, StdinAck>(id);
    case S::kReady:
      // Everything an agent says once its node is set up: the workers'
      // messages after Start, the network's probes and tests before it.
      return any_of_ids<Started, Output, Exited, Fatal, Done, Heartbeat, FenceUp, WorkerAbort,
                        ProbeResult, NetListening, NetSent, Stacks, StdinAck, Progress,
                        ProgressDamaged>(id);
    case S::kDone:   // Done is the last message
    case S::kEnded:  // and a closed link says nothing
    case S::kLost:
      return false;
  }
  return false;
}

std::uint16_t id_of(const Message& msg) {
  return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::kId; }, msg);
}

}  // namespace

std::string_view node_state_name(NodeState s) {
  switch (s) {
    case S::kStarting:
      return "starting";
    case S::kHello:
      return "hello";
    case S::kReady:
      return "ready";
    case S::kDone:
      return "done";
    case S::kEnded:
      return "ended";
    case S::kLost:
      return "lost";
  }
  return "?";
}

bool node_transition_allowed(NodeState from, NodeState to) {
  return kMoves.at(idx(from)).at(idx(to));
}

bool node_accepts(NodeState s, std::uint16_t id) { return accepted(s, id); }

void NodeLifecycle::to(NodeState next) {
  if (!node_transition_allowed(state_, next)) {
    throw std::logic_error("node state: no move from " + std::string(node_state_name(state_)) +
                           " to " + std::string(node_state_name(next)));
  }
  state_ = next;
  if (next == S::kHello) said_hello_ = true;
  if (next == S::kReady) said_ready_ = true;
}

void NodeLifecycle::close() {
  if (link_gone()) return;
  to(state_ == S::kDone ? S::kEnded : S::kLost);
}

bool NodeLifecycle::accepts(const Message& msg) const { return accepted(state_, id_of(msg)); }

}  // namespace dlaunch
