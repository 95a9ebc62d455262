// LineBuffer: cuts a worker's byte stream into whole lines for forwarding.
// Whole lines leave at once; a trailing partial line is held until its
// newline arrives, until flush timeout (take_all), or until it grows past
// max_partial bytes (then it leaves as a partial chunk).
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace dlaunch::agent {

class LineBuffer {
 public:
  explicit LineBuffer(std::size_t max_partial = 64 * 1024) : max_partial_(max_partial) {}

  void append(std::string_view data) { buf_.append(data); }
  // Every complete line held (each ending in '\n'); empty when none.
  std::string take_lines();
  // True when the held partial line is too long to keep waiting.
  bool partial_overflow() const { return buf_.size() >= max_partial_; }
  bool has_partial() const { return !buf_.empty(); }
  // Everything held, complete or not.
  std::string take_all();

 private:
  std::string buf_;
  std::size_t max_partial_;
};

}  // namespace dlaunch::agent
