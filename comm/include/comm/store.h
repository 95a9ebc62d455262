// dlaunch::comm::Store: the job's rendezvous key-value store. The node-0
// agent hosts one StoreServer for the whole job; every worker connects a Store
// client to it (DLAUNCH_STORE_ADDR / DLAUNCH_STORE_PORT / DLAUNCH_STORE_SECRET).
//
// Namespace: dlaunch::comm. The global alias `comm` for it is deprecated, kept
// for this release only (removed in the next); define DLAUNCH_COMM_NO_ALIAS
// before including to drop it now.
//
// Contract:
//  - Mutual authentication: on every connection the server proves that it
//    knows the job's secret before the client sends or believes anything,
//    then the client proves it before the server serves anything (HMAC-SHA256
//    over both sides' fresh nonces; the secret never crosses the wire). Every
//    frame after that carries a tag keyed to that connection alone, so nothing
//    recorded or relayed from one connection is accepted on another
//    (protocol: docs/store.md).
//  - The client trusts no size from the wire: an answer over
//    StoreOptions::max_answer_bytes, or a malformed one, fails the call and
//    drops the connection before anything is allocated for it.
//  - Store is thread-safe: requests on its one connection are serialised by an
//    internal mutex, so a thread parked in get() holds up the others; give each
//    thread its own Store when that matters.
//  - Every failure is a StoreError (a comm::Error, comm/error.h) whose what()
//    names the store address, the operation and what was awaited, e.g.
//    `store 10.0.0.1:29400: get("rank3/addr") timed out after 30.0 s`. The
//    one exception: OpenSSL failing to compute an HMAC, a comm::Error of kind
//    kInternal ("HMAC-SHA256 failed").
//  - After a lost connection the next call reconnects (within connect_timeout);
//    the call that saw the loss fails rather than being retried, since add()
//    and friends are not idempotent.
//  - StoreServer is single-threaded: it lives on the caller's io_context and
//    touches its state only from that loop. A malformed or oversized frame
//    closes that connection only. Its constructor throws std::invalid_argument
//    or std::system_error (below), not comm::Error.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "comm/error.h"

namespace dlaunch::comm {

// StoreError: a Store call (or its construction) failed. Kinds
// (Error::kind()):
// - kUsage: the caller's request or configuration: a key, value or request
//   over the store's limits, multi_set with as many keys as values,
//   barrier() with world_size < 1, add() on a value that is not an integer or
//   that would overflow, an empty secret, a missing or invalid
//   DLAUNCH_STORE_* variable (from_env()), or the store rejecting the secret.
//   Recoverable: nothing reached the store, or it refused the request and kept
//   the connection; a Store that exists stays usable.
// - kEnvironment: the store or the way to it: no connection within
//   connect_timeout, a peer that is not a dlaunch store, a connection lost, no
//   answer in time, a malformed answer, or a get/wait/multi_get/barrier whose
//   keys did not come in time. Recoverable: the Store reconnects on its next
//   call; the failed call may or may not have taken effect on the store (add()
//   is not idempotent). A timed-out barrier name is spent (docs/store.md).
// - kInternal: not thrown as a StoreError today (see the contract above).
//
// cause() tells the handshake failures that mean "what answers at that
// address is not this job's store" apart from the rest: a launcher must not
// join such a peer (docs/per-node.md), whatever kind the error has.
class StoreError : public Error {
 public:
  enum class Cause {
    kOther,
    // The peer could not prove that it knows the secret: a store with
    // another secret, or an impostor holding the address (kind kUsage).
    kPeerUnproven,
    kNotAStore,     // it does not speak the store's protocol (kEnvironment)
    kOtherVersion,  // a dlaunch store of another protocol version (kUsage)
    // A store on this machine run by another user (not root): refused
    // before a byte is exchanged (StoreOptions::refuse_other_local_users).
    kOtherUser,
    // The store answered that a get/wait/multi_get's keys did not come in
    // time; the connection is fine (kEnvironment).
    kTimedOut,
    // No answer came within the call's deadline (the store's own wait, if
    // any, plus a grace): a store too slow to answer (a saturated machine)
    // or out of reach; the connection is dropped (kEnvironment).
    kNoAnswer,
  };
  // address: "host:port" (empty when not known yet); operation: e.g. `get("k")`.
  StoreError(ErrorKind kind, std::string address, std::string operation,
             const std::string& message);
  // Kind kEnvironment.
  [[deprecated(
      "say whose problem it is: StoreError(ErrorKind, address, operation, message)")]] StoreError(std::string
                                                                                                      address,
                                                                                                  std::string
                                                                                                      operation,
                                                                                                  const std::
                                                                                                      string&
                                                                                                          message);
  const std::string& address() const { return address_; }
  const std::string& operation() const { return operation_; }
  Cause cause() const { return cause_; }
  StoreError& with_cause(Cause c) {
    cause_ = c;
    return *this;
  }

