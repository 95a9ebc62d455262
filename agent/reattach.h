// A job that survives its head, on a node (docs/events.md, "A job that
// survives its head"; proto's Reattach and Resumed).
//
// With Setup.head_grace_ms, an agent whose head goes away while its ranks
// run keeps them running for the grace and opens its door: a Unix socket,
// `head.sock` in the job's private folder of the node (made by mkdtemp,
// 0700, the user's own: see dlaunch/private_dir.h). A new head starts an
// agent on the node as any head does and sends it Reattach; that agent, the
// relay, finds the door (reattach_to_job below) and hands its own channel
// over: the descriptors its stdin and stdout are (the SSH channel, or the
// pipes of a local head), its stderr, and the bytes it read past the
// Reattach. The job's agent then speaks to the new head through them, and the
// relay waits until it ends, so that the session that carries them (sshd's,
// or the local head's child) lasts as long.
//
// At the door, in this order, before anything is taken:
//   - the peer is this user (SO_PEERCRED), or the connection is closed;
//   - door -> relay: "DLRA", the protocol version, a fresh challenge;
//   - relay -> door: its version, the job id and node rank it asks for, a
//     fresh challenge, its proof of the job's secret over both;
//   - door -> relay: 0 and its own proof (or 1 and why not: another job,
//     another node, a wrong proof, another version);
//   - relay -> door: one byte with the three descriptors (SCM_RIGHTS), the
//     bytes it read past the Reattach, and the Reattach.
// A relay that does not finish within kDoorVisit is turned away. Neither
// side has sent the secret; each proof names its role (comm/secret_proof.h).
//
// Single-threaded: the door runs on the agent's loop; the relay blocks (it
// has nothing else to do), each step within kRelayStep.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "dlaunch/proto/protocol.h"
#include "dlaunch/unique_fd.h"

namespace dlaunch::agent {

inline constexpr std::chrono::seconds kDoorVisit{5};
inline constexpr std::chrono::seconds kRelayStep{5};
inline constexpr const char* kDoorName = "head.sock";

// What a relay hands over.
struct HandedChannel {
  UniqueFd in;         // the new head's messages
  UniqueFd out;        // to the new head
  UniqueFd err;        // the relay's stderr (its session's), for the agent's own lines
  std::string unread;  // read from `in` past the Reattach: the first bytes of the stream
  proto::Reattach reattach;
  pid_t relay_pid = 0;  // SO_PEERCRED's
};

class ReattachDoor {
 public:
  struct Config {
    std::string path;  // the socket: <the node's private folder>/head.sock
    std::string job_id;
    std::int32_t node_rank = 0;
    std::string secret;
  };
  // `taken`: a relay proved the secret and handed its channel over (the door
  // has closed by then; the relay's connection stays open until this object
  // is destroyed). `log`: a line for the agent's stderr (a visitor turned away).
  ReattachDoor(boost::asio::io_context& io, Config cfg, std::function<void(HandedChannel)> taken,
               std::function<void(const std::string&)> log);
  ~ReattachDoor();
  ReattachDoor(const ReattachDoor&) = delete;
  ReattachDoor& operator=(const ReattachDoor&) = delete;

  // Listens; why not, when it cannot (the path too long for a socket, a
  // socket call failed). Opening again after a hand-over is allowed.
  std::string open();
  // Stops listening and turns away visitors not yet done; the last relay's
  // connection stays. The socket file is removed.
  void close();
  bool is_open() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// The relay's side: finds the door of job `r.job_id`'s node `r.node_rank`
// in this user's private folders under `base` (runtime_base_dir()), proves
// the secret, checks the door's proof and hands `in`, `out` and stderr over
// with `unread` and `r`. On success: the connection, which the door's agent
// holds open until it ends (read it to EOF to wait for that); else why not,
// in words for the head's report.
struct RelayOutcome {
  UniqueFd connection;
  std::string error;
};
RelayOutcome reattach_to_job(const std::string& base, const proto::Reattach& r, int in, int out,
                             const std::string& unread);

// The folders under `base` that can hold node `node_rank` of job `job_id`'s
// door: this user's private folders (a directory, not a link, owned by the
// effective uid, mode 0700) named as the agent names them.
std::vector<std::string> job_node_dirs(const std::string& base, const std::string& job_id,
                                       std::int32_t node_rank);

}  // namespace dlaunch::agent
