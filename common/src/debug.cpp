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

namespace {
// VmHWM of /proc/self/status: this program's own peak. getrusage's ru_maxrss
// is not: Linux carries it over exec, so it also holds the peak of whatever
// forked us (a Python benchmark driver: 14 MiB).
long peak_rss_kib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib;
}
}  // namespace

std::string self_usage() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  char buf[128];
  std::snprintf(buf, sizeof buf, "cpu_user_s=%.3f cpu_sys_s=%.3f maxrss_kib=%ld", secs(ru.ru_utime),
                secs(ru.ru_stime), peak_rss_kib());
  return buf;
}

}  // namespace dlaunch
