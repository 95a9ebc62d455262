// The per-node rendezvous's store seam: what the rendezvous asks of the store
// it meets at, so that the same rendezvous runs over the job's authenticated
// TCP store (comm::Store and comm::ThreadedStoreServer, tcp_rdzv_network())
// or, in unit tests, over a store in this process's memory
// (tests/unit/seams/memory_store.h) with no socket and no other process.
//
// The contract is comm's (comm/store.h), restated where the rendezvous
// relies on it:
//  - Failures are comm::StoreError. A get/wait whose keys did not come in
//    time has cause kTimedOut and leaves the connection usable; a lost
//    connection fails the call that saw it, and the next call connects again
//    (within StoreOptions::connect_timeout).
//  - A peer that cannot prove the job's secret fails the connect with cause
//    kPeerUnproven (and is never joined).
//  - set_while_connected's key goes when the connection that set it closes.
//  - host() throws std::system_error (address in use, address not
//    available) when it cannot listen, as comm::StoreServer does.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/store.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace dlaunch::rdzv {

// A failed call's error (comm's StoreError, its cause as above); nothing
// when the call succeeded.
using StoreFailure = std::optional<comm::StoreError>;

// The same calls asked without waiting, for code that runs on an event loop:
// each returns at once and its answer comes later, as a call on the loop the
// store was made for (never from inside the call that asked). One
// AsyncStore is one connection: its calls are answered in the order they
// were made, and a parked get or wait holds back the calls after it, as on
// comm's connection. Destroying it drops the connection and every answer
// not yet given (none is called after).
class AsyncStore {
 public:
  using Done = std::function<void(const StoreFailure&)>;
  using Value = std::function<void(const StoreFailure&, std::string)>;
  using Number = std::function<void(const StoreFailure&, std::int64_t)>;
  using Values = std::function<void(const StoreFailure&, std::vector<std::string>)>;
  using Flag = std::function<void(const StoreFailure&, bool)>;
  virtual ~AsyncStore() = default;
  virtual void set(std::string key, std::string value, Done done) = 0;
  virtual void set_while_connected(std::string key, std::string value, Done done) = 0;
  virtual void get(std::string key, std::chrono::milliseconds timeout, Value done) = 0;
  virtual void add(std::string key, std::int64_t delta, Number done) = 0;
  virtual void compare_set(std::string key, std::string expected, std::string desired,
                           Value done) = 0;
  virtual void wait(std::vector<std::string> keys, std::chrono::milliseconds timeout,
                    Done done) = 0;
  virtual void multi_get(std::vector<std::string> keys, Values done) = 0;
  // Whether every one of `keys` is there now (no waiting).
  virtual void check(std::vector<std::string> keys, Flag done) = 0;
};

// The store as its host sees it (comm::ThreadedStoreServer's calls): the
// table read and written in place, and woken on its changes.
class StoreHost {
 public:
  virtual ~StoreHost() = default;  // stops listening and drops every connection
  virtual std::uint16_t port() const = 0;
  virtual std::uint16_t listen_also(const std::string& bind_address, std::uint16_t port) = 0;
  virtual void stop_listening_on_first_port() = 0;
  virtual std::vector<std::optional<std::string>> peek(
      const std::vector<std::string>& keys) const = 0;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Changes to keys under these prefixes call no on_change (heartbeat
  // counters: the host reads them at its deadlines).
  virtual void quiet_prefixes(std::vector<std::string> prefixes) = 0;
  // Called at each change to the table, on the store's own thread
  // (or the changing client's): it must be quick and must not call the
  // store; a watcher on an event loop posts to it. nullptr: none. Once it
  // returns, the one it replaced is not running.
  virtual void on_change(std::function<void()> fn) = 0;
};

// Where stores are hosted and reached: the network, as the rendezvous sees it.
class StoreNetwork {
 public:
  virtual ~StoreNetwork() = default;
  virtual std::unique_ptr<StoreHost> host(const comm::StoreServerOptions& opts) = 0;
  // A connection whose answers come on `io`; it connects at its first call
  // (a failed connect fails that call; the next one tries again).
  virtual std::unique_ptr<AsyncStore> connect_async(boost::asio::io_context& io,
                                                    const comm::StoreOptions& opts) = 0;
};

// The job's real store: comm::ThreadedStoreServer and comm::Store over TCP.
StoreNetwork& tcp_rdzv_network();

}  // namespace dlaunch::rdzv
