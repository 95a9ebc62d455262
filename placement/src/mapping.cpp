#include "dlaunch/placement/mapping.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

namespace dlaunch::placement {
namespace {

using PolicyResult = Result<Policy>;

PolicyResult input_error(const std::string& why) {
  return PolicyResult::failure(why, ErrorKind::kInput);
}

// One allocation unit: a core, or a PU under --bind-to hwthread.
struct Unit {
  int core = 0;  // index into Topology::cores
  std::vector<int> pus;
};

int object_of(const Topology& topo, const CoreInfo& c, MapBy m) {
  switch (m) {
    case MapBy::kPackage:
      return c.package;
    case MapBy::kNuma:
      return c.numa;
    case MapBy::kL3cache:
      return c.l3 >= 0 ? c.l3 : c.package;  // no L3: the package
    case MapBy::kSlot:
    case MapBy::kCore:
      break;
  }
  (void)topo;
  return 0;
}

// The object of the --bind-to kind, as the --map-by kind that groups the same.
MapBy as_map(BindTo b) {
  switch (b) {
    case BindTo::kL3cache:
      return MapBy::kL3cache;
    case BindTo::kNuma:
      return MapBy::kNuma;
    case BindTo::kPackage:
      return MapBy::kPackage;
    default:
      return MapBy::kCore;
  }
}

const char* unit_name(const Policy& p) {
  return p.bind_to == BindTo::kHwthread ? "hardware threads" : "cores";
}

void finish(const Topology& topo, RankPlacement& r) {
  std::sort(r.cpus.begin(), r.cpus.end());
  r.cpus.erase(std::unique(r.cpus.begin(), r.cpus.end()), r.cpus.end());
  std::set<int> numa;
  r.cores = 0;
  for (const auto& c : topo.cores) {
    bool any = false;
    for (int pu : c.pus) any = any || std::binary_search(r.cpus.begin(), r.cpus.end(), pu);
    if (!any) continue;
    ++r.cores;
    numa.insert(topo.numa[static_cast<std::size_t>(c.numa)].os_index);
  }
  r.numa.assign(numa.begin(), numa.end());
}

}  // namespace

const char* to_string(BindTo b) {
  switch (b) {
    case BindTo::kNone:
      return "none";
    case BindTo::kHwthread:
      return "hwthread";
    case BindTo::kCore:
      return "core";
    case BindTo::kL3cache:
      return "l3cache";
    case BindTo::kNuma:
      return "numa";
    case BindTo::kPackage:
      return "package";
    case BindTo::kGpu:
      return "gpu";
    case BindTo::kGpuPackage:
      return "gpu-package";
    case BindTo::kGpuL3cache:
      return "gpu-l3cache";
    case BindTo::kGpuExclusive:
      return "gpu-exclusive";
  }
  return "?";
}

bool binds_to_gpu(BindTo b) {
  return b == BindTo::kGpu || b == BindTo::kGpuPackage || b == BindTo::kGpuL3cache ||
         b == BindTo::kGpuExclusive;
}

const char* to_string(MapBy m) {
  switch (m) {
    case MapBy::kSlot:
      return "slot";
    case MapBy::kCore:
      return "core";
    case MapBy::kL3cache:
      return "l3cache";
    case MapBy::kNuma:
      return "numa";
    case MapBy::kPackage:
      return "package";
  }
  return "?";
}

PolicyResult parse_policy(const PolicyRequest& req) {
  Policy p;
  p.oversubscribe = req.oversubscribe;
  if (!req.bind_to.empty()) {
    static const std::map<std::string, BindTo> kBind = {{"none", BindTo::kNone},
                                                        {"hwthread", BindTo::kHwthread},
                                                        {"core", BindTo::kCore},
                                                        {"l3cache", BindTo::kL3cache},
                                                        {"numa", BindTo::kNuma},
                                                        {"package", BindTo::kPackage},
                                                        {"socket", BindTo::kPackage},
                                                        {"gpu", BindTo::kGpu},
                                                        {"gpu-package", BindTo::kGpuPackage},
                                                        {"gpu-socket", BindTo::kGpuPackage},
                                                        {"gpu-l3cache", BindTo::kGpuL3cache},
                                                        {"gpu-exclusive", BindTo::kGpuExclusive}};
    auto it = kBind.find(req.bind_to);
    if (it == kBind.end()) {
      return input_error("--bind-to '" + req.bind_to +
                         "' is not one of none, hwthread, core, l3cache, numa, package, gpu, "
                         "gpu-package, gpu-l3cache, gpu-exclusive");
    }
    p.bind_to = it->second;
  }
  if (!req.map_by.empty()) {
    const auto colon = req.map_by.find(':');
    const std::string object = req.map_by.substr(0, colon);
    static const std::map<std::string, MapBy> kMap = {
        {"slot", MapBy::kSlot}, {"core", MapBy::kCore},       {"l3cache", MapBy::kL3cache},
        {"numa", MapBy::kNuma}, {"package", MapBy::kPackage}, {"socket", MapBy::kPackage}};
    auto it = kMap.find(object);
    if (it == kMap.end()) {
      return input_error("--map-by '" + req.map_by + "': '" + object +
                         "' is not one of slot, core, l3cache, numa, package");
    }
    p.map_by = it->second;
    if (colon != std::string::npos) {
      const std::string mod = req.map_by.substr(colon + 1);
      const bool pe_form =
          mod.size() > 3 && (mod.compare(0, 3, "PE=") == 0 || mod.compare(0, 3, "pe=") == 0);
      const std::string n = pe_form ? mod.substr(3) : std::string();
      const bool digits =
          !n.empty() && n.size() <= 4 &&
          std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits || std::atoi(n.c_str()) < 1) {
        return input_error("--map-by '" + req.map_by + "': '" + mod +
                           "' is not PE=n (n cores per rank, a positive number)");
      }
      p.pe = std::atoi(n.c_str());
    }
  }
  if (binds_to_gpu(p.bind_to) && !req.map_by.empty()) {
    return input_error(
        "--map-by does not apply with --bind-to gpu (each rank goes to the NUMA "
        "node of its GPU)");
  }
  if (p.bind_to == BindTo::kNone && !req.bind_to.empty() && p.pe > 1) {
    return input_error("--map-by '" + req.map_by +
                       "' asks for cores per rank, but --bind-to is none");
  }
  return p;
}

