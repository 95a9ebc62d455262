#include "pernode/store_fence.h"

#include <utility>
#include <vector>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "comm/store.h"
#include "dlaunch/process.h"

namespace dlaunch {

StoreFence::StoreFence(boost::asio::io_context& io, StoreFenceOptions opts)
    : io_(io), o_(std::move(opts)) {
  // The controller's loop handles every signal.
  thread_ = start_thread_without_signals([this] { run(); });
}

StoreFence::~StoreFence() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StoreFence::fence(std::uint32_t seq, std::string data,
                       std::function<void(std::string all, std::string error)> done) {
  {
    MutexLock lock(mu_);
    queue_.push_back({.seq = seq, .data = std::move(data), .done = std::move(done)});
  }
  cv_.notify_all();
}

bool StoreFence::stopping() {
  MutexLock lock(mu_);
  return stop_;
}

void StoreFence::run() {
  comm::StoreOptions so;
  so.host = o_.host;
  so.port = o_.port;
  so.secret = o_.secret;
  so.connect_timeout = o_.io_timeout;
  so.timeout = o_.io_timeout;
  std::unique_ptr<comm::Store> store;
  for (;;) {
    Request r;
    {
      MutexLock lock(mu_);
      while (!stop_ && queue_.empty()) cv_.wait(mu_);
      if (stop_) return;
      r = std::move(queue_.front());
      queue_.pop_front();
    }
    if (!complete(so, store, r)) return;
  }
}

// Every node's k-th fence is the same collective, so the k-th request of
// every launcher meets the others' under one key per node. A store call that
// fails on the way (the connection dropped, the wait's deadline) is tried
// again: a set is idempotent, and a store that is gone ends the round through
// the watch, which stops this relay. A refusal (kUsage: the secret, a value
// over the store's limit) cannot get better and fails the job.
bool StoreFence::complete(const comm::StoreOptions& so, std::unique_ptr<comm::Store>& store,
                          Request& r) {
  const std::string base = fmt::format("{}fence/{}/", o_.prefix, r.seq);
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(o_.nnodes));
  for (int j = 0; j < o_.nnodes; ++j) keys.push_back(base + std::to_string(j));
  bool set = false;
  std::string error;
  std::string all;
  while (!stopping()) {
    try {
      if (!store) store = std::make_unique<comm::Store>(so);
      if (!set) {
        store->set(keys[static_cast<std::size_t>(o_.node_rank)], r.data);
        set = true;
      }
      store->wait(keys, o_.poll);
      for (auto& part : store->multi_get(keys)) all += part;
      break;
    } catch (const comm::StoreError& e) {
      if (e.kind() != comm::ErrorKind::kUsage) continue;
      error = e.what();
      break;
    }
  }
  if (stopping()) return false;
  boost::asio::post(
      io_, [done = std::move(r.done), all = std::move(all), error = std::move(error)]() mutable {
        done(std::move(all), std::move(error));
      });
  return true;
}

}  // namespace dlaunch