 private:
  std::string address_;
  std::string operation_;
  Cause cause_ = Cause::kOther;
};

struct StoreOptions {
  std::string host;
  uint16_t port = 0;
  std::string secret;
  // The store's Unix socket, tried first when set (a process on the store's
  // machine; DLAUNCH_STORE_PATH): host and port are the way when it fails.
  std::string unix_path;
  // Connect with retry and jittered exponential backoff until this deadline.
  std::chrono::milliseconds connect_timeout{60000};
  // false: the constructor only checks the options; connect() or the first
  // call connects, so that close() ends the first connect too (a Store
  // driven by a thread of its own).
  bool connect_at_construction = true;
  // Default deadline for get/wait/multi_get, and the I/O deadline of every request.
  std::chrono::milliseconds timeout{300000};
  // The largest answer accepted (a multi_get of many large values); a frame
  // announcing more fails the call before its body is read.
  std::size_t max_answer_bytes = std::size_t{1} << 30;
  // A store on this machine whose socket belongs to another user (neither
  // this one nor root) is not this job's: refused at once, before the
  // greeting is read. The job's store is always run by the job's user (its
  // agent or launcher); where it is not, e.g. an open rendezvous with no
  // secret, this keeps another local user from standing in for it.
  bool refuse_other_local_users = true;
};

class Store {
 public:
  // Connects and authenticates, or throws StoreError.
  explicit Store(StoreOptions opts);
  // DLAUNCH_STORE_ADDR, DLAUNCH_STORE_PORT, DLAUNCH_STORE_SECRET; a missing or
  // invalid one is a StoreError naming the variable.
  static Store from_env();
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  ~Store();

  const std::string& address() const;  // "host:port"
  // Connects now unless connected: what the constructor does, and what the
  // next call would (StoreOptions::connect_at_construction).
  void connect();

  void set(const std::string& key, const std::string& value);
  // A set that lasts while this connection does: the server erases the key
  // when the connection closes (this process exits or is killed, or the
  // network drops it), unless it was set anew since. A reconnect does not
  // bring it back: set it again. How a watcher tells at once that a peer is
  // gone (etcd's leases, ZooKeeper's ephemeral nodes, in small).
  void set_while_connected(const std::string& key, const std::string& value);
  // Waits until the key exists, up to opts.timeout (or `timeout`).
  std::string get(const std::string& key);
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  // Atomic counter stored as decimal text; a missing key starts at 0.
  int64_t add(const std::string& key, int64_t delta);
  // Sets key to desired if its current value equals expected (a missing key
  // matches an empty expected); returns the value after the operation (a
  // missing key reads as "").
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired);
  bool check(const std::vector<std::string>& keys);  // all exist? (no waiting)
  void wait(const std::vector<std::string>& keys);   // until all exist, opts.timeout
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  bool delete_key(const std::string& key);  // true if it existed
  int64_t num_keys();                       // includes barrier bookkeeping keys
  // Waits (opts.timeout) until all exist; values in the order of keys.
  std::vector<std::string> multi_get(const std::vector<std::string>& keys);
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values);
  // All `world_size` callers with the same name return together, or StoreError
  // on timeout naming how many arrived. Reusable: each round is a generation
  // (see docs/store.md); after a timeout the name is spent.
  void barrier(const std::string& name, int world_size, std::chrono::milliseconds timeout);
  // Makes the call under way in another thread fail at once with a
  // StoreError, whatever it waits for: an answer (a parked get, say), a
  // connect or the pause between two attempts (not a host name's lookup).
  // The connection is dropped; the next call connects again. Thread-safe;
  // one that comes between two calls is forgotten.
  void interrupt();
  // interrupt(), and every later call fails at once: for a Store another
  // thread may be calling when its owner is about to destroy it.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct StoreServerOptions {
  std::string bind_address = "0.0.0.0";
  uint16_t port = 0;  // 0: any free port
  std::string secret;
  size_t max_key_bytes = 4096;
  size_t max_value_bytes = 64 << 20;
  size_t max_frame_bytes = (64 << 20) + 8192;
  size_t max_connections = 65536;
  // A connection that has not authenticated by then is dropped. A client of
  // the job answers the challenge within milliseconds.
  std::chrono::milliseconds auth_timeout{5000};
  // Connections still in the challenge, in all and from one remote address:
  // past either limit the oldest such connection is dropped for the new one.
  // A flood of connections that never authenticate (a scan, a hostile host)
  // then cannot hold the descriptors the job's own clients need: they
  // authenticate long before a flood has made this many new ones after them.
  // This user's own processes on this machine (the job's local ranks, which
  // may all connect at once) are not held to the per-address limit.
  size_t max_unauthenticated = 4096;
  size_t max_unauthenticated_per_source = 1024;
  // Connections from this machine whose socket belongs to another user are
  // closed at once, before the challenge: workers run as the agent's user,
  // so nothing of the job is theirs, and their connections cannot crowd out
  // the job's own (a loopback flood would share their source address).
  bool refuse_other_local_users = true;
  // Also listen on a Unix socket at this path (its folder must be private to
  // this user): processes of this user on this machine connect there
  // (StoreOptions::unix_path, DLAUNCH_STORE_PATH), out of reach of other
  // users and of any flood at the TCP port. Removed by close().
  std::string unix_path;
  // Keys the store holds from the moment it listens: no client can find it
  // without them (e.g. who hosts it, for a client that cannot tell by the
  // address it connected to).
  std::vector<std::pair<std::string, std::string>> initial_keys;
};

