#include "pernode/async_store.h"

#include <type_traits>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "dlaunch/process.h"

namespace dlaunch::rdzv {

ThreadedAsyncStore::Failure ThreadedAsyncStore::Failure::of(const comm::StoreError& e) {
  // what() is "store ADDRESS: OPERATION MESSAGE" (comm/store/client.cpp).
  const std::string what = e.what();
  const std::string head =
      (e.address().empty() ? std::string("store: ") : "store " + e.address() + ": ") +
      e.operation();
  return {.kind = e.kind(),
          .address = e.address(),
          .operation = e.operation(),
          .message = what.size() > head.size() + 1 && what.compare(0, head.size(), head) == 0
                         ? what.substr(head.size() + 1)
                     : what == head ? std::string()
                                    : what,
          .cause = e.cause()};
}

comm::StoreError ThreadedAsyncStore::Failure::error() const {
  return comm::StoreError(kind, address, operation, message).with_cause(cause);
}

ThreadedAsyncStore::ThreadedAsyncStore(boost::asio::io_context& io, comm::StoreOptions opts)
    : io_(io) {
  // Made here, connected by the first call on the thread: the destructor's
  // close() ends that connect as it ends any other wait.
  opts.connect_at_construction = false;
  try {
    client_ = std::make_unique<comm::Store>(std::move(opts));
  } catch (const comm::StoreError& e) {
    unusable_ = Failure::of(e);  // every call answers it
  }
  thread_ = start_thread_without_signals([this] { run(); });
}

ThreadedAsyncStore::~ThreadedAsyncStore() {
  *alive_ = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    calls_.clear();
  }
  if (client_) client_->close();
  wake_.notify_all();
  thread_.join();
}

void ThreadedAsyncStore::run() {
  for (;;) {
    Call call;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] { return stop_ || !calls_.empty(); });
      if (stop_) return;
      call = std::move(calls_.front());
      calls_.pop_front();
    }
    std::function<void()> answer = call(client_.get(), unusable_);
    boost::asio::post(io_, [alive = alive_, answer = std::move(answer)] {
      if (*alive) answer();
    });
  }
}

// `op(client)` on the thread; `done` on the loop with what came of it.
template <class Op, class Answer>
void ThreadedAsyncStore::ask(Op op, Answer done) {
  Call call = [op = std::move(op), done = std::move(done)](
                  comm::Store* client,
                  const std::optional<Failure>& failed) -> std::function<void()> {
    using R = std::invoke_result_t<Op&, comm::Store&>;
    std::optional<Failure> why = failed;
    if (client != nullptr) {
      try {
        if constexpr (std::is_void_v<R>) {
          op(*client);
          return [done] { done(std::nullopt); };
        } else {
          return [done, value = op(*client)]() mutable { done(std::nullopt, std::move(value)); };
        }
      } catch (const comm::StoreError& e) {
        why = Failure::of(e);
      }
    }
    // (why is set here: a client, or why there is none.)
    if constexpr (std::is_void_v<R>) {
      return [done, why] { done(why->error()); };
    } else {
      return [done, why] { done(why->error(), R{}); };
    }
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::move(call));
  }
  wake_.notify_all();
}

void ThreadedAsyncStore::set(std::string key, std::string value, Done done) {
  ask([key = std::move(key), value = std::move(value)](comm::Store& c) { c.set(key, value); },
      std::move(done));
}

void ThreadedAsyncStore::set_while_connected(std::string key, std::string value, Done done) {
  ask([key = std::move(key),
       value = std::move(value)](comm::Store& c) { c.set_while_connected(key, value); },
      std::move(done));
}

void ThreadedAsyncStore::get(std::string key, std::chrono::milliseconds timeout, Value done) {
  ask([key = std::move(key), timeout](comm::Store& c) { return c.get(key, timeout); },
      std::move(done));
}

void ThreadedAsyncStore::add(std::string key, std::int64_t delta, Number done) {
  ask([key = std::move(key), delta](comm::Store& c) { return c.add(key, delta); }, std::move(done));
}

void ThreadedAsyncStore::compare_set(std::string key, std::string expected, std::string desired,
                                     Value done) {
  ask([key = std::move(key), expected = std::move(expected), desired = std::move(desired)](
          comm::Store& c) { return c.compare_set(key, expected, desired); },
      std::move(done));
}

void ThreadedAsyncStore::wait(std::vector<std::string> keys, std::chrono::milliseconds timeout,
                              Done done) {
  ask([keys = std::move(keys), timeout](comm::Store& c) { c.wait(keys, timeout); },
      std::move(done));
}

void ThreadedAsyncStore::multi_get(std::vector<std::string> keys, Values done) {
  ask([keys = std::move(keys)](comm::Store& c) { return c.multi_get(keys); }, std::move(done));
}

void ThreadedAsyncStore::check(std::vector<std::string> keys, Flag done) {
  ask([keys = std::move(keys)](comm::Store& c) { return c.check(keys); }, std::move(done));
}

}  // namespace dlaunch::rdzv
