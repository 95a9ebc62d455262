#include "memory_store.h"

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <fmt/format.h>

namespace dltest {

namespace comm = dlaunch::comm;
using comm::StoreError;
using dlaunch::comm::ErrorKind;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

struct MemoryStoreNetwork::Table {
  std::string secret;
  std::map<std::string, std::string> kv;
  std::map<std::string, std::uint64_t> owner;  // set_while_connected: key -> connection
  std::uint64_t changes = 0;
  std::vector<std::string> quiet;
  bool closed = false;
  std::uint16_t first_port = 0;
};

namespace {

bool wildcard(const std::string& a) { return a == "0.0.0.0" || a == "::" || a.empty(); }

std::string secs(Clock::duration d) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
}

}  // namespace

std::uint16_t MemoryStoreNetwork::bind(const std::string& address, std::uint16_t port,
                                       const std::shared_ptr<Table>& table) {
  if (port == 0) {
    for (;;) {
      port = next_port_++;
      const bool taken = std::any_of(listeners_.begin(), listeners_.end(),
                                     [&](const Listener& l) { return l.port == port; });
      if (!taken) break;
    }
  }
  for (const Listener& l : listeners_) {
    if (l.port == port && (l.address == address || wildcard(l.address) || wildcard(address))) {
      throw std::system_error(std::make_error_code(std::errc::address_in_use),
                              fmt::format("cannot listen at {}:{}", address, port));
    }
  }
  listeners_.push_back({address, port, table});
  return port;
}

std::shared_ptr<MemoryStoreNetwork::Table> MemoryStoreNetwork::listening(const std::string& address,
                                                                         std::uint16_t port) const {
  for (const Listener& l : listeners_) {
    if (l.port == port && (l.address == address || wildcard(l.address))) return l.table;
  }
  return nullptr;
}

void MemoryStoreNetwork::changed(Table& t, const std::string& key) {
  const bool quiet = std::any_of(t.quiet.begin(), t.quiet.end(), [&](const std::string& p) {
    return key.compare(0, p.size(), p) == 0;
  });
  if (!quiet) ++t.changes;
  cv_.notify_all();
}

