// Transports start one dlaunch-agent per node and hand the controller a
// control link to it. Local nodes: a child process over pipes. SSH nodes: an
// exec channel (libssh2, or the system's ssh). Slurm: a job step. The
// controller only sees this interface, so tests and new transports plug in
// without touching it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlaunch/error.h"
#include "dlaunch/proto/protocol.h"

namespace dlaunch {

// How a link's agent was started, for --check's table (check/preflight.h).
struct LinkStart {
  // Where the start failed, before the agent said Hello: a stage of the SSH
  // connection ("connect", "handshake", "hostkey", "auth", "exec"), "agent"
  // (the node was reached and has no agent there, and none was copied), or
  // "ssh" (the system's ssh could not reach the node or log in); empty: not
  // there (the close reason says what happened).
  std::string failed_stage;
  bool copied = false;  // the head's agent was copied to the node for this link
  // The SSH concurrency limit (--ssh-concurrency) holds a link back until a
  // connection slot is free: `queued` while it waits its turn, then `began`
  // (the steady clock) when its start began. A link that never waits says
  // neither: its start began with the link.
  bool queued = false;
  std::chrono::steady_clock::time_point began{};
};

// A local agent (or the program that starts it: srun, qrsh) that is not
// there or cannot be executed.
class AgentNotFound : public Error {
 public:
  using Error::Error;
};

// What a local agent is doing, as the kernel sees it and its descendants.
struct AgentWork {
  unsigned long long cpu_ticks = 0;  // user + system time, in clock ticks
  bool runnable = false;             // one runs or waits for a CPU or the disk (R, D)
};

struct LinkCallbacks {
  std::function<void(proto::Message&&)> on_message;
  std::function<void(const std::string& reason)> on_close;  // once
};

class AgentLink {
 public:
  virtual ~AgentLink() = default;
  virtual void send(const proto::Message& msg) = 0;
  virtual bool is_open() const = 0;
  virtual void close() = 0;
  // Reads and dispatches, now, what the agent sent that is already waiting:
  // before the controller declares the agent silent. After the head itself
  // was stalled (an overloaded machine, SIGSTOP), the heartbeat timer can run
  // before the reads of the heartbeats that arrived meanwhile.
  virtual void read_pending() = 0;
  // Last resort when the agent does not exit by itself: kill it.
  virtual void kill_agent() = 0;
  // True once the agent process (or channel) has been reaped/closed for good.
  virtual bool agent_gone() const = 0;
  // Called by the controller on SIGCHLD: reap what is ours, non-blocking.
  virtual void reap() = 0;
  // The agent's process id when it is the head's own child (local and Slurm
  // transports), so that a SIGCHLD reaps just that link; else -1.
  virtual pid_t agent_pid() const { return -1; }
  // Network addresses of the connection to the agent, when there is one
  // (SSH): the node's address as the head reached it, and the head's own.
  virtual std::string peer_address() const { return {}; }
  virtual std::string local_address() const { return {}; }
  // How its agent was started (LinkStart).
  virtual LinkStart start_info() const { return {}; }
  // The agent's work, when the link's child is the agent itself (the local
  // transport) and it is still there; nullopt for every other link (an ssh
  // or srun process says nothing of the agent's).
  virtual std::optional<AgentWork> agent_work() const { return std::nullopt; }
};

}  // namespace dlaunch
