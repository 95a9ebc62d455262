#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "comm/store.h"
#include "store/connection.h"

namespace dlaunch::comm {

using detail::Answer;
using detail::Clock;
using detail::Op;
using detail::quote;
using detail::quote_list;
using detail::seconds;
using detail::Status;
using detail::Writer;
using dlaunch::MutexLock;
using std::chrono::milliseconds;

StoreError::StoreError(ErrorKind kind, std::string address, std::string operation,
                       const std::string& message)
    : Error(kind, (address.empty() ? std::string("store: ") : "store " + address + ": ") +
                      operation + (message.empty() ? "" : " " + message)),
      address_(std::move(address)),
      operation_(std::move(operation)) {}

StoreError::StoreError(std::string address, std::string operation, const std::string& message)
    : StoreError(ErrorKind::kEnvironment, std::move(address), std::move(operation), message) {}

struct Store::Impl : detail::Connection {
  using Connection::Connection;
};

Store::Store(StoreOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {
  if (impl_->opts.secret.empty())
    impl_->fail(ErrorKind::kUsage, "connect", "failed: the secret is empty");
  if (!impl_->opts.connect_at_construction) return;
  MutexLock lock(impl_->mu);
  impl_->connect();
}

Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

Store Store::from_env() {
  auto var = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') {
      throw StoreError(
          ErrorKind::kUsage, "", "from_env()",
          std::string("failed: ") + name + " is not set (is this process started by dlaunch?)");
    }
    return v;
  };
  StoreOptions opts;
  opts.host = var("DLAUNCH_STORE_ADDR");
  std::string port = var("DLAUNCH_STORE_PORT");
  int value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value < 1 || value > 65535) {
    throw StoreError(ErrorKind::kUsage, "", "from_env()",
                     "failed: DLAUNCH_STORE_PORT='" + port + "' is not a port number (1-65535)");
  }
  opts.port = static_cast<uint16_t>(value);
  opts.secret = var("DLAUNCH_STORE_SECRET");
  if (const char* path = std::getenv("DLAUNCH_STORE_PATH"); path != nullptr) opts.unix_path = path;
  return Store(std::move(opts));
}

const std::string& Store::address() const { return impl_->address; }

void Store::interrupt() { impl_->interrupt(); }

void Store::close() { impl_->close(); }

void Store::connect() {
  MutexLock lock(impl_->mu);
  impl_->ensure_connected("connect");
}

void Store::set(const std::string& key, const std::string& value) { multi_set({key}, {value}); }

void Store::set_while_connected(const std::string& key, const std::string& value) {
  std::string op = "set_while_connected(" + quote(key) + ")";
  MutexLock lock(impl_->mu);
  impl_->ensure_connected(op);
  impl_->limit(op, "key", key.size(), impl_->max_key);
  impl_->limit(op, "value", value.size(), impl_->max_value);
  Answer a = impl_->call(op, Writer(uint8_t(Op::set_owned)).str(key).str(value).finish(),
                         impl_->io_deadline());
  if (a.status != Status::ok || !a.reader().finish()) impl_->bad_answer(op);
}

std::string Store::get(const std::string& key) { return get(key, impl_->opts.timeout); }

std::string Store::get(const std::string& key, milliseconds timeout) {
  std::string op = "get(" + quote(key) + ")";
  // Held until the answer is decoded: a malformed one drops the connection,
  // which another thread may be about to use.
  MutexLock lock(impl_->mu);
  impl_->ensure_connected(op);
  Answer a = impl_->await(op, Op::get, {key}, timeout);
  if (a.status == Status::timeout) impl_->timed_out(op, a, detail::clamp_wait(timeout), 1);
  auto rd = a.reader();
  std::string value(rd.bytes());
  if (!rd.finish()) impl_->bad_answer(op);
  return value;
}

int64_t Store::add(const std::string& key, int64_t delta) {
  std::string op = "add(" + quote(key) + ", " + std::to_string(delta) + ")";
  MutexLock lock(impl_->mu);
  impl_->ensure_connected(op);
  impl_->limit(op, "key", key.size(), impl_->max_key);
  Answer a =
      impl_->call(op, Writer(uint8_t(Op::add)).str(key).i64(delta).finish(), impl_->io_deadline());
  auto rd = a.reader();
  int64_t v = rd.i64();
  if (a.status != Status::ok || !rd.finish()) impl_->bad_answer(op);
  return v;
}

std::string Store::compare_set(const std::string& key, const std::string& expected,
                               const std::string& desired) {
  std::string op = "compare_set(" + quote(key) + ")";
  MutexLock lock(impl_->mu);
  impl_->ensure_connected(op);
  impl_->limit(op, "key", key.size(), impl_->max_key);
  impl_->limit(op, "expected value", expected.size(), impl_->max_value);
  impl_->limit(op, "desired value", desired.size(), impl_->max_value);
  Answer a =
      impl_->call(op, Writer(uint8_t(Op::compare_set)).str(key).str(expected).str(desired).finish(),
                  impl_->io_deadline());
  auto rd = a.reader();
  std::string value(rd.bytes());
  if (a.status != Status::ok || !rd.finish()) impl_->bad_answer(op);
  return value;
}

