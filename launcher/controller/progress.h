// Progress: one status line on stderr, rewritten in place while a job starts
// (hosts connected, agents ready, ranks running). Only when stderr is a
// terminal; cleared before anything else is printed and once the job runs.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace dlaunch {

class Progress {
 public:
  // enabled: the caller's choice (typically isatty(2)); write: how text
  // reaches stderr (the controller's console, which never blocks).
  Progress(bool enabled, std::function<void(std::string_view)> write)
      : enabled_(enabled), write_(std::move(write)) {}
  void show(const std::string& line);
  void clear();
  bool visible() const { return visible_; }

 private:
  bool enabled_;
  std::function<void(std::string_view)> write_;
  bool visible_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace dlaunch
