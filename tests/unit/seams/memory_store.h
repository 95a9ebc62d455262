// MemoryStoreNetwork: the rendezvous's store seam (launcher/pernode/rdzv_store.h)
// in this process's memory, for unit tests of the rendezvous without sockets
// or other processes (gloo's HashStore and c10d's FakeStore play this part
// for theirs). Stores are hosted at "address:port" endpoints; a connection
// (connect_async) reaches the one listening at its StoreOptions' host and
// port when its first call is made.
//
// It keeps the contract the rendezvous relies on, comm's and AsyncStore's:
//  - answers come on the connection's loop, in order, never from inside the
//    call; waits and connects time out on the network's clock (set_clock: a
//    test's ManualClock), so that a test on one loop takes no real time;
//  - a get/wait whose keys do not come in time fails with cause kTimedOut and
//    keeps the connection;
//  - a connection ends when it is destroyed or when its store's host is
//    destroyed (the call parked on it fails with a connection lost); the
//    next call connects again, to whatever listens at the endpoint then,
//    within connect_timeout;
//  - a stalled store (stall()) answers nothing: a call fails with cause
//    kNoAnswer after its wait plus comm's grace, as comm's client does;
//  - a store whose secret is not the client's fails the connect with cause
//    kPeerUnproven; set_while_connected's key goes with its connection;
//  - host() throws std::system_error(address_in_use) for a taken endpoint.
// One mutex for the whole network: the tests are about the rendezvous's
// logic, not the store's concurrency.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dlaunch/clock.h"
#include "pernode/rdzv_store.h"

namespace dltest {

class MemoryAsyncClient;

class MemoryStoreNetwork final : public dlaunch::rdzv::StoreNetwork {
 public:
  MemoryStoreNetwork() = default;
  MemoryStoreNetwork(const MemoryStoreNetwork&) = delete;
  MemoryStoreNetwork& operator=(const MemoryStoreNetwork&) = delete;

  std::unique_ptr<dlaunch::rdzv::StoreHost> host(
      const dlaunch::comm::StoreServerOptions& opts) override;
  // Needs set_clock() first.
  std::unique_ptr<dlaunch::rdzv::AsyncStore> connect_async(
      boost::asio::io_context& io, const dlaunch::comm::StoreOptions& opts) override;
  // The clock the async connections' deadlines are on (used on their loop's thread).
  void set_clock(dlaunch::Clock& clock) { clock_ = &clock; }

  // What a test looks at: the value of a key in the store listening at
  // port, if any store does and holds it.
  std::optional<std::string> value_at(std::uint16_t port, const std::string& key);
  // Whether a store listens at this port (any address).
  bool listens(std::uint16_t port);
  // Stores hosted so far (a successor's take-over makes one more).
  int stores_hosted();
  // Every store answers nothing while stalled (its host's machine
  // saturated): each call waits its own wait plus comm's grace, then fails
  // with cause kNoAnswer and drops its connection.
  void stall(bool stalled);

  struct Table;  // one hosted store (memory_store.cpp)

 private:
  friend class MemoryHost;
  friend class MemoryAsyncClient;
  struct Listener {
    std::string address;
    std::uint16_t port = 0;
    std::shared_ptr<Table> table;
  };
  // Under mu_.
  std::uint16_t bind(const std::string& address, std::uint16_t port,
                     const std::shared_ptr<Table>& table);
  std::shared_ptr<Table> listening(const std::string& address, std::uint16_t port) const;
  void changed(Table& t, const std::string& key);
  // A connection closed: the keys it set while connected go.
  void drop_connection(Table& t, std::uint64_t connection);
  // Every async connection parked looks again.
  void wake_all();

  std::mutex mu_;
  std::vector<Listener> listeners_;
  std::uint16_t next_port_ = 41000;
  std::uint64_t next_connection_ = 1;
  int hosted_ = 0;
  std::set<MemoryAsyncClient*> parked_;  // async connections with a call waiting
  dlaunch::Clock* clock_ = nullptr;
};

}  // namespace dltest
