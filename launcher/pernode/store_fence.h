// StoreFence: the MPI fences of a per-node job under --mpi, across its
// launchers, through the rendezvous store (docs/per-node.md, "MPI").
//
// In the head-node mode the head joins every node's fence data and sends the
// result back to all agents (Controller::on_fence). A per-node launcher's
// controller has only its own node: it hands the node's data of fence k to
// this relay, which sets it at <round prefix>fence/k/<node rank>, waits until
// every node of the round has set its own, and gives the joined data (node
// order, as the head would) back. Every launcher does the same, so each gets
// the same answer.
//
// It runs on the controller's loop over a connection of its own to the store
// (an AsyncStore whose answers come on that loop; the rendezvous's watch owns
// another): the loop never waits for the network, and the wait for the other
// nodes is one parked request, no polling. The relay gives up nothing by
// itself: a fence waits as long as MPI's would, until the round ends by a
// failure anywhere (the watch's) or by the job's --timeout; destroying the
// relay then drops it (its `done` is never called).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "controller/mpi_fences.h"
#include "pernode/rdzv_store.h"

namespace dlaunch {

struct StoreFenceOptions {
  std::string prefix;  // this round's keys
  int nnodes = 1;
  int node_rank = 0;
  // One parked wait for the other nodes; when it times out the relay parks
  // another (a fence waits as long as it takes).
  std::chrono::milliseconds wait{std::chrono::hours(24)};
};

class StoreFence final : public FenceRelay {
 public:
  explicit StoreFence(std::unique_ptr<rdzv::AsyncStore> store, StoreFenceOptions opts);

  // On the controller's loop. Fences complete in the order they were asked.
  void fence(std::uint32_t seq, std::string data,
             std::function<void(std::string all, std::string error)> done) override;

 private:
  struct Request {
    std::uint32_t seq = 0;
    std::string data;
    std::function<void(std::string, std::string)> done;
    std::vector<std::string> keys;  // every node's part of this fence
  };
  void start();    // the first request: set this node's part
  void await();    // then wait for every node's
  void collect();  // then read them all
  void finish(std::string all, std::string error);
  // A failed call: true when it is one no retry can mend (the secret, a
  // value over the store's limit), after which the fence fails.
  static bool refused(const rdzv::StoreFailure& f);

  std::unique_ptr<rdzv::AsyncStore> store_;
  StoreFenceOptions o_;
  std::deque<Request> queue_;  // the front one is under way
};

}  // namespace dlaunch
