// StoreFence: the MPI fences of a per-node job under --mpi, across its
// launchers, through the rendezvous store (docs/per-node.md, "MPI").
//
// In the head-node mode the head joins every node's fence data and sends the
// result back to all agents (Controller::on_fence). A per-node launcher's
// controller has only its own node: it hands the node's data of fence k to
// this relay, which sets it at <round prefix>fence/k/<node rank>, waits until
// every node of the round has set its own, and gives the joined data (node
// order, as the head would) back on the controller's loop. Every launcher
// does the same, so each gets the same answer.
//
// The blocking store calls run on a thread of the relay's own, with its own
// connection (the rendezvous watch owns the other): the controller's loop
// never waits for the network. The relay gives up nothing by itself: a fence
// waits as long as MPI's would, until the round ends by a failure anywhere
// (the watch's) or by the job's --timeout; the destructor then stops it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>

#include "controller/controller.h"
#include "dlaunch/thread_annotations.h"

namespace dlaunch {

namespace comm {
class Store;
struct StoreOptions;
}  // namespace comm

struct StoreFenceOptions {
  std::string host;  // the rendezvous store
  std::uint16_t port = 0;
  std::string secret;
  std::string prefix;  // this round's keys
  int nnodes = 1;
  int node_rank = 0;
  // How long one wait for the other nodes lasts before the relay looks at
  // whether it must stop (the destructor waits at most about this long plus
  // io_timeout).
  std::chrono::milliseconds poll{200};
  std::chrono::milliseconds io_timeout{2000};  // one request; and a reconnect
};

class StoreFence final : public FenceRelay {
 public:
  StoreFence(boost::asio::io_context& io, StoreFenceOptions opts);
  ~StoreFence() override;  // stops the thread: a fence not complete by then never completes
  StoreFence(const StoreFence&) = delete;
  StoreFence& operator=(const StoreFence&) = delete;

  // On the controller's loop.
  void fence(std::uint32_t seq, std::string data,
             std::function<void(std::string all, std::string error)> done) override;

 private:
  struct Request {
    std::uint32_t seq = 0;
    std::string data;
    std::function<void(std::string, std::string)> done;
  };
  void run();
  // False when told to stop first.
  bool complete(const comm::StoreOptions& so, std::unique_ptr<comm::Store>& store, Request& r);
  bool stopping() EXCLUDES(mu_);

  boost::asio::io_context& io_;
  StoreFenceOptions o_;
  Mutex mu_;
  std::condition_variable_any cv_;  // for the thread: a request, or stop
  std::deque<Request> queue_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dlaunch
