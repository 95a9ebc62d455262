// Progress: one status line on stderr, rewritten in place while a job starts
// (hosts connected, agents ready, ranks running). Only when stderr is a
// terminal; cleared before anything else is printed and once the job runs.
#pragma once

#include <chrono>
#include <string>

namespace dlaunch {

class Progress {
 public:
  // enabled: the caller's choice (typically isatty(2)).
  explicit Progress(bool enabled) : enabled_(enabled) {}
  void show(const std::string& line);
  void clear();
  bool visible() const { return visible_; }

 private:
  bool enabled_;
  bool visible_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace dlaunch
