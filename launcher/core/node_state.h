// The job core's per-node state: what the head knows of one node's agent, as
// one state with a table of the moves it may make, and one table of which
// message an agent may send in which state (docs/architecture.md, "The job
// core"). No sockets, no clock, no threads: the controller (one attempt on
// the head) owns one NodeLifecycle per node, keyed by the node's index in the
// plan, and asks it before it handles a message.
//
//   starting --Hello--> hello --Ready--> ready --Done--> done --close--> ended
//      |  \               |                |
//      |   '--Done--------+----Done--------'            (after Fatal or Abort)
//      '--------close-----+----close-------+----------------------> lost
//
// A node's link may close in any state: after Done it has ended; before, it
// is lost (its agent died, its SSH session dropped, the head cut it). Hello
// of another version leaves the node starting (and failed): nothing is set
// up there.
#pragma once

#include <cstdint>
#include <string_view>

#include "dlaunch/proto/protocol.h"

namespace dlaunch {

enum class NodeState : std::uint8_t {
  kStarting,  // its agent is being started: no (acceptable) Hello yet
  kHello,     // said Hello, the versions agree: Setup went to it
  kReady,     // said Ready (its checks passed, its ranks placed); runs once Start goes
  kDone,      // said Done, the last message an agent sends; its link closes next
  kEnded,     // its link closed after Done
  kLost,      // its link closed, or was cut, before Done
};
inline constexpr int kNodeStates = 6;

std::string_view node_state_name(NodeState s);

// Whether the table allows the move (staying where one is is not a move).
bool node_transition_allowed(NodeState from, NodeState to);

// Whether an agent whose node is in `s` may send a message of wire type `id`
// (proto's kId). Hello only while starting; Ready only after Hello; the
// workers' messages (Started, Output, Exited, fences, progress) and the
// answers to the head's requests once ready; nothing after Done. A message
// from a link the head has already cut (ended, lost) is not accepted either.
bool node_accepts(NodeState s, std::uint16_t id);

// One node's state, and what it has said on the way (the report asks
// whether a lost node had started, the start deadline which nodes never said
// Ready).
class NodeLifecycle {
 public:
  NodeState state() const { return state_; }
  // Moves to `next`; std::logic_error (a bug of the head) when the table
  // does not allow it.
  void to(NodeState next);
  // The link is gone: done -> ended, starting/hello/ready -> lost; a node
  // already ended or lost stays as it is.
  void close();

  bool accepts(const proto::Message& msg) const;
  bool said_hello() const { return said_hello_; }
  bool said_ready() const { return said_ready_; }
  // Said Done (and may have ended since).
  bool done() const { return state_ == NodeState::kDone || state_ == NodeState::kEnded; }
  bool link_gone() const { return state_ == NodeState::kEnded || state_ == NodeState::kLost; }
  // Said Hello, not Done, link up: the head's requests (PauseOutput,
  // CollectStacks) go to it.
  bool set_up() const { return state_ == NodeState::kHello || state_ == NodeState::kReady; }

 private:
  NodeState state_ = NodeState::kStarting;
  bool said_hello_ = false;
  bool said_ready_ = false;
};

}  // namespace dlaunch
