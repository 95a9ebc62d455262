// Node 0's comm store (comm/store.h: the job's rendezvous store, which
// workers' ProcessGroups and the per-node rendezvous meet in), as a node
// service (service.h). Made at Setup when the head gives the job's store
// secret (only node 0's Setup does); it lives as long as the job, not the
// workers, so it survives their crashes, and closes at the end.
//
// Besides TCP (on the address the head chose: loopback when every node is on
// its machine) it listens on a Unix socket in the node's private folder, for
// the workers of this machine: out of reach of other users and of any flood
// of theirs at the TCP port. Ready says both.
//
// Thread safety: none; the agent's event loop only.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>

#include "comm/store.h"
#include "service.h"

namespace dlaunch::agent {

class StoreService final : public NodeService {
 public:
  StoreService(boost::asio::io_context& io, NodeAccess& node) : io_(io), node_(node) {}
  ~StoreService() override;
  StoreService(const StoreService&) = delete;
  StoreService& operator=(const StoreService&) = delete;

  std::optional<std::string> prepare(const proto::Setup& setup, proto::Ready& ready) override;
  void stop() override;

 private:
  boost::asio::io_context& io_;
  NodeAccess& node_;
  std::unique_ptr<comm::StoreServer> store_;
};

}  // namespace dlaunch::agent
