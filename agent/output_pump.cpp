#include "output_pump.h"

namespace dlaunch::agent {

std::string LineBuffer::take_lines() {
  auto last_nl = buf_.rfind('\n');
  if (last_nl == std::string::npos) return {};
  if (last_nl + 1 == buf_.size()) return std::exchange(buf_, std::string());
  std::string out = buf_.substr(0, last_nl + 1);
  buf_.erase(0, last_nl + 1);
  return out;
}

std::string LineBuffer::take_all() { return std::exchange(buf_, std::string()); }

}  // namespace dlaunch::agent
