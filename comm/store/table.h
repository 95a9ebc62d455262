// The store server's key-value state and the requests parked on it until keys
// appear. Single-threaded: owned by the server's event loop.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "src/result.h"

namespace dlaunch::comm::detail {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// A request waiting until every one of `keys` exists. It is listed under one
// missing key at a time, so a key's arrival costs only the waiters that need it.
class Waiter {
 public:
  virtual ~Waiter() = default;
  // Called by Table once all keys exist, already unregistered. Must not modify
  // the Table: it runs while the Table is handing out a key's waiters.
  virtual void on_ready() = 0;

  std::vector<std::string> keys;

 private:
  friend class Table;
  size_t cursor_ = 0;        // keys before it existed when last looked at
  bool registered_ = false;  // listed under keys[cursor_]
};

class Table {
 public:
  const std::string* find(std::string_view key) const;
  void set(std::string_view key, std::string_view value);
  // The new value, or why there is none: the stored value is not an integer,
  // or the sum overflows.
  Result<int64_t> add(std::string_view key, int64_t delta);
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired);
  bool erase(std::string_view key);
  size_t size() const { return data_.size(); }
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;

  // True when all keys exist already; otherwise the waiter is parked until
  // on_ready() or cancel().
  bool park(Waiter& w);
  void cancel(Waiter& w);
  size_t parked() const;  // for tests and diagnostics

  // Called with the key after every change of a value (a set of another
  // value, add, a compare_set that stored, erase), on the table's thread:
  // the hosting process's watchers wake on it instead of looking again and
  // again.
  void on_change(std::function<void(std::string_view)> f) { on_change_ = std::move(f); }

 private:
  void changed(std::string_view key) const {
    if (on_change_) on_change_(key);
  }
  void created(std::string_view key);
  bool advance(Waiter& w);

  StringMap<std::string> data_;
  StringMap<std::vector<Waiter*>> waiting_;
  std::function<void(std::string_view)> on_change_;
};

}  // namespace dlaunch::comm::detail