// A client's connection. Calls are serialised (call_mu_) as comm::Store's
// are; each waits on the network's condition under its mutex.
class MemoryClient final : public dlaunch::rdzv::StoreClient {
 public:
  MemoryClient(MemoryStoreNetwork& net, comm::StoreOptions opts)
      : net_(net), opts_(std::move(opts)) {
    address_ = fmt::format("{}:{}", opts_.host, opts_.port);
    std::unique_lock<std::mutex> lock(net_.mu_);
    connect(lock, "connect");
  }
  ~MemoryClient() override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    drop();
  }
  MemoryClient(const MemoryClient&) = delete;
  MemoryClient& operator=(const MemoryClient&) = delete;

  void set(const std::string& key, const std::string& value) override {
    Call c(*this, "set");
    c.t().kv[key] = value;
    c.t().owner.erase(key);
    net_.changed(c.t(), key);
  }
  void set_while_connected(const std::string& key, const std::string& value) override {
    Call c(*this, "set_while_connected");
    c.t().kv[key] = value;
    c.t().owner[key] = connection_;
    net_.changed(c.t(), key);
  }
  std::string get(const std::string& key) override { return get(key, opts_.timeout); }
  std::string get(const std::string& key, milliseconds timeout) override {
    Call c(*this, fmt::format("get(\"{}\")", key));
    c.await({key}, timeout);
    return c.t().kv[key];
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    Call c(*this, fmt::format("add(\"{}\")", key));
    std::int64_t n = 0;
    const auto it = c.t().kv.find(key);
    if (it != c.t().kv.end()) {
      const std::string& v = it->second;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || end != v.data() + v.size()) {
        throw StoreError(ErrorKind::kUsage, address_, c.op(), "the value is not an integer");
      }
    }
    n += delta;
    c.t().kv[key] = std::to_string(n);
    c.t().owner.erase(key);
    net_.changed(c.t(), key);
    return n;
  }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    Call c(*this, fmt::format("compare_set(\"{}\")", key));
    const auto it = c.t().kv.find(key);
    std::string now = it == c.t().kv.end() ? std::string() : it->second;
    if (now != expected) return now;
    c.t().kv[key] = desired;
    c.t().owner.erase(key);
    net_.changed(c.t(), key);
    return desired;
  }
  bool check(const std::vector<std::string>& keys) override {
    Call c(*this, "check");
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return c.t().kv.count(k) != 0; });
  }
  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    Call c(*this, "wait");
    c.await(keys, timeout);
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override {
    Call c(*this, "multi_get");
    c.await(keys, opts_.timeout);
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(c.t().kv[k]);
    return out;
  }
  // As comm::Store's: shuts the connection down; a parked call fails now.
  void interrupt() override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    ++interrupts_;
    // A call parked now fails (it sees interrupts_ move); with none parked,
    // the next call is the one that finds the connection gone.
    if (table_ != nullptr) unseen_loss_ = true;
    drop();
    net_.cv_.notify_all();
  }

 private:
  // One call: serialised with the others, connected (again) at its start,
  // holding the network's lock throughout (released only while it waits).
  class Call {
   public:
    Call(MemoryClient& c, std::string op)
        : c_(c),
          serial_(c.call_mu_),
          lock_(c.net_.mu_),
          op_(std::move(op)),
          interrupts_(c.interrupts_) {
      c_.connect(lock_, op_);
    }
    MemoryStoreNetwork::Table& t() { return *c_.table_; }
    const std::string& op() const { return op_; }
    // Until every key exists; kTimedOut after `timeout`; a closed store or
    // an interrupt ends the connection and fails the call.
    void await(const std::vector<std::string>& keys, milliseconds timeout) {
      const auto start = Clock::now();
      const auto until = start + timeout;
      for (;;) {
        if (c_.interrupts_ != interrupts_) {
          c_.unseen_loss_ = false;
          throw StoreError(ErrorKind::kEnvironment, c_.address_, op_,
                           "failed: connection lost: interrupted");
        }
        if (c_.table_ == nullptr || c_.table_->closed) {
          c_.drop();
          throw StoreError(ErrorKind::kEnvironment, c_.address_, op_,
                           "failed: connection lost: the store closed the connection");
        }
        const bool all = std::all_of(keys.begin(), keys.end(), [&](const std::string& k) {
          return c_.table_->kv.count(k) != 0;
        });
        if (all) return;
        if (Clock::now() >= until) {
          throw StoreError(ErrorKind::kEnvironment, c_.address_, op_,
                           "timed out after " + secs(Clock::now() - start))
              .with_cause(StoreError::Cause::kTimedOut);
        }
        c_.net_.cv_.wait_until(lock_, until);
      }
    }

   private:
    MemoryClient& c_;
    std::lock_guard<std::mutex> serial_;
    std::unique_lock<std::mutex> lock_;
    std::string op_;
    std::uint64_t interrupts_;
  };

  // Under the network's lock: a live connection, or a new one to whatever
  // listens at the endpoint within connect_timeout.
  void connect(std::unique_lock<std::mutex>& lock, const std::string& op) {
    if (unseen_loss_) {
      unseen_loss_ = false;
      throw StoreError(ErrorKind::kEnvironment, address_, op,
                       "failed: connection lost: interrupted");
    }
    if (table_ != nullptr && !table_->closed) return;
    if (table_ != nullptr) {
      // The store went while this connection was idle: this call is the one
      // that finds out (and fails); the next connects again.
      drop();
      throw StoreError(ErrorKind::kEnvironment, address_, op,
                       "failed: connection lost: the store closed the connection");
    }
    const auto until = Clock::now() + opts_.connect_timeout;
    std::shared_ptr<MemoryStoreNetwork::Table> t;
    while ((t = net_.listening(opts_.host, opts_.port)) == nullptr) {
      if (net_.cv_.wait_until(lock, until) == std::cv_status::timeout &&
          net_.listening(opts_.host, opts_.port) == nullptr) {
        throw StoreError(ErrorKind::kEnvironment, address_, op,
                         fmt::format("cannot connect within {}: connection refused",
                                     secs(opts_.connect_timeout)));
      }
    }
    if (t->secret != opts_.secret) {
      throw StoreError(ErrorKind::kUsage, address_, op,
                       "the peer could not prove that it knows the job's secret")
          .with_cause(StoreError::Cause::kPeerUnproven);
    }
    table_ = std::move(t);
    connection_ = net_.next_connection_++;
  }
  // Under the network's lock: the connection closes; its keys go.
  void drop() {
    if (table_ == nullptr) return;
    MemoryStoreNetwork::Table& t = *table_;
    for (auto it = t.owner.begin(); it != t.owner.end();) {
      if (it->second == connection_) {
        t.kv.erase(it->first);
        const std::string key = it->first;
        it = t.owner.erase(it);
        net_.changed(t, key);
      } else {
        ++it;
      }
    }
    table_.reset();
  }

  MemoryStoreNetwork& net_;
  comm::StoreOptions opts_;
  std::string address_;
  std::mutex call_mu_;
  std::shared_ptr<MemoryStoreNetwork::Table> table_;  // under net_.mu_
  std::uint64_t connection_ = 0;
  std::uint64_t interrupts_ = 0;
  bool unseen_loss_ = false;  // interrupted with no call parked: the next one fails
};

