// The agent's side of --check's network test between nodes (issue 33;
// proto: NetListen, NetSend): a sink that takes the other nodes' test
// streams, and a sender that streams to one node for a set time and reports
// what the receiver acknowledged. The head pairs the nodes and judges the
// figures (launcher/check/health.h).
//
// A stream counts only once it has begun with the check's token (random per
// check, from the head over the control channel): the sink trusts nothing
// else it receives, and only counts and drops the bytes.
//
// Thread safety: none; the agent's event loop only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "dlaunch/clock.h"
#include "dlaunch/proto/protocol.h"

namespace dlaunch::agent {

class BandwidthSink {
 public:
  // Listens on a free TCP port on every address (IPv6 and IPv4 where the
  // system has IPv6). Throws dlaunch::Error when it cannot.
  BandwidthSink(boost::asio::io_context& io, Clock& clock, std::string token);
  ~BandwidthSink();
  BandwidthSink(const BandwidthSink&) = delete;
  BandwidthSink& operator=(const BandwidthSink&) = delete;
  std::uint16_t port() const { return port_; }
  void close();

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::uint16_t port_ = 0;
};

class BandwidthSender {
 public:
  using Done = std::function<void(proto::NetSent)>;
  // Starts at once; `done` is called once, from the loop, with the figures or
  // the error. Destroying the sender drops the call.
  BandwidthSender(boost::asio::io_context& io, Clock& clock, const proto::NetSend& m, Done done);
  ~BandwidthSender();
  BandwidthSender(const BandwidthSender&) = delete;
  BandwidthSender& operator=(const BandwidthSender&) = delete;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace dlaunch::agent