namespace detail {
struct ServerState;
class Table;
}  // namespace detail

class StoreServer {
 public:
  // Binds and listens; std::invalid_argument for an empty secret,
  // std::system_error naming the address and port if it cannot listen.
  StoreServer(boost::asio::io_context& io, StoreServerOptions opts);
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  ~StoreServer();  // close()

  uint16_t port() const;
  // Also listens on bind_address:port (0: any free port) with the same
  // table and rules; returns the port. std::system_error as the constructor.
  uint16_t listen_also(const std::string& bind_address, uint16_t port);
  // Stops accepting on the port the store was made with; the connections
  // made there stay, the other ports go on (a rendezvous that met on a
  // port its job's ranks need: docs/per-node.md).
  void stop_listening_on_first_port();
  void close();  // stop accepting, drop all connections
  size_t connections() const;
  // The table, for the thread that runs the server's io_context only.
  detail::Table& table();

 private:
  std::shared_ptr<detail::ServerState> state_;
  uint16_t port_ = 0;
};

// Convenience for tests and tools: a server with its own io_context on its own thread.
class ThreadedStoreServer {
 public:
  explicit ThreadedStoreServer(StoreServerOptions opts);
  ThreadedStoreServer(const ThreadedStoreServer&) = delete;
  ThreadedStoreServer& operator=(const ThreadedStoreServer&) = delete;
  ~ThreadedStoreServer();

  uint16_t port() const;
  // As StoreServer's, run on the server's thread (these wait for it).
  uint16_t listen_also(const std::string& bind_address, uint16_t port);
  void stop_listening_on_first_port();
  // The process that hosts the store reads and writes its table directly,
  // without a connection of its own (a rendezvous host watching a thousand
  // members costs memory reads, not requests). peek: each key's value, or
  // nothing where it is missing. set wakes parked requests as a client's set
  // does. Both run on the server's thread and wait for it.
  std::vector<std::optional<std::string>> peek(const std::vector<std::string>& keys) const;
  void set(const std::string& key, const std::string& value);
  size_t connections() const;  // asks the server's thread and waits for the answer
  // The table's change count: it grows with every change of a value, by a
  // client or by set(). wait_change blocks until it differs from `seen` or
  // `until` passes, and returns it, so that a watcher of its own table wakes
  // on what it watches (and on its own deadlines), never on a poll period.
  uint64_t changes() const;
  uint64_t wait_change(uint64_t seen, std::chrono::steady_clock::time_point until) const;
  // Changes of keys under these prefixes do not count (a watcher that reads
  // counters at its own deadlines need not wake on each increment). Replaces
  // the list given before.
  void quiet_prefixes(std::vector<std::string> prefixes);
  // Wakes wait_change now, as a change would: the watcher's own events (a
  // stop, something of its own to do).
  void wake_watchers();
  // Also called, on the server's thread, at each change that wakes
  // wait_change (a watcher on an event loop posts to it from here: it must
  // be quick and must not call this server). Replaces the one given before;
  // nullptr for none. Once it returns, the one it replaced is not running.
  void on_change(std::function<void()> fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlaunch::comm

// Deprecated (removed in the next release): `comm` for dlaunch::comm, so that
// code written before the move still compiles. DLAUNCH_COMM_NO_ALIAS drops it.
#ifndef DLAUNCH_COMM_NO_ALIAS
namespace comm = dlaunch::comm;
#endif
