// SSH transport: one SSH connection per node, made in parallel with bounded
// concurrency, each running `exec <dlaunch-agent>` on an exec channel whose
// stdin/stdout carry the control protocol. The channel is the lifeline: when
// the connection drops, sshd closes the agent's stdin and the agent stops its
// workers; when the head loses the channel, the controller fails that node.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "dlaunch/tunables.h"
#include "hostfile/hostfile.h"
#include "transport/ssh/agent_install.h"
#include "transport/ssh/connect.h"
#include "transport/ssh/host_options.h"
#include "transport/ssh/limiter.h"
#include "transport/ssh/openssh_transport.h"
#include "transport/ssh/proxy.h"
#include "transport/transport.h"

namespace dlaunch::ssh {

struct TransportOptions {
  // Connections in their connect/handshake/auth/exec phase at once; 0: adapt
  // (limiter.h).
  int concurrency = static_cast<int>(tunables::kSshConcurrency.value);
  HostSettings hosts;  // the ssh config and the command line's SSH options
  // The head's own agent, copied to nodes that have none (or another
  // version) at the expected path; empty: never copy (--no-agent-upload,
  // --agent).
  std::string agent_image;
  OpensshOptions openssh;  // for nodes reached with the system's ssh
};

// Options for one host, from the hostfile entry and the transport options.
inline ConnectOptions connect_options(const HostEntry& host, const TransportOptions& opts) {
  return resolve_host(host, opts.hosts);
}

class Transport {
 public:
  Transport(boost::asio::io_context& io, TransportOptions opts);
  // Starts connecting at once; the link reports on_close if that fails.
  std::unique_ptr<AgentLink> start(const HostEntry& host, const std::string& agent_path,
                                   const std::string& label, LinkCallbacks cb);
  const TransportOptions& options() const { return opts_; }
  // The head's agent to copy to a node with none, or null (never read twice).
  std::shared_ptr<const AgentImage> image_for(const HostEntry& host);
  std::shared_ptr<Limiter> limiter() const { return limiter_; }

 private:
  boost::asio::io_context& io_;
  TransportOptions opts_;
  std::shared_ptr<Limiter> limiter_;
  std::shared_ptr<Connector> connector_;     // shared with the links' coroutines
  std::shared_ptr<const AgentImage> image_;  // read for the first node that may need it
};

}  // namespace dlaunch::ssh
