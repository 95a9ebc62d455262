#include "dlaunch/proc_stat.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace dlaunch {
std::string read_proc_file(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  ::close(fd);
  return out;
}

unsigned long long process_start_ticks(long pid) {
  const std::string all = read_proc_file("/proc/" + std::to_string(pid) + "/stat");
  // The name (field 2) may hold spaces and parentheses: fields count from
  // the last ')'.
  const auto close = all.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(all.substr(close + 1));
  std::string field;
  for (int k = 3; k <= 22 && rest >> field; ++k) {
    if (k == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

std::optional<ProcessCpu> process_cpu(long pid) {
  const std::string all = read_proc_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = all.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(all.substr(close + 1));
  ProcessCpu out;
  std::string field;
  for (int k = 3; k <= 15 && rest >> field; ++k) {
    if (k == 3) out.state = field.front();
    if (k == 14 || k == 15) out.ticks += std::strtoull(field.c_str(), nullptr, 10);
    if (k == 15) return out;
  }
  return std::nullopt;
}

ProcessRef this_process() {
  const long pid = ::getpid();
  return {.pid = pid, .start_ticks = process_start_ticks(pid)};
}

ProcessRef parent_process() {
  const long pid = ::getppid();
  if (pid <= 1) return {};  // orphaned already: no parent to speak of
  return {.pid = pid, .start_ticks = process_start_ticks(pid)};
}

std::optional<std::int64_t> run_delay_ns(const ProcessRef& p) {
  if (p.pid <= 0 || p.start_ticks == 0) return std::nullopt;
  // Every thread's: /proc/<pid>/schedstat is the main thread's alone, and a
  // process may be waiting on another of its threads (a PMIx server's).
  const std::string tasks = "/proc/" + std::to_string(p.pid) + "/task";
  std::error_code ec;
  std::int64_t total = 0;
  bool any = false;
  for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
    std::istringstream in(read_proc_file(t.path().string() + "/schedstat"));
    long long on_cpu = 0;
    long long waited = 0;
    if (in >> on_cpu >> waited) {
      total += waited;
      any = true;
    }
  }
  // Read the start time after the figures: a pid reused in between shows.
  if (!any || process_start_ticks(p.pid) != p.start_ticks) return std::nullopt;
  return total;
}

std::string boot_id() {
  std::string id = read_proc_file("/proc/sys/kernel/random/boot_id");
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

}  // namespace dlaunch
