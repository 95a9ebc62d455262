#include "health/node_health.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "health/nvml.h"

namespace dlaunch::agent::health {
namespace {

// The first line of a small file (a sysfs attribute), without its newline;
// nullopt-like "" with ok=false when it cannot be read.
bool read_line(const std::string& path, std::string& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::getline(in, out);
  return !in.bad();
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string megabytes(unsigned long long bytes) { return std::to_string(bytes >> 20U); }

// Free space for an unprivileged writer (f_bavail) under `dir`, in MiB.
std::string free_mb(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return std::string("error: ") + std::strerror(errno);
  return megabytes(static_cast<unsigned long long>(st.f_bavail) * st.f_frsize);
}

std::string limit(rlim_t v, unsigned shift) {
  return v == RLIM_INFINITY ? "unlimited"
                            : std::to_string(static_cast<unsigned long long>(v) >> shift);
}

// "4: ACTIVE" -> "ACTIVE"; "5: LinkUp" -> "LinkUp".
std::string after_colon(const std::string& s) {
  const auto colon = s.find(':');
  if (colon == std::string::npos) return s;
  const auto start = s.find_first_not_of(' ', colon + 1);
  return start == std::string::npos ? "" : s.substr(start);
}

void add_infiniband(Facts& facts, const std::string& root) {
  const std::string base = root + "/sys/class/infiniband";
  int ports = 0;
  for (const auto& dev : entries(base)) {
    for (const auto& port : entries(base + "/" + dev + "/ports")) {
      const std::string p = base + "/" + dev + "/ports/" + port + "/";
      const std::string key = "ib." + dev + "/" + port + ".";
      std::string v;
      facts.emplace_back(key + "state", read_line(p + "state", v) ? after_colon(v) : "unknown");
      facts.emplace_back(key + "phys_state",
                         read_line(p + "phys_state", v) ? after_colon(v) : "unknown");
      // "100 Gb/sec (4X EDR)": the number.
      facts.emplace_back(key + "rate_gbps",
                         read_line(p + "rate", v) ? v.substr(0, v.find(' ')) : "unknown");
      facts.emplace_back(key + "link_downed",
                         read_line(p + "counters/link_downed", v) ? v : "unknown");
      std::string layer;
      if (read_line(p + "link_layer", layer)) facts.emplace_back(key + "link_layer", layer);
      ++ports;
    }
  }
  facts.emplace_back("ib_ports", std::to_string(ports));
}

// Interfaces that are up, with their speed (Mb/s; "unknown" for virtual
// ones, whose speed reads as -1 or fails) and MTU.
void add_ethernet(Facts& facts, const std::string& root) {
  const std::string base = root + "/sys/class/net";
  for (const auto& dev : entries(base)) {
    if (dev == "lo") continue;
    const std::string p = base + "/" + dev + "/";
    std::string state;
    if (!read_line(p + "operstate", state) || (state != "up" && state != "unknown")) continue;
    const std::string key = "net." + dev + ".";
    std::string v;
    const bool speed = read_line(p + "speed", v) && !v.empty() && v[0] != '-';
    facts.emplace_back(key + "speed_mbps", speed ? v : "unknown");
    facts.emplace_back(key + "mtu", read_line(p + "mtu", v) ? v : "unknown");
  }
}

// XIDs in the kernel's log since boot: /dev/kmsg gives one record per read
// (non-blocking: EAGAIN at the end); a test's made-up root has a plain file.
void add_xids(Facts& facts, const std::string& root) {
  const std::string path = root + "/dev/kmsg";
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    facts.emplace_back("xid", std::string("not read: ") + path + ": " + std::strerror(errno));
    return;
  }
  std::string log;
  std::string record(8192, '\0');
  for (;;) {
    const ssize_t n = ::read(fd, record.data(), record.size());
    if (n > 0) {
      log.append(record.data(), static_cast<std::size_t>(n));
      if (log.back() != '\n') log += '\n';
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EPIPE) continue;  // a record overwritten while reading
    break;
  }
  ::close(fd);
  std::string codes;
  for (const int x : xids_in(log)) codes += (codes.empty() ? "" : ",") + std::to_string(x);
  facts.emplace_back("xid", codes.empty() ? "none" : codes);
  // How long ago each was logged, in seconds (the records' clock is the
  // monotonic one since boot), for a window of the judge's (xid_window_h).
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const long long now_us = static_cast<long long>(now.tv_sec) * 1000000LL + now.tv_nsec / 1000;
  std::string ages;
  for (const long long t : xid_times_in(log)) {
    ages += (ages.empty() ? "" : ",") +
            (t < 0 ? std::string("?") : std::to_string(std::max(0LL, now_us - t) / 1000000));
  }
  if (!ages.empty()) facts.emplace_back("xid_age_s", ages);
}

}  // namespace

namespace {

struct XidRecord {
  int code = 0;
  long long us = -1;  // microseconds since boot; -1: the line has no record fields
};

// The XID records of a kernel log: "PRIORITY,SEQUENCE,MICROSECONDS,FLAGS;
// NVRM: Xid (PCI:...): CODE, ..." (a dmesg line has no fields before the
// message). A line without a code is no XID.
std::vector<XidRecord> xid_records(const std::string& log) {
  std::vector<XidRecord> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find("NVRM: Xid");
    if (at == std::string::npos) continue;
    const auto close = line.find("):", at);
    if (close == std::string::npos) continue;
    char* end = nullptr;
    const long x = std::strtol(line.c_str() + close + 2, &end, 10);
    if (end == line.c_str() + close + 2 || x <= 0) continue;
    XidRecord r{.code = static_cast<int>(x)};
    const auto first = line.find(',');
    const auto semi = line.find(';');
    if (first != std::string::npos && semi != std::string::npos && semi < at) {
      const auto second = line.find(',', first + 1);
      if (second != std::string::npos && second < semi) {
        char* stop = nullptr;
        const long long v = std::strtoll(line.c_str() + second + 1, &stop, 10);
        if (stop != line.c_str() + second + 1 && (*stop == ',' || *stop == ';')) r.us = v;
      }
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace

std::vector<int> xids_in(const std::string& log) {
  std::vector<int> out;
  for (const auto& r : xid_records(log)) out.push_back(r.code);
  return out;
}

std::vector<long long> xid_times_in(const std::string& log) {
  std::vector<long long> out;
  for (const auto& r : xid_records(log)) out.push_back(r.us);
  return out;
}

Facts collect(const Where& where) {
  Facts f;
  utsname u{};
  f.emplace_back("kernel", ::uname(&u) == 0 ? std::string(u.release) : "unknown");
  f.emplace_back("cpus", std::to_string(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))));
  std::string v;
  f.emplace_back("load1",
                 read_line(where.root + "/proc/loadavg", v) ? v.substr(0, v.find(' ')) : "unknown");
  {
    std::ifstream in(where.root + "/proc/meminfo");
    std::string key;
    unsigned long long kb = 0;
    std::string unit;
    std::string total = "unknown";
    std::string available = "unknown";
    while (in >> key >> kb) {
      std::getline(in, unit);
      if (key == "MemTotal:") total = std::to_string(kb >> 10U);
      if (key == "MemAvailable:") available = std::to_string(kb >> 10U);
    }
    f.emplace_back("mem_total_mb", total);
    f.emplace_back("mem_available_mb", available);
  }
  f.emplace_back("workdir_free_mb", where.workdir.empty() ? "unknown" : free_mb(where.workdir));
  const char* tmp = std::getenv("TMPDIR");
  const std::string tmpdir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  f.emplace_back("tmpdir", tmpdir);
  f.emplace_back("tmpdir_free_mb", free_mb(tmpdir));
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0) {
    f.emplace_back("nofile_hard", limit(r.rlim_max, 0));
  }
  if (::getrlimit(RLIMIT_MEMLOCK, &r) == 0) {
    f.emplace_back("memlock_soft_mb", limit(r.rlim_cur, 20));
    f.emplace_back("memlock_hard_mb", limit(r.rlim_max, 20));
  }
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  f.emplace_back("time_ns",
                 std::to_string(static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec));
  add_infiniband(f, where.root);
  add_ethernet(f, where.root);
  add_xids(f, where.root);
  add_nvml_facts(f);
  return f;
}

std::string to_lines(const Facts& facts) {
  std::string out;
  for (const auto& [k, v] : facts) {
    std::string value = v;
    std::replace(value.begin(), value.end(), '\n', ' ');
    out += "health." + k + "=" + value + "\n";
  }
  return out;
}

}  // namespace dlaunch::agent::health