PolicyResult resolve_policy(const PolicyRequest& req, int ranks) {
  auto parsed = parse_policy(req);
  if (!parsed) return parsed;
  Policy p = *parsed;
  const bool bind_given = !req.bind_to.empty();
  const bool map_given = !req.map_by.empty();
  if (!bind_given && map_given) {
    // mpirun: mapping by an object binds to it (slot and core: to the core).
    p.bind_to = p.map_by == MapBy::kL3cache   ? BindTo::kL3cache
                : p.map_by == MapBy::kNuma    ? BindTo::kNuma
                : p.map_by == MapBy::kPackage ? BindTo::kPackage
                                              : BindTo::kCore;
    if (p.pe > 1) p.bind_to = BindTo::kCore;  // PE=n: the rank's n cores
  } else if (bind_given && !map_given) {
    p.map_by = as_map(p.bind_to) == MapBy::kCore ? MapBy::kSlot : as_map(p.bind_to);
  } else if (!bind_given && !map_given && req.mpi) {
    p.bind_to = ranks <= 2 ? BindTo::kCore : BindTo::kPackage;
    p.map_by = ranks <= 2 ? MapBy::kSlot : MapBy::kPackage;
    p.defaulted = true;
  }
  return p;
}

Result<Placement> map_ranks(const Topology& topo, const Policy& policy, int ranks,
                            const std::vector<int>& gpu_of_rank) {
  using R = Result<Placement>;
  Placement out;
  out.ranks.resize(static_cast<std::size_t>(std::max(0, ranks)));
  if (policy.bind_to == BindTo::kNone || ranks <= 0) return out;
  if (binds_to_gpu(policy.bind_to)) {
    if (topo.gpus.empty()) {
      return R::failure(std::string("--bind-to ") + to_string(policy.bind_to) +
                            ": no GPU in this node's topology (" + topo.source + ")",
                        ErrorKind::kInput);
    }
    // Each rank's GPU and that GPU's NUMA node; then, per NUMA node, the
    // ranks near it in rank order (for the bindings that share one out).
    std::vector<int> numa_of(static_cast<std::size_t>(ranks), -1);
    std::map<int, std::vector<int>> near;  // NUMA node -> its ranks, in order
    for (int i = 0; i < ranks; ++i) {
      auto& r = out.ranks[static_cast<std::size_t>(i)];
      int g = static_cast<std::size_t>(i) < gpu_of_rank.size()
                  ? gpu_of_rank[static_cast<std::size_t>(i)]
                  : -1;
      if (g < 0 || g >= static_cast<int>(topo.gpus.size()))
        g = i % static_cast<int>(topo.gpus.size());
      r.gpu = g;
      numa_of[static_cast<std::size_t>(i)] = topo.gpus[static_cast<std::size_t>(g)].numa;
      if (numa_of[static_cast<std::size_t>(i)] >= 0)
        near[numa_of[static_cast<std::size_t>(i)]].push_back(i);
    }
    for (int i = 0; i < ranks; ++i) {
      auto& r = out.ranks[static_cast<std::size_t>(i)];
      const int numa = numa_of[static_cast<std::size_t>(i)];
      if (numa < 0) {
        for (const auto& c : topo.cores) r.cpus.insert(r.cpus.end(), c.pus.begin(), c.pus.end());
        out.note = "the NUMA node of a GPU is not known: its rank may use every CPU";
        finish(topo, r);
        continue;
      }
      // The NUMA node's cores, in order, and this rank's place among the
      // ranks near it.
      std::vector<const CoreInfo*> cores;
      for (const auto& c : topo.cores) {
        if (c.numa == numa) cores.push_back(&c);
      }
      const auto& peers = near[numa];
      const auto j =
          static_cast<std::size_t>(std::find(peers.begin(), peers.end(), i) - peers.begin());
      const auto add = [&r](const CoreInfo& c) {
        r.cpus.insert(r.cpus.end(), c.pus.begin(), c.pus.end());
      };
      switch (policy.bind_to) {
        case BindTo::kGpuPackage: {
          const int package = cores.empty() ? -1 : cores.front()->package;
          for (const auto& c : topo.cores) {
            if (c.package == package) add(c);
          }
          break;
        }
        case BindTo::kGpuL3cache: {
          std::vector<int> l3s;  // the NUMA node's L3 caches, in order
          for (const CoreInfo* c : cores) {
            if (c->l3 >= 0 && std::find(l3s.begin(), l3s.end(), c->l3) == l3s.end())
              l3s.push_back(c->l3);
          }
          if (l3s.empty()) {
            out.note = "no L3 cache in this topology: gpu-l3cache binds to the GPU's NUMA node";
            for (const CoreInfo* c : cores) add(*c);
            break;
          }
          const int l3 = l3s[j % l3s.size()];
          for (const CoreInfo* c : cores) {
            if (c->l3 == l3) add(*c);
          }
          break;
        }
        case BindTo::kGpuExclusive: {
          // Cores [j*n/k, (j+1)*n/k) of the node's n, for its k ranks: each
          // its own, none shared while there are at least as many cores.
          const std::size_t n = cores.size();
          const std::size_t k = peers.size();
          std::size_t from = j * n / k;
          std::size_t to = (j + 1) * n / k;
          if (from == to) {
            out.note = "more ranks than cores near a GPU: gpu-exclusive shares cores";
            from = j % std::max<std::size_t>(n, 1);
            to = std::min(n, from + 1);
          }
          for (std::size_t c = from; c < to; ++c) add(*cores[c]);
          break;
        }
        default:
          r.cpus = topo.numa[static_cast<std::size_t>(numa)].pus;
          break;
      }
      finish(topo, r);
    }
    return out;
  }

  // The units, grouped by the --map-by object (slot, core: one group).
  std::vector<Unit> units;
  for (std::size_t c = 0; c < topo.cores.size(); ++c) {
    const auto& core = topo.cores[c];
    if (policy.bind_to == BindTo::kHwthread) {
      for (int pu : core.pus) units.push_back({static_cast<int>(c), {pu}});
    } else {
      units.push_back({static_cast<int>(c), core.pus});
    }
  }
  const bool grouped = policy.map_by != MapBy::kSlot && policy.map_by != MapBy::kCore;
  std::map<int, std::vector<std::size_t>> by_object;  // object -> units, in order
  for (std::size_t u = 0; u < units.size(); ++u) {
    const int obj = grouped ? object_of(topo, topo.cores[static_cast<std::size_t>(units[u].core)],
                                        policy.map_by)
                            : 0;
    by_object[obj].push_back(u);
  }
  std::vector<std::vector<std::size_t>> groups;
  std::size_t capacity = 0;
  const auto pe = static_cast<std::size_t>(std::max(1, policy.pe));
  for (auto& [obj, list] : by_object) {
    capacity += list.size() / pe;
    groups.push_back(std::move(list));
  }
  const auto n = static_cast<std::size_t>(ranks);
  if (n > capacity) {
    const std::string what =
        std::to_string(ranks) + " ranks on this machine" +
        (pe > 1 ? " with " + std::to_string(pe) + " " + unit_name(policy) +
                      " each (PE=" + std::to_string(pe) + ")"
                : std::string()) +
        ", but room for " + std::to_string(capacity) + " (" + std::to_string(units.size()) + " " +
        unit_name(policy) +
        (grouped ? std::string(", by ") + to_string(policy.map_by) : std::string()) + ")";
    if (policy.defaulted) {
      // The default binding is dropped, as mpirun drops it.
      out.note = "not bound: " + what + "; the default binding needs a core per rank";
      return out;
    }
    if (!policy.oversubscribe) {
      return R::failure(std::string("--bind-to ") + to_string(policy.bind_to) + ": " + what +
                            "; give --oversubscribe to share them round-robin, or --bind-to none",
                        ErrorKind::kInput);
    }
    out.note = "oversubscribed: " + what + ", bound round-robin (--oversubscribe)";
  }
  std::vector<std::size_t> cursor(groups.size(), 0);
  std::size_t next_group = 0;
  bool wrapped = false;
  for (std::size_t i = 0; i < n; ++i) {
    // The next group (round-robin) with room for pe more units.
    std::size_t tried = 0;
    while (tried < groups.size() && cursor[next_group] + pe > groups[next_group].size()) {
      next_group = (next_group + 1) % groups.size();
      ++tried;
    }
    if (tried == groups.size()) {  // all full: deal again from the start
      std::fill(cursor.begin(), cursor.end(), 0);
      next_group = 0;
      wrapped = true;
      while (cursor[next_group] + pe > groups[next_group].size())
        next_group = (next_group + 1) % groups.size();
    }
    auto& r = out.ranks[i];
    r.oversubscribed = wrapped;
    const auto& group = groups[next_group];
    std::vector<std::size_t> mine(
        group.begin() + static_cast<std::ptrdiff_t>(cursor[next_group]),
        group.begin() + static_cast<std::ptrdiff_t>(cursor[next_group] + pe));
    cursor[next_group] += pe;
    if (grouped) next_group = (next_group + 1) % groups.size();
    if (policy.bind_to == BindTo::kCore || policy.bind_to == BindTo::kHwthread) {
      for (std::size_t u : mine)
        r.cpus.insert(r.cpus.end(), units[u].pus.begin(), units[u].pus.end());
    } else {
      // Every PU of the --bind-to objects that hold the rank's units.
      const MapBy bind_obj = as_map(policy.bind_to);
      std::set<int> objects;
      for (std::size_t u : mine)
        objects.insert(
            object_of(topo, topo.cores[static_cast<std::size_t>(units[u].core)], bind_obj));
      for (const auto& c : topo.cores) {
        if (objects.count(object_of(topo, c, bind_obj)) > 0)
          r.cpus.insert(r.cpus.end(), c.pus.begin(), c.pus.end());
      }
    }
    finish(topo, r);
  }
  if (policy.bind_to == BindTo::kL3cache && topo.l3caches == 0 && out.note.empty())
    out.note = "no L3 cache in the topology: l3cache means the package";
  return out;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string cpu_picture(const Topology& topo, const std::vector<int>& cpus) {
  std::string out;
  for (int p = 0; p < topo.packages; ++p) {
    std::string group;
    for (const auto& c : topo.cores) {
      if (c.package != p) continue;
      if (!group.empty()) group += '/';
      for (int pu : c.pus)
        group += std::find(cpus.begin(), cpus.end(), pu) != cpus.end() ? 'B' : '.';
    }
    if (!group.empty()) out += "[" + group + "]";
  }
  return out;
}

int visible_gpu_index(const std::string& cuda_visible_devices, int local_rank) {
  if (cuda_visible_devices.empty()) return local_rank;
  std::vector<std::string> entries;
  std::size_t start = 0;
  while (start <= cuda_visible_devices.size()) {
    auto end = cuda_visible_devices.find(',', start);
    if (end == std::string::npos) end = cuda_visible_devices.size();
    entries.push_back(cuda_visible_devices.substr(start, end - start));
    start = end + 1;
  }
  const std::string& e = entries[static_cast<std::size_t>(local_rank) % entries.size()];
  if (e.empty() || !std::all_of(e.begin(), e.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::atoi(e.c_str());
}

}  // namespace dlaunch::placement
