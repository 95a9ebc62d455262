#include "store/table.h"

#include <algorithm>
#include <charconv>

namespace dlaunch::comm::detail {

const std::string* Table::find(std::string_view key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

void Table::set(std::string_view key, std::string_view value) {
  if (auto it = data_.find(key); it != data_.end()) {
    if (it->second == value) return;  // the same value: no change to tell
    it->second.assign(value);
    changed(key);
    return;
  }
  data_.emplace(std::string(key), std::string(value));
  created(key);
  changed(key);
}

Result<int64_t> Table::add(std::string_view key, int64_t delta) {
  int64_t current = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    const std::string& text = it->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
    if (ec != std::errc() || end != text.data() + text.size()) {
      return failure("the stored value is not a decimal integer");
    }
  }
  int64_t result = 0;
  if (__builtin_add_overflow(current, delta, &result)) {
    return failure("the counter would overflow int64");
  }
  if (it != data_.end()) {
    it->second = std::to_string(result);
  } else {
    data_.emplace(std::string(key), std::to_string(result));
    created(key);
  }
  changed(key);
  return result;
}

std::string Table::compare_set(std::string_view key, std::string_view expected,
                               std::string_view desired) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (!expected.empty()) return {};
    set(key, desired);
    return std::string(desired);
  }
  if (it->second == expected) {
    it->second.assign(desired);
    changed(key);
  }
  return it->second;
}

bool Table::erase(std::string_view key) {
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  data_.erase(it);
  changed(key);
  return true;
}

std::vector<std::string> Table::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (!data_.contains(k)) out.push_back(k);
  }
  return out;
}

bool Table::advance(Waiter& w) {
  while (w.cursor_ < w.keys.size() && data_.contains(w.keys[w.cursor_])) ++w.cursor_;
  if (w.cursor_ == w.keys.size()) {
    // Keys passed earlier may have been deleted since: one full pass settles it.
    auto gone = std::find_if(w.keys.begin(), w.keys.end(),
                             [this](const std::string& k) { return !data_.contains(k); });
    if (gone == w.keys.end()) return true;
    w.cursor_ = static_cast<size_t>(gone - w.keys.begin());
  }
  waiting_[w.keys[w.cursor_]].push_back(&w);
  w.registered_ = true;
  return false;
}

bool Table::park(Waiter& w) {
  cancel(w);
  w.cursor_ = 0;
  return advance(w);
}

void Table::cancel(Waiter& w) {
  if (!w.registered_) return;
  w.registered_ = false;
  auto it = waiting_.find(w.keys[w.cursor_]);
  if (it == waiting_.end()) return;
  std::erase(it->second, &w);
  if (it->second.empty()) waiting_.erase(it);
}

size_t Table::parked() const {
  size_t n = 0;
  for (const auto& [key, list] : waiting_) n += list.size();
  return n;
}

void Table::created(std::string_view key) {
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  // Detached first: waiters re-register under other keys while we iterate.
  std::vector<Waiter*> list = std::move(it->second);
  waiting_.erase(it);
  for (Waiter* w : list) {
    w->registered_ = false;
    if (advance(*w)) w->on_ready();
  }
}

}  // namespace dlaunch::comm::detail
