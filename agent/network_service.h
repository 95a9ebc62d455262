// The agent's part in choosing and testing the job's network, as a node
// service (service.h):
//
// - Setup: node 0 (Setup.reserve_master_port) reserves MASTER_PORT (net.h:
//   reserve_port) and says it in Ready; when the head will test the other
//   nodes' reach of it (Setup.accept_probes), the port listens for their
//   probes (ProbeListener).
// - Probe: which of node 0's addresses this node reaches (ReachProbe); the
//   answer goes back as ProbeResult.
// - NetListen, NetSend: --check's network test between nodes (bandwidth.h).
// - Start: the tests end and the port is released (rank 0 binds it now).
//
// Thread safety: none; the agent's event loop only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "bandwidth.h"
#include "dlaunch/clock.h"
#include "dlaunch/unique_fd.h"
#include "net.h"
#include "service.h"

namespace dlaunch::agent {

class NetworkService final : public NodeService {
 public:
  // route: this node's interface toward an address (AgentOs::route_interface).
  using Route = std::function<std::string(const std::string& address)>;
  NetworkService(boost::asio::io_context& io, Clock& clock, Route route, NodeAccess& node)
      : io_(io), clock_(clock), route_(std::move(route)), node_(node) {}
  ~NetworkService() override;
  NetworkService(const NetworkService&) = delete;
  NetworkService& operator=(const NetworkService&) = delete;

  std::optional<std::string> prepare(const proto::Setup& setup, proto::Ready& ready) override;
  bool handle(const proto::Message& msg) override;
  void on_start(const proto::Start& /*start*/) override { stop(); }
  void stop() override;

 private:
  void listen(const proto::NetListen& m);

  boost::asio::io_context& io_;
  Clock& clock_;
  Route route_;
  NodeAccess& node_;
  UniqueFd reserved_port_;                         // node 0, no probes: held until Start
  std::unique_ptr<ProbeListener> probe_listener_;  // node 0, from Setup to Start
  std::unique_ptr<ReachProbe> probe_;              // the other nodes: the head's Probe
  // --check's network test: from NetListen, and each NetSend's.
  std::unique_ptr<BandwidthSink> bandwidth_sink_;
  std::vector<std::unique_ptr<BandwidthSender>> bandwidth_senders_;
};

}  // namespace dlaunch::agent