bool Store::check(const std::vector<std::string>& keys) {
  std::string op = "check(" + quote_list(keys) + ")";
  MutexLock lock(impl_->mu);
  impl_->ensure_connected(op);
  Writer w(static_cast<uint8_t>(Op::check));
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    impl_->limit(op, "key", k.size(), impl_->max_key);
    w.str(k);
  }
  Answer a = impl_->call(op, w.finish(), impl_->io_deadline());
  auto rd = a.reader();
  bool all = rd.u8() != 0;
  if (a.status != Status::ok || !rd.finish()) impl_->bad_answer(op);
  return all;
}

void Store::wait(const std::vector<std::string>& keys) { wait(keys, impl_->opts.timeout); }

void Store::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::string op = "wait(" + quote_list(keys) + ")";
  MutexLock lock(impl_->mu);
  impl_->ensure_connected(op);
  Answer a = impl_->await(op, Op::wait, keys, timeout);
  if (a.status == Status::timeout)
    impl_->timed_out(op, a, detail::clamp_wait(timeout), keys.size());
  if (!a.reader().finish()) impl_->bad_answer(op);
}

bool Store::delete_key(const std::string& key) {
  std::string op = "delete_key(" + quote(key) + ")";
  MutexLock lock(impl_->mu);
  impl_->ensure_connected(op);
  impl_->limit(op, "key", key.size(), impl_->max_key);
  Answer a = impl_->call(op, Writer(uint8_t(Op::erase)).str(key).finish(), impl_->io_deadline());
  auto rd = a.reader();
  bool existed = rd.u8() != 0;
  if (a.status != Status::ok || !rd.finish()) impl_->bad_answer(op);
  return existed;
}

int64_t Store::num_keys() {
  const std::string op = "num_keys()";
  MutexLock lock(impl_->mu);
  impl_->ensure_connected(op);
  Answer a = impl_->call(op, Writer(uint8_t(Op::num_keys)).finish(), impl_->io_deadline());
  auto rd = a.reader();
  int64_t n = rd.i64();
  if (a.status != Status::ok || !rd.finish()) impl_->bad_answer(op);
  return n;
}

std::vector<std::string> Store::multi_get(const std::vector<std::string>& keys) {
  std::string op = "multi_get(" + quote_list(keys) + ")";
  MutexLock lock(impl_->mu);
  impl_->ensure_connected(op);
  Answer a = impl_->await(op, Op::multi_get, keys, impl_->opts.timeout);
  if (a.status == Status::timeout)
    impl_->timed_out(op, a, detail::clamp_wait(impl_->opts.timeout), keys.size());
  auto rd = a.reader();
  std::vector<std::string> values(keys.size());
  for (auto& v : values) v = rd.bytes();
  if (!rd.finish()) impl_->bad_answer(op);
  return values;
}

void Store::multi_set(const std::vector<std::string>& keys,
                      const std::vector<std::string>& values) {
  std::string op =
      keys.size() == 1 ? "set(" + quote(keys[0]) + ")" : "multi_set(" + quote_list(keys) + ")";
  if (keys.size() != values.size()) {
    impl_->fail(ErrorKind::kUsage, op,
                "failed: " + std::to_string(keys.size()) + " keys but " +
                    std::to_string(values.size()) + " values");
  }
  MutexLock lock(impl_->mu);
  impl_->ensure_connected(op);
  Writer w(static_cast<uint8_t>(Op::multi_set));
  w.u32(static_cast<uint32_t>(keys.size()));
  for (size_t i = 0; i < keys.size(); ++i) {
    impl_->limit(op, "key", keys[i].size(), impl_->max_key);
    impl_->limit(op, "value", values[i].size(), impl_->max_value);
    w.str(keys[i]).str(values[i]);
  }
  Answer a = impl_->call(op, w.finish(), impl_->io_deadline());
  if (a.status != Status::ok || !a.reader().finish()) impl_->bad_answer(op);
}

void Store::barrier(const std::string& name, int world_size, milliseconds timeout) {
  std::string op = "barrier(" + quote(name) + ", " + std::to_string(world_size) + ")";
  if (world_size < 1) impl_->fail(ErrorKind::kUsage, op, "failed: world_size must be at least 1");
  auto start = Clock::now();
  // One counter for all rounds; round g is arrivals g*world_size+1 .. (g+1)*world_size.
  std::string base = "/dlaunch/barrier/" + name + "/";
  int64_t n = add(base + "count", 1);
  int64_t round = (n - 1) / world_size;
  std::string done = base + "done/" + std::to_string(round);
  if (n % world_size == 0) {
    set(done, "");
    // Everyone of the previous round has arrived in this one, so nobody waits on its key.
    if (round > 0) delete_key(base + "done/" + std::to_string(round - 1));
    return;
  }
  auto left = std::chrono::duration_cast<milliseconds>(timeout - (Clock::now() - start));
  bool released = false;
  {
    MutexLock lock(impl_->mu);  // not across add() below, which takes it itself
    impl_->ensure_connected(op);
    released =
        impl_->await(op, Op::wait, {done}, std::max(left, milliseconds(0))).status == Status::ok;
  }
  if (released) return;
  int64_t arrived = std::min<int64_t>(add(base + "count", 0) - round * world_size, world_size);
  impl_->fail(ErrorKind::kEnvironment, op,
              "timed out after " + seconds(timeout) + ": " + std::to_string(arrived) + " of " +
                  std::to_string(world_size) + " arrived");
}

}  // namespace dlaunch::comm