class MemoryHost final : public dlaunch::rdzv::StoreHost {
 public:
  MemoryHost(MemoryStoreNetwork& net, const comm::StoreServerOptions& opts) : net_(net) {
    if (opts.secret.empty()) throw std::invalid_argument("the store's secret is empty");
    table_ = std::make_shared<MemoryStoreNetwork::Table>();
    table_->secret = opts.secret;
    for (const auto& [k, v] : opts.initial_keys) table_->kv[k] = v;
    std::lock_guard<std::mutex> lock(net_.mu_);
    table_->first_port = net_.bind(opts.bind_address, opts.port, table_);
    ++net_.hosted_;
  }
  // The store goes: nothing listens for it, every connection to it is lost.
  ~MemoryHost() override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    table_->closed = true;
    auto& ls = net_.listeners_;
    ls.erase(std::remove_if(ls.begin(), ls.end(), [&](const auto& l) { return l.table == table_; }),
             ls.end());
    net_.cv_.notify_all();
  }
  MemoryHost(const MemoryHost&) = delete;
  MemoryHost& operator=(const MemoryHost&) = delete;

  std::uint16_t port() const override { return table_->first_port; }
  std::uint16_t listen_also(const std::string& bind_address, std::uint16_t port) override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    return net_.bind(bind_address, port, table_);
  }
  void stop_listening_on_first_port() override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    auto& ls = net_.listeners_;
    ls.erase(std::remove_if(
                 ls.begin(), ls.end(),
                 [&](const auto& l) { return l.table == table_ && l.port == table_->first_port; }),
             ls.end());
  }
  std::vector<std::optional<std::string>> peek(
      const std::vector<std::string>& keys) const override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    for (const auto& k : keys) {
      const auto it = table_->kv.find(k);
      out.push_back(it == table_->kv.end() ? std::nullopt : std::optional(it->second));
    }
    return out;
  }
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    table_->kv[key] = value;
    table_->owner.erase(key);
    net_.changed(*table_, key);
  }
  std::uint64_t changes() const override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    return table_->changes;
  }
  std::uint64_t wait_change(std::uint64_t seen, Clock::time_point until) const override {
    std::unique_lock<std::mutex> lock(net_.mu_);
    net_.cv_.wait_until(lock, until, [&] { return table_->changes != seen; });
    return table_->changes;
  }
  void quiet_prefixes(std::vector<std::string> prefixes) override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    table_->quiet = std::move(prefixes);
  }
  void wake_watchers() override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    ++table_->changes;
    net_.cv_.notify_all();
  }

 private:
  MemoryStoreNetwork& net_;
  std::shared_ptr<MemoryStoreNetwork::Table> table_;
};

std::unique_ptr<dlaunch::rdzv::StoreHost> MemoryStoreNetwork::host(
    const comm::StoreServerOptions& opts) {
  return std::make_unique<MemoryHost>(*this, opts);
}

std::unique_ptr<dlaunch::rdzv::StoreClient> MemoryStoreNetwork::connect(
    const comm::StoreOptions& opts) {
  return std::make_unique<MemoryClient>(*this, opts);
}

std::optional<std::string> MemoryStoreNetwork::value_at(std::uint16_t port,
                                                        const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Listener& l : listeners_) {
    if (l.port != port) continue;
    const auto it = l.table->kv.find(key);
    if (it != l.table->kv.end()) return it->second;
  }
  return std::nullopt;
}

bool MemoryStoreNetwork::listens(std::uint16_t port) {
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(listeners_.begin(), listeners_.end(),
                     [&](const Listener& l) { return l.port == port; });
}

int MemoryStoreNetwork::stores_hosted() {
  std::lock_guard<std::mutex> lock(mu_);
  return hosted_;
}

}  // namespace dltest
