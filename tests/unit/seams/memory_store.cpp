#include "memory_store.h"

#include <algorithm>
#include <charconv>
#include <deque>
#include <functional>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
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
  std::vector<std::string> quiet;
  bool closed = false;
  bool stalled = false;  // stall(): its host answers nothing
  std::uint16_t first_port = 0;
  std::function<void()> on_change;  // StoreHost::on_change
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
  wake_all();  // a connect waiting for it
  return port;
}

std::shared_ptr<MemoryStoreNetwork::Table> MemoryStoreNetwork::listening(const std::string& address,
                                                                         std::uint16_t port) const {
  for (const Listener& l : listeners_) {
    if (l.port == port && (l.address == address || wildcard(l.address))) return l.table;
  }
  return nullptr;
}

void MemoryStoreNetwork::drop_connection(Table& t, std::uint64_t connection) {
  for (auto it = t.owner.begin(); it != t.owner.end();) {
    if (it->second == connection) {
      t.kv.erase(it->first);
      const std::string key = it->first;
      it = t.owner.erase(it);
      changed(t, key);
    } else {
      ++it;
    }
  }
}

void MemoryStoreNetwork::changed(Table& t, const std::string& key) {
  const bool quiet = std::any_of(t.quiet.begin(), t.quiet.end(), [&](const std::string& p) {
    return key.compare(0, p.size(), p) == 0;
  });
  if (!quiet && t.on_change) t.on_change();
  wake_all();
}

// An async connection: its calls queue and are made in order on its loop
// (pump()); one that must wait (keys not there yet, nothing listening yet)
// parks until the network changes or its deadline on the clock passes.
class MemoryAsyncClient final : public dlaunch::rdzv::AsyncStore {
 public:
  MemoryAsyncClient(MemoryStoreNetwork& net, boost::asio::io_context& io, comm::StoreOptions opts)
      : net_(net), io_(io), clock_(*net.clock_), opts_(std::move(opts)) {
    address_ = fmt::format("{}:{}", opts_.host, opts_.port);
    timer_ = clock_.make_timer();
  }
  ~MemoryAsyncClient() override {
    *alive_ = false;
    std::lock_guard<std::mutex> lock(net_.mu_);
    net_.parked_.erase(this);
    drop();
  }
  MemoryAsyncClient(const MemoryAsyncClient&) = delete;
  MemoryAsyncClient& operator=(const MemoryAsyncClient&) = delete;

  void set(std::string key, std::string value, Done done) override {
    ask(
        "set", {}, {},
        [key, value, done](Ctx& c) {
          c.put(key, value, false);
          return std::function<void()>([done] { done(std::nullopt); });
        },
        [done](const StoreError& e) { done(e); });
  }
  void set_while_connected(std::string key, std::string value, Done done) override {
    ask(
        "set_while_connected", {}, {},
        [key, value, done](Ctx& c) {
          c.put(key, value, true);
          return std::function<void()>([done] { done(std::nullopt); });
        },
        [done](const StoreError& e) { done(e); });
  }
  void get(std::string key, milliseconds timeout, Value done) override {
    ask(
        fmt::format("get(\"{}\")", key), {key}, timeout,
        [key, done](Ctx& c) {
          return std::function<void()>([done, v = c.t.kv[key]] { done(std::nullopt, v); });
        },
        [done](const StoreError& e) { done(e, {}); });
  }
  void add(std::string key, std::int64_t delta, Number done) override {
    ask(
        fmt::format("add(\"{}\")", key), {}, {},
        [key, delta, done](Ctx& c) {
          std::int64_t n = 0;
          const auto it = c.t.kv.find(key);
          if (it != c.t.kv.end()) {
            const std::string& v = it->second;
            const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
            if (ec != std::errc() || end != v.data() + v.size()) {
              throw StoreError(ErrorKind::kUsage, c.address, "add", "the value is not an integer");
            }
          }
          n += delta;
          c.put(key, std::to_string(n), false);
          return std::function<void()>([done, n] { done(std::nullopt, n); });
        },
        [done](const StoreError& e) { done(e, 0); });
  }
  void compare_set(std::string key, std::string expected, std::string desired,
                   Value done) override {
    ask(
        fmt::format("compare_set(\"{}\")", key), {}, {},
        [key, expected, desired, done](Ctx& c) {
          const auto it = c.t.kv.find(key);
          std::string now = it == c.t.kv.end() ? std::string() : it->second;
          if (now == expected) {
            c.put(key, desired, false);
            now = desired;
          }
          return std::function<void()>([done, now] { done(std::nullopt, now); });
        },
        [done](const StoreError& e) { done(e, {}); });
  }
  void wait(std::vector<std::string> keys, milliseconds timeout, Done done) override {
    ask(
        "wait", keys, timeout,
        [done](Ctx&) { return std::function<void()>([done] { done(std::nullopt); }); },
        [done](const StoreError& e) { done(e); });
  }
  void multi_get(std::vector<std::string> keys, Values done) override {
    ask(
        "multi_get", keys, opts_.timeout,
        [keys, done](Ctx& c) {
          std::vector<std::string> out;
          out.reserve(keys.size());
          for (const auto& k : keys) out.push_back(c.t.kv[k]);
          return std::function<void()>([done, out] { done(std::nullopt, out); });
        },
        [done](const StoreError& e) { done(e, {}); });
  }
  void check(std::vector<std::string> keys, Flag done) override {
    ask(
        "check", {}, {},
        [keys, done](Ctx& c) {
          const bool all = std::all_of(keys.begin(), keys.end(),
                                       [&](const std::string& k) { return c.t.kv.count(k) != 0; });
          return std::function<void()>([done, all] { done(std::nullopt, all); });
        },
        [done](const StoreError& e) { done(e, false); });
  }

