#include "network_service.h"

#include <utility>

#include "dlaunch/error.h"

namespace dlaunch::agent {

NetworkService::~NetworkService() { stop(); }

std::optional<std::string> NetworkService::prepare(const proto::Setup& setup, proto::Ready& ready) {
  if (!setup.reserve_master_port) return std::nullopt;
  auto reserved = reserve_port(setup.master_port);
  if (!reserved) return reserved.error();
  ready.master_port = reserved->port;
  if (!setup.accept_probes) {
    reserved_port_ = std::move(reserved->fd);
    return std::nullopt;
  }
  // The other nodes test their reach of this node's addresses here.
  try {
    probe_listener_ = std::make_unique<ProbeListener>(io_, std::move(*reserved));
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

bool NetworkService::handle(const proto::Message& msg) {
  if (const auto* probe = std::get_if<proto::Probe>(&msg)) {
    // Which of node 0's addresses this node reaches (the head chooses from
    // the answers of every node); the answer goes back whatever happens
    // meanwhile.
    probe_ = std::make_unique<ReachProbe>(
        io_, clock_, *probe, route_,
        [this](proto::ProbeResult r) { node_.send_to_head(std::move(r)); });
    return true;
  }
  if (const auto* listen_for = std::get_if<proto::NetListen>(&msg)) {
    listen(*listen_for);
    return true;
  }
  if (const auto* send = std::get_if<proto::NetSend>(&msg)) {
    bandwidth_senders_.push_back(std::make_unique<BandwidthSender>(
        io_, clock_, *send, [this](proto::NetSent r) { node_.send_to_head(std::move(r)); }));
    return true;
  }
  return false;
}

// --check's network test: listen for the other nodes' streams (the head then
// pairs the nodes, NetSend). Before Start only, as the reach test.
void NetworkService::listen(const proto::NetListen& m) {
  proto::NetListening answer;
  try {
    if (m.token.size() < proto::kMinNetTokenBytes) {
      answer.error = "the test's token is too short";
    } else {
      bandwidth_sink_ = std::make_unique<BandwidthSink>(io_, clock_, m.token);
      answer.port = bandwidth_sink_->port();
    }
  } catch (const Error& e) {
    answer.error = e.what();
  }
  node_.send_to_head(std::move(answer));
}

void NetworkService::stop() {
  probe_.reset();
  bandwidth_senders_.clear();
  if (bandwidth_sink_) bandwidth_sink_->close();
  bandwidth_sink_.reset();
  if (probe_listener_) probe_listener_->close();
  probe_listener_.reset();
  reserved_port_.reset();
}

}  // namespace dlaunch::agent
