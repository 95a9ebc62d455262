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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/store.h"

namespace dlaunch::rdzv {

// A client's connection to the rendezvous store (comm::Store's calls that
// the rendezvous makes). Thread-safe: calls are serialised; interrupt() makes
// a call parked in another thread fail at once.
class StoreClient {
 public:
  virtual ~StoreClient() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual void set_while_connected(const std::string& key, const std::string& value) = 0;
  virtual std::string get(const std::string& key) = 0;  // StoreOptions::timeout
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual std::vector<std::string> multi_get(const std::vector<std::string>& keys) = 0;
  virtual void interrupt() = 0;
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
  virtual std::uint64_t changes() const = 0;
  virtual std::uint64_t wait_change(std::uint64_t seen,
                                    std::chrono::steady_clock::time_point until) const = 0;
  virtual void quiet_prefixes(std::vector<std::string> prefixes) = 0;
  virtual void wake_watchers() = 0;
};

// Where stores are hosted and reached: the network, as the rendezvous sees it.
class StoreNetwork {
 public:
  virtual ~StoreNetwork() = default;
  virtual std::unique_ptr<StoreHost> host(const comm::StoreServerOptions& opts) = 0;
  virtual std::unique_ptr<StoreClient> connect(const comm::StoreOptions& opts) = 0;
};

// The job's real store: comm::ThreadedStoreServer and comm::Store over TCP.
StoreNetwork& tcp_rdzv_network();

}  // namespace dlaunch::rdzv
