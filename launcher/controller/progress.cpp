#include "controller/progress.h"

namespace dlaunch {

void Progress::show(const std::string& line) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (visible_ && now - last_ < std::chrono::milliseconds(50)) return;  // keep terminals calm
  last_ = now;
  write_(std::string("\r\033[K").append(line));
  visible_ = true;
}

void Progress::clear() {
  if (!visible_) return;
  write_("\r\033[K");
  visible_ = false;
}

}  // namespace dlaunch
