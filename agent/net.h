// The agent's side of choosing the job's network (proto/protocol.h: Probe;
// this machine's addresses: dlaunch/proto/interfaces.h): the interface its
// traffic to an address takes, node 0's listener that the other nodes test their reach
// against, and the test itself (connects to node 0's candidate addresses,
// all at once, on the agent's event loop).
//
// Thread safety: none; the agent's event loop only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "dlaunch/clock.h"
#include "dlaunch/proto/interfaces.h"
#include "dlaunch/proto/protocol.h"
#include "dlaunch/unique_fd.h"

namespace dlaunch::agent {

// The interface this machine's traffic to `address` leaves by: the one that
// owns the source address the kernel picks for it (a UDP socket connected
// there, no packet sent), which is the one that owns `address` itself when it
// is this machine's own. Empty when there is no route or no match.
std::string interface_toward(const std::string& address,
                             const std::vector<proto::Interface>& interfaces);

// The variables that tell gloo, NCCL and (mpi) Open MPI which interface to
// use, each with `interface` as its value, except those the user set: in the
// agent's own environment (`base`, "NAME=VALUE") or the worker's (hostfile
// env, -x, --env-file, forwarded from the head). NCCL's gets "=" in front:
// NCCL reads its value as a prefix of interface names unless it starts so.
proto::Env network_interface_env(const std::string& interface, bool mpi,
                                 const std::vector<std::string>& base,
                                 const proto::Env& worker_env);

// A TCP port bound (not listening) on every address, IPv6 and IPv4 where the
// system has IPv6, else IPv4 only.
struct ReservedPort {
  UniqueFd fd;
  std::uint16_t port = 0;
  bool ipv6 = false;
};
// `wanted` 0: any free port, held without SO_REUSEADDR so that no other bind
// (another job's, with SO_REUSEADDR or not) can take it meanwhile; a wanted
// port is held with SO_REUSEADDR (an earlier attempt's connections may be in
// TIME_WAIT there). Rank 0 binds it once it is released at Start.
Result<ReservedPort> reserve_port(std::uint16_t wanted);

// Node 0's reserved port, listening: every connection is accepted and
// dropped at once (reset, so that nothing lingers in TIME_WAIT on the port).
class ProbeListener {
 public:
  // Takes the port's socket; throws dlaunch::Error when it cannot listen.
  ProbeListener(boost::asio::io_context& io, ReservedPort port);
  ~ProbeListener();
  ProbeListener(const ProbeListener&) = delete;
  ProbeListener& operator=(const ProbeListener&) = delete;
  // Stops listening and closes the port.
  void close();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Connects to each address of `probe` at its port, all at once, each within
// its timeout, and calls `done` once with one outcome per address (in order).
// `route` names this node's interface toward an address (interface_toward).
// Destroying the ReachProbe (or cancel()) drops the call.
class ReachProbe {
 public:
  using Route = std::function<std::string(const std::string& address)>;
  using Done = std::function<void(proto::ProbeResult)>;
  ReachProbe(boost::asio::io_context& io, Clock& clock, const proto::Probe& probe, Route route,
             Done done);
  ~ReachProbe();
  ReachProbe(const ReachProbe&) = delete;
  ReachProbe& operator=(const ReachProbe&) = delete;
  void cancel();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace dlaunch::agent
