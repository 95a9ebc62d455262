#include "pmix/pmix_job_info.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace dlaunch::agent {

namespace {

const char* level(placement::BindTo b) {
  using placement::BindTo;
  switch (b) {
    case BindTo::kNone:
      return "NONE";
    case BindTo::kHwthread:
      return "HWTHREAD";
    case BindTo::kCore:
      return "CORE";
    case BindTo::kL3cache:
      return "L3CACHE";
    case BindTo::kNuma:
      return "NUMA";
    case BindTo::kPackage:
      return "SOCKET";
    // Near a GPU: a set of CPUs of no one level, as mpirun's --cpu-set.
    case BindTo::kGpu:
    case BindTo::kGpuPackage:
    case BindTo::kGpuL3cache:
    case BindTo::kGpuExclusive:
      return "CPUSET";
  }
  return "NONE";
}

// "MemTotal:  13330208 kB" in a meminfo file (also "Node 0 MemTotal: ..."), in bytes.
std::uint64_t mem_total(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find("MemTotal:");
    if (at == std::string::npos) continue;
    std::istringstream rest(line.substr(at + 9));
    std::uint64_t kb = 0;
    if (rest >> kb) return kb * 1024;
  }
  return 0;
}

}  // namespace

std::string mpirun_map_by(const placement::Policy& policy) {
  using placement::MapBy;
  // The default for <= 2 ranks, one core each in slot order, is the one
  // mpirun names by core.
  if (policy.defaulted && policy.map_by == MapBy::kSlot &&
      policy.bind_to == placement::BindTo::kCore) {
    return std::string("BYCORE") + (policy.oversubscribe ? ":OVERSUBSCRIBE" : ":NOOVERSUBSCRIBE");
  }
  std::string by = "BYSLOT";
  switch (policy.map_by) {
    case MapBy::kSlot:
      by = "BYSLOT";
      break;
    case MapBy::kCore:
      by = "BYCORE";
      break;
    case MapBy::kL3cache:
      by = "BYL3CACHE";
      break;
    case MapBy::kNuma:
      by = "BYNUMA";
      break;
    case MapBy::kPackage:
      by = "BYSOCKET";
      break;
  }
  return by + (policy.oversubscribe ? ":OVERSUBSCRIBE" : ":NOOVERSUBSCRIBE");
}

std::string mpirun_bind_to(const placement::Policy& policy, bool bound) {
  std::string out = bound ? level(policy.bind_to) : "NONE";
  if (policy.defaulted) out += ":IF-SUPPORTED";
  if (policy.oversubscribe) out += ":OVERLOAD-ALLOWED";
  return out;
}

std::uint64_t physical_memory() {
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/devices/system/node", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("node", 0) == 0 && name.size() > 4 &&
        name.find_first_not_of("0123456789", 4) == std::string::npos) {
      total += mem_total(e.path() / "meminfo");
    }
  }
  return total != 0 ? total : mem_total("/proc/meminfo");
}

}  // namespace dlaunch::agent
