// The store client's one connection: connect with backoff, authenticate, and
// exchange one request for one answer. Callers serialise through `mu`, held
// from before the request until the answer is decoded (clang's
// -Wthread-safety checks it: dlaunch/thread_annotations.h):
//
//   dlaunch::MutexLock lock(c.mu);
//   c.ensure_connected(op);
//   Answer a = c.call(op, frame, c.io_deadline());
//   ... decode a; c.bad_answer(op) if it is malformed ...
//
// opts and address are set by the constructor and never change: any thread
// may read them without the lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comm/store.h"
#include "dlaunch/thread_annotations.h"
#include "store/socket.h"
#include "store/wire.h"

namespace dlaunch::comm::detail {

std::string quote(std::string_view s);
// A message from the wire, escaped for a terminal and bounded.
std::string printable(std::string_view s);
std::string quote_list(const std::vector<std::string>& keys);
std::string seconds(Clock::duration d);  // "30.0 s"
// Negative means "don't wait"; huge means "a year", which steady_clock can still add.
std::chrono::milliseconds clamp_wait(std::chrono::milliseconds t);

struct Answer {
  Status status = Status::ok;
  std::string frame;  // as received: header, body (status byte first), tag
  std::string_view body() const {
    return std::string_view(frame).substr(kFrameHeaderBytes,
                                          frame.size() - kFrameHeaderBytes - kTagBytes);
  }
  Reader reader() const {
    Reader r(body());
    r.u8();
    return r;
  }
};

class Connection {
 public:
  explicit Connection(StoreOptions options);

  [[noreturn]] void fail(ErrorKind kind, const std::string& op, const std::string& message,
                         StoreError::Cause cause = StoreError::Cause::kOther) const {
    throw StoreError(kind, address, op, message).with_cause(cause);
  }
  // Drops the connection (its state is unknown) and throws.
  [[noreturn]] void bad_answer(const std::string& op) REQUIRES(mu);
  // Refuses a key/value/request over the store's limits (max_key, max_value,
  // max_frame, read under mu) before it costs the connection.
  void limit(const std::string& op, const char* what, size_t size, uint64_t max) const;

  // The start of every call: fails at once once close() was called, forgets
  // an interrupt() that came between calls, and reconnects if the last
  // exchange broke the connection (or there was none yet).
  void ensure_connected(const std::string& op) REQUIRES(mu);
  void connect() REQUIRES(mu);
  // One request and its answer (ok or timeout; error answers throw).
  Answer call(const std::string& op, const std::string& frame, Clock::time_point deadline)
      REQUIRES(mu);
  Clock::time_point io_deadline() const { return Clock::now() + clamp_wait(opts.timeout); }
  // Ends the call under way at once, whatever it waits for (an answer, a
  // connect, the pause between two): any thread, without mu.
  void interrupt();
  // interrupt(), and every later call fails at once.
  void close();
  // get / wait / multi_get: the server parks the request until the keys exist or `timeout`.
  Answer await(const std::string& op, Op code, const std::vector<std::string>& keys,
               std::chrono::milliseconds timeout) REQUIRES(mu);
  [[noreturn]] void timed_out(const std::string& op, const Answer& a,
                              std::chrono::milliseconds timeout, size_t asked) REQUIRES(mu);

  const StoreOptions opts;
  const std::string address;  // "host:port"
  Mutex mu;
  // The server's limits, from the handshake of the current connection.
  uint64_t max_key GUARDED_BY(mu) = 0;
  uint64_t max_value GUARDED_BY(mu) = 0;
  uint64_t max_frame GUARDED_BY(mu) = 0;

 private:
  // What the server announces once it has accepted us.
  struct Limits {
    uint64_t max_key = 0;
    uint64_t max_value = 0;
    uint64_t max_frame = 0;
  };
  struct HandshakeFailure {
    bool retry = false;                        // worth another connection (else connect() gives up)
    ErrorKind kind = ErrorKind::kEnvironment;  // when connect() gives up at once
    std::string message;
    StoreError::Cause cause = StoreError::Cause::kOther;
  };
  // Greeting, both proofs, acceptance on a fresh connection (docs/store.md);
  // sets the taggers of the connection it returns limits for.
  Result<Limits, HandshakeFailure> handshake(const Fd& s, Clock::time_point deadline) REQUIRES(mu);
  [[noreturn]] void lost(const std::string& op, const IoResult& r, Clock::time_point since)
      REQUIRES(mu);

  Until until(Clock::time_point deadline) const { return {deadline, wake_.get()}; }
  // interrupt() came during this call (the wake descriptor is readable).
  bool woken() const;

  Fd fd_ GUARDED_BY(mu);
  // An eventfd every wait of a call polls besides its socket: interrupt()
  // writes it, the next call's start reads it empty. (A shutdown(2) of the
  // socket would not end the pause between connect attempts, and could hit
  // a descriptor number closed and reused meanwhile.)
  Fd wake_;
  std::atomic<bool> closed_{false};
  // Each direction's frame tags, keyed by the current connection's handshake.
  std::optional<FrameTagger> to_server_ GUARDED_BY(mu);
  std::optional<FrameTagger> to_client_ GUARDED_BY(mu);
};

}  // namespace dlaunch::comm::detail
