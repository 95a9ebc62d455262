#include "dlaunch/debug.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>

namespace dlaunch {

bool debug_topic_in(std::string_view value, std::string_view topic) {
  while (!value.empty()) {
    const auto comma = value.find(',');
    const std::string_view word = value.substr(0, comma);
    if (word == topic) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

bool debug_enabled(std::string_view topic) {
  static const std::string value = [] {
    const char* v = std::getenv("DLAUNCH_DEBUG");
    return std::string(v != nullptr ? v : "");
  }();
  return debug_topic_in(value, topic);
}

std::string self_usage() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  char buf[128];
  std::snprintf(buf, sizeof buf, "cpu_user_s=%.3f cpu_sys_s=%.3f maxrss_kib=%ld", secs(ru.ru_utime),
                secs(ru.ru_stime), ru.ru_maxrss);
  return buf;
}

}  // namespace dlaunch
