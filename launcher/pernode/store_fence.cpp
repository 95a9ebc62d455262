#include "pernode/store_fence.h"

#include <utility>

#include <fmt/format.h>

namespace dlaunch {

StoreFence::StoreFence(std::unique_ptr<rdzv::AsyncStore> store, StoreFenceOptions opts)
    : store_(std::move(store)), o_(std::move(opts)) {}

void StoreFence::fence(std::uint32_t seq, std::string data,
                       std::function<void(std::string all, std::string error)> done) {
  // Every node's k-th fence is the same collective, so the k-th request of
  // every launcher meets the others' under one key per node.
  const std::string base = fmt::format("{}fence/{}/", o_.prefix, seq);
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(o_.nnodes));
  for (int j = 0; j < o_.nnodes; ++j) keys.push_back(base + std::to_string(j));
  queue_.push_back(
      {.seq = seq, .data = std::move(data), .done = std::move(done), .keys = std::move(keys)});
  if (queue_.size() == 1) start();
}

bool StoreFence::refused(const rdzv::StoreFailure& f) {
  return f && f->kind() == comm::ErrorKind::kUsage;
}

// A call that fails on the way (the connection dropped, a wait's deadline)
// is made again: a set is idempotent, and a store that is gone ends the round
// through the watch, which destroys this relay. Each attempt is bounded by
// the connection's connect timeout, so a store that is gone is not asked in
// a tight loop.
void StoreFence::start() {
  Request& r = queue_.front();
  store_->set(r.keys[static_cast<std::size_t>(o_.node_rank)], r.data,
              [this](const rdzv::StoreFailure& f) {
                if (refused(f)) return finish({}, f->what());
                if (f) return start();
                await();
              });
}

void StoreFence::await() {
  store_->wait(queue_.front().keys, o_.wait, [this](const rdzv::StoreFailure& f) {
    if (refused(f)) return finish({}, f->what());
    if (f) return await();
    collect();
  });
}

void StoreFence::collect() {
  store_->multi_get(queue_.front().keys,
                    [this](const rdzv::StoreFailure& f, const std::vector<std::string>& parts) {
                      if (refused(f)) return finish({}, f->what());
                      if (f) return collect();
                      std::string all;
                      for (const auto& part : parts) all += part;
                      finish(std::move(all), {});
                    });
}

void StoreFence::finish(std::string all, std::string error) {
  Request r = std::move(queue_.front());
  queue_.pop_front();
  if (!queue_.empty()) start();
  r.done(std::move(all), std::move(error));
}

}  // namespace dlaunch