  // From the network, under its lock, on any thread: look again on the loop.
  void poke() {
    boost::asio::post(io_, [this, alive = alive_] {
      if (*alive) pump();
    });
  }

 private:
  // What a call's action sees: the table, under the network's lock.
  struct Ctx {
    MemoryStoreNetwork& net;
    MemoryStoreNetwork::Table& t;
    std::uint64_t connection;
    const std::string& address;
    void put(const std::string& key, const std::string& value, bool owned) {
      t.kv[key] = value;
      if (owned) {
        t.owner[key] = connection;
      } else {
        t.owner.erase(key);
      }
      net.changed(t, key);
    }
  };
  struct Call {
    std::string op;
    std::vector<std::string> keys;        // parked until they all exist
    std::optional<milliseconds> timeout;  // for those keys
    std::function<std::function<void()>(Ctx&)> act;
    std::function<void(const StoreError&)> fail;
    std::optional<dlaunch::SteadyTime> keys_until;
    std::optional<dlaunch::SteadyTime> connect_until;
    std::optional<dlaunch::SteadyTime> answer_until;  // a stalled store's
  };

  void ask(std::string op, std::vector<std::string> keys, std::optional<milliseconds> timeout,
           std::function<std::function<void()>(Ctx&)> act,
           std::function<void(const StoreError&)> fail) {
    calls_.push_back({.op = std::move(op),
                      .keys = std::move(keys),
                      .timeout = timeout,
                      .act = std::move(act),
                      .fail = std::move(fail)});
    if (calls_.size() == 1) poke();
  }
  void answer(std::function<void()> a) {
    boost::asio::post(io_, [alive = alive_, a = std::move(a)] {
      if (*alive) a();
    });
  }
  void failed(StoreError e) {
    Call c = std::move(calls_.front());
    calls_.pop_front();
    answer([fail = c.fail, e = std::move(e)] { fail(e); });
  }

