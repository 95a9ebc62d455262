#include "dlaunch/placement/binding.h"

namespace dlaunch::placement {

bool apply(const Topology& topo, const RankPlacement& p, SpawnOptions& opts) {
  if (!topo.this_system || p.cpus.empty()) return false;
  opts.cpus = p.cpus;
  // One NUMA node: memory there first (MPOL_PREFERRED: when it is full the
  // kernel takes another node rather than failing). Several: the kernel's
  // default, first touch on the node of the CPU that touches, is right.
  if (p.numa.size() == 1 && topo.numa.size() > 1) opts.mem_nodes = p.numa;
  return true;
}

std::vector<std::pair<std::string, std::string>> binding_env(
    const RankPlacement& p, bool bound,
    const std::vector<std::pair<std::string, std::string>>& user_env,
    const std::vector<std::string>& base, bool omp_default) {
  if (!bound || p.cores <= 0) return {};
  constexpr std::string_view kVar = "OMP_NUM_THREADS";
  for (const auto& [k, v] : user_env) {
    if (k == kVar && !omp_default) return {};
  }
  for (const auto& e : base) {
    if (e.size() > kVar.size() && e.compare(0, kVar.size(), kVar) == 0 && e[kVar.size()] == '=')
      return {};
  }
  return {{std::string(kVar), std::to_string(p.cores)}};
}

}  // namespace dlaunch::placement
