#include "core/node_state.h"

#include "dlaunch/move_table.h"

namespace dlaunch {

namespace {

using S = NodeState;
using namespace proto;

// The moves the head may make. Done may come before Ready (an agent that
// said Fatal, or got Abort, ends without being ready) and, from an agent of
// another version, before Hello (left starting).
constexpr auto kNodeMoves = MoveTable<S, kNodeStates>()
                                .allow(S::kStarting, S::kHello)
                                .allow(S::kStarting, S::kDone)
                                .allow(S::kStarting, S::kLost)
                                .allow(S::kHello, S::kReady)
                                .allow(S::kHello, S::kDone)
                                .allow(S::kHello, S::kLost)
                                .allow(S::kReady, S::kDone)
                                .allow(S::kReady, S::kLost)
                                .allow(S::kDone, S::kEnded);

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

bool node_transition_allowed(NodeState from, NodeState to) { return kNodeMoves.allows(from, to); }

// What an agent sends, by the state it is in on the head. Setup, Start,
// Abort, Shutdown, FenceDown, Probe, PauseOutput, SignalRanks, CollectStacks,
// StdinData, StdinEof, NetListen, NetSend and Reattach go the other way:
// never.
bool node_accepts(NodeState s, std::uint16_t id) {
  switch (s) {
    case S::kStarting:
      // Hello; an agent of another version (left starting) may still say
      // why it stops, and end.
      return is_one_of<Hello, Fatal, Done>(id);
    case S::kHello:
      // Setup went: its checks answer (Ready or Fatal), its image's pull is
      // said, heartbeats run, and the requests that go to every node that
      // said Hello are answered (CollectStacks: Stacks; StdinAck for the
      // stdin it was sent). A new head (recover) sent Reattach instead:
      // the job's agent says Resumed, which stands for its Ready.
      return is_one_of<Ready, Resumed, Fatal, Done, Heartbeat, ImagePull, Stacks, StdinAck>(id);
    case S::kReady:
      // Everything an agent says once its node is set up: the workers'
      // messages after Start, the network's probes and tests before it.
      return is_one_of<Started, Output, Exited, Fatal, Done, Heartbeat, FenceUp, WorkerAbort,
                       ProbeResult, NetListening, NetSent, Stacks, StdinAck, Progress,
                       ProgressDamaged>(id);
    case S::kDone:   // Done is the last message
    case S::kEnded:  // and a closed link says nothing
    case S::kLost:
      return false;
  }
  return false;
}

void NodeLifecycle::to(NodeState next) {
  if (!node_transition_allowed(state_, next)) {
    throw_bad_move("node state", node_state_name(state_), node_state_name(next));
  }
  state_ = next;
  if (next == S::kHello) said_hello_ = true;
  if (next == S::kReady) said_ready_ = true;
}

void NodeLifecycle::close() {
  if (link_gone()) return;
  to(state_ == S::kDone ? S::kEnded : S::kLost);
}

bool NodeLifecycle::accepts(const Message& msg) const {
  return node_accepts(state_, message_id(msg));
}

}  // namespace dlaunch