  // Makes the calls that can be made, in order, until one must wait.
  void pump() {
    std::unique_lock<std::mutex> lock(net_.mu_);
    net_.parked_.erase(this);
    timer_->cancel();
    const auto now = clock_.now();
    while (!calls_.empty()) {
      Call& c = calls_.front();
      if (table_ != nullptr && table_->closed) {
        drop();
        failed(StoreError(ErrorKind::kEnvironment, address_, c.op,
                          "failed: connection lost: the store closed the connection"));
        continue;
      }
      if (table_ == nullptr) {
        auto t = net_.listening(opts_.host, opts_.port);
        if (t == nullptr) {
          if (!c.connect_until) c.connect_until = now + opts_.connect_timeout;
          if (now >= *c.connect_until) {
            failed(StoreError(ErrorKind::kEnvironment, address_, c.op,
                              fmt::format("cannot connect within {}: connection refused",
                                          secs(opts_.connect_timeout))));
            continue;
          }
          park(*c.connect_until);
          return;
        }
        if (t->secret != opts_.secret) {
          failed(StoreError(ErrorKind::kUsage, address_, c.op,
                            "the peer could not prove that it knows the job's secret")
                     .with_cause(StoreError::Cause::kPeerUnproven));
          continue;
        }
        table_ = std::move(t);
        connection_ = net_.next_connection_++;
      }
      if (table_->stalled) {
        // No answer: the call's own wait plus comm's grace of 5 s, then it
        // fails as comm's does, dropping the connection.
        if (!c.answer_until)
          c.answer_until = now + c.timeout.value_or(opts_.timeout) + std::chrono::seconds(5);
        if (now >= *c.answer_until) {
          drop();
          failed(StoreError(ErrorKind::kEnvironment, address_, c.op,
                            "timed out with no answer from the store")
                     .with_cause(StoreError::Cause::kNoAnswer));
          continue;
        }
        park(*c.answer_until);
        return;
      }
      const bool all = std::all_of(c.keys.begin(), c.keys.end(),
                                   [&](const std::string& k) { return table_->kv.count(k) != 0; });
      if (!all) {
        if (!c.keys_until) c.keys_until = now + c.timeout.value_or(opts_.timeout);
        if (now >= *c.keys_until) {
          failed(StoreError(ErrorKind::kEnvironment, address_, c.op,
                            "timed out after " + secs(c.timeout.value_or(opts_.timeout)))
                     .with_cause(StoreError::Cause::kTimedOut));
          continue;
        }
        park(*c.keys_until);
        return;
      }
      Ctx ctx{net_, *table_, connection_, address_};
      try {
        auto a = c.act(ctx);
        calls_.pop_front();
        answer(std::move(a));
      } catch (const StoreError& e) {
        failed(e);
      }
    }
  }
  // Under the network's lock: until a change, or `until`.
  void park(dlaunch::SteadyTime until) {
    net_.parked_.insert(this);
    timer_->expires_at(until, [this] { pump(); });
  }
  // Under the network's lock: the connection closes; its keys go.
  void drop() {
    if (table_ == nullptr) return;
    const auto keep = std::move(table_);
    net_.drop_connection(*keep, connection_);
  }

  MemoryStoreNetwork& net_;
  boost::asio::io_context& io_;
  dlaunch::Clock& clock_;
  comm::StoreOptions opts_;
  std::string address_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::unique_ptr<dlaunch::Timer> timer_;
  std::deque<Call> calls_;
  std::shared_ptr<MemoryStoreNetwork::Table> table_;  // under net_.mu_
  std::uint64_t connection_ = 0;
};

void MemoryStoreNetwork::wake_all() {
  for (MemoryAsyncClient* c : parked_) c->poke();
}

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
    net_.wake_all();
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
  void quiet_prefixes(std::vector<std::string> prefixes) override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    table_->quiet = std::move(prefixes);
  }
  void on_change(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    table_->on_change = std::move(fn);
  }

 private:
  MemoryStoreNetwork& net_;
  std::shared_ptr<MemoryStoreNetwork::Table> table_;
};

std::unique_ptr<dlaunch::rdzv::StoreHost> MemoryStoreNetwork::host(
    const comm::StoreServerOptions& opts) {
  return std::make_unique<MemoryHost>(*this, opts);
}

std::unique_ptr<dlaunch::rdzv::AsyncStore> MemoryStoreNetwork::connect_async(
    boost::asio::io_context& io, const comm::StoreOptions& opts) {
  if (clock_ == nullptr) throw std::logic_error("MemoryStoreNetwork::connect_async: no clock");
  return std::make_unique<MemoryAsyncClient>(*this, io, opts);
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

void MemoryStoreNetwork::stall(bool stalled) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Listener& l : listeners_) l.table->stalled = stalled;
  wake_all();
}

int MemoryStoreNetwork::stores_hosted() {
  std::lock_guard<std::mutex> lock(mu_);
  return hosted_;
}

}  // namespace dltest
