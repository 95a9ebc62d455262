#include "drivers/attempts.h"

#include <fmt/format.h>

namespace dlaunch {

std::string AttemptLog::summary(std::string_view last,
                                const std::vector<std::string>& excluded) const {
  if (ended_.empty()) return {};
  std::string out = fmt::format("dlaunch: {} attempt(s):\n", ended_.size() + 1);
  for (std::size_t k = 0; k < ended_.size(); ++k) {
    out += fmt::format("  attempt {}: {}\n", k, ended_[k]);
  }
  out += fmt::format("  attempt {}: {}\n", ended_.size(), last);
  for (const auto& e : excluded) out += "  excluded: " + e + "\n";
  return out;
}

std::string AttemptLog::failed(int status) { return fmt::format("failed, exit status {}", status); }

}  // namespace dlaunch
