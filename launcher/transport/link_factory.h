// LinkFactory: how the controller gets a control link to each node's agent.
// The controller only ever sees this interface and AgentLink (transport.h):
// the real factory starts agents (a local child, a Slurm job step, a task of
// an SGE, LSF or Flux job, or an SSH exec channel, as each host says); the controller's unit tests
// give it links that are no processes at all.
#pragma once

#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "plan/plan.h"
#include "transport/ssh/ssh_transport.h"
#include "transport/transport.h"

namespace dlaunch {

class LinkFactory {
 public:
  virtual ~LinkFactory() = default;
  // Starts the agent of `node` (`agent_path` on that host); `label` names the
  // node in messages. The link reports through `cb`, also a failure to
  // connect later on. Throws dlaunch::Error when the agent cannot be started
  // at all.
  virtual std::unique_ptr<AgentLink> start(const NodePlan& node, const std::string& agent_path,
                                           const std::string& label, LinkCallbacks cb) = 0;
};

// The transports dlaunch has, chosen per host. Must outlive every link it
// made (the SSH links share its connection limiter).
class TransportLinks final : public LinkFactory {
 public:
  TransportLinks(boost::asio::io_context& io, ssh::TransportOptions ssh);
  ~TransportLinks() override;
  std::unique_ptr<AgentLink> start(const NodePlan& node, const std::string& agent_path,
                                   const std::string& label, LinkCallbacks cb) override;

 private:
  boost::asio::io_context& io_;
  ssh::TransportOptions ssh_options_;
  std::unique_ptr<ssh::Transport> ssh_;  // made for the first SSH host
};

}  // namespace dlaunch
