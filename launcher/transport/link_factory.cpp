#include "transport/link_factory.h"

#include <utility>

#include "transport/local_transport.h"
#include "transport/scheduler_transport.h"
#include "transport/slurm_transport.h"

namespace dlaunch {

TransportLinks::TransportLinks(boost::asio::io_context& io, ssh::TransportOptions ssh)
    : io_(io), ssh_options_(std::move(ssh)) {}

TransportLinks::~TransportLinks() = default;

std::unique_ptr<AgentLink> TransportLinks::start(const NodePlan& node,
                                                 const std::string& agent_path,
                                                 const std::string& label, LinkCallbacks cb) {
  const HostEntry& host = node.host;
  switch (host.transport) {
    case Transport::kSsh:
      if (!ssh_) ssh_ = std::make_unique<ssh::Transport>(io_, ssh_options_);
      return ssh_->start(host, agent_path, label, std::move(cb));
    case Transport::kSlurm:
      return start_slurm_agent(io_, host.host, agent_path, node.node_rank, std::move(cb));
    case Transport::kSge:
    case Transport::kLsf:
    case Transport::kFlux:
      return start_scheduler_agent(io_, host.transport, host.host, agent_path, node.node_rank,
                                   std::move(cb));
    case Transport::kLocal:
      break;
  }
  return start_local_agent(io_, agent_path, node.node_rank, std::move(cb));
}

}  // namespace dlaunch
