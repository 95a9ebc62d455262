// ThreadedAsyncStore: an AsyncStore (pernode/rdzv_store.h) over comm's
// blocking client of the job's TCP store (comm::Store).
//
// comm's client is blocking by design: it is what the workers link, and its
// calls are a request and its answer on one connection, as c10d's and gloo's
// are. Code on an event loop asks through this adapter instead: the calls
// queue, in order, for one thread that makes them (connecting at the first,
// and again after a lost connection) and posts each answer to the loop. The
// thread only ever blocks in the store's own socket wait for an answer, a
// parked get's included: there is no polling. The thread takes no signal:
// the loop handles them.
//
// Destroy it on the loop's thread (or when the loop does not run): it ends
// the call under way at once, a connect or its retries included
// (comm::Store::close), drops the calls not made yet and every answer not yet
// run, and joins the thread. Only a host name's lookup is not cut short.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "pernode/rdzv_store.h"

namespace dlaunch::rdzv {

class ThreadedAsyncStore final : public AsyncStore {
 public:
  // Connects with `opts` at the first call (and again after a lost
  // connection, as comm::Store does).
  ThreadedAsyncStore(boost::asio::io_context& io, comm::StoreOptions opts);
  ~ThreadedAsyncStore() override;
  ThreadedAsyncStore(const ThreadedAsyncStore&) = delete;
  ThreadedAsyncStore& operator=(const ThreadedAsyncStore&) = delete;

  void set(std::string key, std::string value, Done done) override;
  void set_while_connected(std::string key, std::string value, Done done) override;
  void get(std::string key, std::chrono::milliseconds timeout, Value done) override;
  void add(std::string key, std::int64_t delta, Number done) override;
  void compare_set(std::string key, std::string expected, std::string desired, Value done) override;
  void wait(std::vector<std::string> keys, std::chrono::milliseconds timeout, Done done) override;
  void multi_get(std::vector<std::string> keys, Values done) override;
  void check(std::vector<std::string> keys, Flag done) override;

 private:
  // A StoreError as plain strings, made on the thread; the answer on the
  // loop makes its own StoreError from it. (A StoreError is a
  // std::runtime_error, whose copies share one message buffer under a
  // reference count that libstdc++ changes where ThreadSanitizer cannot see
  // it: one copy destroyed on the thread while the loop reads another is a
  // race to it.)
  struct Failure {
    comm::ErrorKind kind = comm::ErrorKind::kEnvironment;
    std::string address;
    std::string operation;
    std::string message;
    comm::StoreError::Cause cause = comm::StoreError::Cause::kOther;
    static Failure of(const comm::StoreError& e);
    comm::StoreError error() const;
  };
  // A call as the thread makes it: given the client (null when there is
  // none, with why), it returns the answer to run on the loop.
  using Call = std::function<std::function<void()>(comm::Store*, const std::optional<Failure>&)>;
  template <class Op, class Answer>
  void ask(Op op, Answer done);
  void run();

  boost::asio::io_context& io_;
  // The loop's: false once destroyed, so that an answer posted before then
  // is dropped.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::mutex mu_;
  std::condition_variable wake_;  // the thread: a call, or stop
  std::deque<Call> calls_;        // under mu_
  bool stop_ = false;             // under mu_
  // Made by the constructor (it connects at its first call); null when its
  // options are refused, which every call then answers.
  std::unique_ptr<comm::Store> client_;
  std::optional<Failure> unusable_;
  std::thread thread_;
};

}  // namespace dlaunch::rdzv
