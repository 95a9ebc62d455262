#include "dlaunch/placement/topology.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <hwloc.h>

namespace dlaunch::placement {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

std::vector<int> os_indices(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(i);
  return out;
}

std::string bus_id(hwloc_obj_t pci) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", pci->attr->pcidev.domain,
                pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
  return buf;
}

// The index in numa of the NUMA node closest to an I/O object: the first
// node of its first non-I/O ancestor's nodeset.
int numa_of_io(hwloc_topology_t t, hwloc_obj_t io, const std::vector<NumaInfo>& numa) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, io);
  if (anc == nullptr || anc->nodeset == nullptr) return -1;
  const int first = hwloc_bitmap_first(anc->nodeset);
  if (first < 0 || hwloc_bitmap_iszero(anc->nodeset) != 0) return -1;
  // A device under the machine itself (every node): not known to be near any.
  if (hwloc_bitmap_weight(anc->nodeset) > 1 && numa.size() > 1) return -1;
  for (std::size_t i = 0; i < numa.size(); ++i) {
    if (numa[i].os_index == first) return static_cast<int>(i);
  }
  return -1;
}

// GPU or NIC, by the PCI class and the OS devices under it.
enum class DeviceKind { kOther, kGpu, kNic };
DeviceKind kind_of(hwloc_obj_t pci, std::string& names) {
  const unsigned cls = pci->attr->pcidev.class_id;
  DeviceKind kind = DeviceKind::kOther;
  if (cls == 0x0302 || cls == 0x0380 || (cls == 0x0300 && pci->attr->pcidev.vendor_id == 0x10de))
    kind = DeviceKind::kGpu;
  if ((cls >> 8) == 0x02 || cls == 0x0c06) kind = DeviceKind::kNic;  // network, InfiniBand
  for (hwloc_obj_t c = pci->io_first_child; c != nullptr; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE) continue;
    const auto t = c->attr->osdev.type;
    if (t == HWLOC_OBJ_OSDEV_COPROC || t == HWLOC_OBJ_OSDEV_GPU) kind = DeviceKind::kGpu;
    if (t == HWLOC_OBJ_OSDEV_NETWORK || t == HWLOC_OBJ_OSDEV_OPENFABRICS) kind = DeviceKind::kNic;
    if (t != HWLOC_OBJ_OSDEV_BLOCK && c->name != nullptr) {
      if (!names.empty()) names += ' ';
      names += c->name;
    }
  }
  return kind;
}

Topology summarize(hwloc_topology_t t) {
  Topology out;
  out.this_system = hwloc_topology_is_thissystem(t) != 0;
  out.packages = std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE));
  out.l3caches = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_L3CACHE);
  const int nnuma = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nnuma; ++i) {
    hwloc_obj_t n = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    out.numa.push_back({.os_index = static_cast<int>(n->os_index), .pus = os_indices(n->cpuset)});
  }
  if (out.numa.empty()) {
    out.numa.push_back({.os_index = 0, .pus = os_indices(hwloc_topology_get_topology_cpuset(t))});
  }
  // Cores; a machine whose hwloc shows none (some VMs) gets one per PU.
  const bool have_cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE) > 0;
  const hwloc_obj_type_t core_type = have_cores ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  const int ncores = hwloc_get_nbobjs_by_type(t, core_type);
  for (int i = 0; i < ncores; ++i) {
    hwloc_obj_t c = hwloc_get_obj_by_type(t, core_type, static_cast<unsigned>(i));
    CoreInfo core;
    core.pus = os_indices(c->cpuset);
    if (core.pus.empty()) continue;  // a disallowed core
    if (hwloc_obj_t p = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, c))
      core.package = static_cast<int>(p->logical_index);
    if (hwloc_obj_t l3 = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_L3CACHE, c))
      core.l3 = static_cast<int>(l3->logical_index);
    for (std::size_t n = 0; n < out.numa.size(); ++n) {
      const auto& pus = out.numa[n].pus;
      if (std::find(pus.begin(), pus.end(), core.pus.front()) != pus.end()) {
        core.numa = static_cast<int>(n);
        break;
      }
    }
    out.cores.push_back(std::move(core));
  }
  for (hwloc_obj_t pci = hwloc_get_next_pcidev(t, nullptr); pci != nullptr;
       pci = hwloc_get_next_pcidev(t, pci)) {
    std::string names;
    const DeviceKind kind = kind_of(pci, names);
    if (kind == DeviceKind::kOther) continue;
    DeviceInfo d{.name = names.empty() ? bus_id(pci) : names,
                 .pci_bus_id = bus_id(pci),
                 .numa = numa_of_io(t, pci, out.numa)};
    (kind == DeviceKind::kGpu ? out.gpus : out.nics).push_back(std::move(d));
  }
  auto by_bus = [](const DeviceInfo& a, const DeviceInfo& b) {
    return a.pci_bus_id < b.pci_bus_id;
  };
  std::sort(out.gpus.begin(), out.gpus.end(), by_bus);
  std::sort(out.nics.begin(), out.nics.end(), by_bus);
  return out;
}

// The CPUs the kernel lets this process run on (sched_getaffinity: taskset,
// a cpuset cgroup, srun --cpu-bind), in OS index order; empty if unknown.
std::vector<int> allowed_cpus() {
  for (int n = 1024; n <= (1 << 16); n *= 2) {
    cpu_set_t* set = CPU_ALLOC(n);
    if (set == nullptr) return {};
    const std::size_t size = CPU_ALLOC_SIZE(n);
    if (::sched_getaffinity(0, size, set) == 0) {
      std::vector<int> out;
      for (int cpu = 0; cpu < n; ++cpu) {
        if (CPU_ISSET_S(cpu, size, set)) out.push_back(cpu);
      }
      CPU_FREE(set);
      return out;
    }
    const int err = errno;
    CPU_FREE(set);
    if (err != EINVAL) return {};
  }
  return {};
}

// This machine when hwloc cannot describe it: one package and one NUMA node
// holding the CPUs this process may run on, each taken as a core of its own.
Result<Topology> flat_topology(const std::string& why) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.empty()) {
    return Result<Topology>::failure(why + ", and the CPUs this process may use are unknown");
  }
  Topology out;
  out.packages = 1;
  out.numa.push_back({.os_index = 0, .pus = cpus});
  for (int cpu : cpus) out.cores.push_back({.package = 0, .numa = 0, .l3 = -1, .pus = {cpu}});
  out.note = why + "; taken as the " + std::to_string(cpus.size()) +
             " CPU(s) this process may run on, one core each";
  return out;
}

// Keeps, of hwloc's view of this machine, only the CPUs the kernel lets this
// process run on: hwloc reads the cpuset cgroup, the kernel also applies the
// affinity inherited from whoever started us. A core left with none goes.
void keep_allowed(Topology& topo, const std::vector<int>& allowed) {
  auto drop = [&allowed](std::vector<int>& pus) {
    std::erase_if(pus, [&allowed](int pu) {
      return !std::binary_search(allowed.begin(), allowed.end(), pu);
    });
  };
  std::size_t before = 0;
  for (auto& core : topo.cores) {
    before += core.pus.size();
    drop(core.pus);
  }
  std::erase_if(topo.cores, [](const CoreInfo& c) { return c.pus.empty(); });
  for (auto& n : topo.numa) drop(n.pus);
  const auto kept = static_cast<std::size_t>(topo.pu_count());
  if (kept < before) {
    topo.note = "hwloc showed " + std::to_string(before - kept) +
                " CPU(s) this process may not run on; left out";
  }
  // CPUs the kernel gives us that hwloc did not show: a core of their own in
  // the first package and NUMA node, rather than never used.
  std::vector<int> missing;
  for (int cpu : allowed) {
    const bool shown = std::any_of(topo.cores.begin(), topo.cores.end(), [cpu](const CoreInfo& c) {
      return std::find(c.pus.begin(), c.pus.end(), cpu) != c.pus.end();
    });
    if (!shown) missing.push_back(cpu);
  }
  if (missing.empty() || topo.cores.empty()) return;
  for (int cpu : missing) {
    topo.cores.push_back({.package = 0, .numa = 0, .l3 = -1, .pus = {cpu}});
    if (!topo.numa.empty()) topo.numa.front().pus.push_back(cpu);
  }
  if (!topo.numa.empty()) std::sort(topo.numa.front().pus.begin(), topo.numa.front().pus.end());
  if (!topo.note.empty()) topo.note += "; ";
  topo.note += "hwloc did not show " + std::to_string(missing.size()) +
               " CPU(s) this process may run on; each taken as a core";
}

enum class Source { kEnvironment, kSynthetic, kXml };

Result<Topology> load(Source source, const std::string& arg, bool with_io) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return Result<Topology>::failure("hwloc: cannot initialize");
  TopologyPtr t(raw);
  // PCI devices (GPUs, NICs) are filtered out unless asked for.
  if (with_io) hwloc_topology_set_io_types_filter(t.get(), HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  // Only what placement needs: PCI devices come from Linux's sysfs (hwloc's
  // linuxio), not from libpciaccess (the "pci" plugin: the same devices
  // again, and it never frees what it allocates, which LeakSanitizer reports
  // in every sanitized run); GPUs are told by their PCI class and CUDA/NVML
  // devices, not by OpenCL (whose ICD loader starts every vendor's driver)
  // or OpenGL (which opens an X display).
  for (const char* name : {"pci", "opencl", "gl"})
    hwloc_topology_set_components(t.get(), HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, name);
  // Which CPUs may be used is the kernel's answer (below), not hwloc's
  // reading of the cpuset cgroup, which a sandbox can make disagree.
  if (source == Source::kEnvironment)
    hwloc_topology_set_flags(t.get(), HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  if (source == Source::kSynthetic && hwloc_topology_set_synthetic(t.get(), arg.c_str()) != 0) {
    return Result<Topology>::failure("'" + arg + "' is not a synthetic topology hwloc reads",
                                     ErrorKind::kInput);
  }
  if (source == Source::kXml && hwloc_topology_set_xml(t.get(), arg.c_str()) != 0) {
    return Result<Topology>::failure(
        "cannot read the XML topology '" + arg + "': " + std::strerror(errno), ErrorKind::kInput);
  }
  const bool from_env =
      std::getenv("HWLOC_SYNTHETIC") != nullptr || std::getenv("HWLOC_XMLFILE") != nullptr;
  if (hwloc_topology_load(t.get()) != 0) {
    if (source == Source::kEnvironment && !from_env) {
      return flat_topology(std::string("hwloc cannot read this machine's topology: ") +
                           std::strerror(errno));
    }
    std::string what = "hwloc cannot read the topology";
    if (const char* s = std::getenv("HWLOC_SYNTHETIC");
        s != nullptr && source == Source::kEnvironment)
      what += " of HWLOC_SYNTHETIC='" + std::string(s) + "'";
    if (const char* x = std::getenv("HWLOC_XMLFILE");
        x != nullptr && source == Source::kEnvironment)
      what += " of HWLOC_XMLFILE='" + std::string(x) + "'";
    return Result<Topology>::failure(what + ": " + std::strerror(errno), ErrorKind::kInput);
  }
  // This machine: only the CPUs this process may run on (taskset, srun
  // --cpu-bind, a container's cpuset), so that no rank is placed outside them.
  // Asked of the kernel for this thread, not through /proc (which, in a
  // sandbox, may be another PID namespace's).
  const bool this_system =
      source == Source::kEnvironment && hwloc_topology_is_thissystem(t.get()) != 0;
  const std::vector<int> allowed = this_system ? allowed_cpus() : std::vector<int>{};
  if (!allowed.empty()) {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set != nullptr) {
      for (int cpu : allowed) hwloc_bitmap_set(set, static_cast<unsigned>(cpu));
      hwloc_topology_restrict(t.get(), set, 0);  // on failure keep_allowed below still filters
      hwloc_bitmap_free(set);
    }
  }
  Topology topo = summarize(t.get());
  if (this_system) {
    if (!allowed.empty()) keep_allowed(topo, allowed);
    if (topo.cores.empty()) {
      return flat_topology("hwloc's topology holds none of the CPUs this process may run on");
    }
  }
  if (topo.cores.empty()) return Result<Topology>::failure("hwloc found no CPU in the topology");
  if (source == Source::kSynthetic) {
    topo.source = "synthetic topology (" + arg + ")";
  } else if (source == Source::kXml) {
    topo.source = "XML topology (" + arg + ")";
  } else if (!topo.this_system) {
    const char* s = std::getenv("HWLOC_SYNTHETIC");
    const char* x = std::getenv("HWLOC_XMLFILE");
    topo.source = s != nullptr   ? "synthetic topology (HWLOC_SYNTHETIC=" + std::string(s) + ")"
                  : x != nullptr ? "XML topology (HWLOC_XMLFILE=" + std::string(x) + ")"
                                 : "a topology that is not this machine's";
  }
  if (source != Source::kEnvironment) topo.this_system = false;
  return topo;
}

}  // namespace

int Topology::pu_count() const {
  int n = 0;
  for (const auto& c : cores) n += static_cast<int>(c.pus.size());
  return n;
}

Result<Topology> load_topology(bool with_io) { return load(Source::kEnvironment, {}, with_io); }
Result<Topology> load_synthetic_topology(const std::string& description) {
  return load(Source::kSynthetic, description, true);
}
Result<Topology> load_xml_topology(const std::string& path) {
  return load(Source::kXml, path, true);
}

std::string summary(const Topology& topo) {
  auto plural = [](std::size_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  std::string out =
      plural(static_cast<std::size_t>(topo.packages), "package", "packages") + ", " +
      plural(topo.numa.size(), "NUMA node", "NUMA nodes") + ", " +
      plural(topo.cores.size(), "core", "cores") + ", " +
      plural(static_cast<std::size_t>(topo.pu_count()), "hardware thread", "hardware threads");
  if (topo.l3caches > 0) out += ", " + plural(static_cast<std::size_t>(topo.l3caches), "L3", "L3s");
  auto devices = [&](const std::vector<DeviceInfo>& list, const char* what) {
    out += std::string("; ") + what + ": ";
    if (list.empty()) {
      out += "none seen";
      return;
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (i > 0) out += ", ";
      out += list[i].name;
      if (list[i].name != list[i].pci_bus_id) out += " (" + list[i].pci_bus_id + ")";
      out += list[i].numa >= 0
                 ? " NUMA " +
                       std::to_string(topo.numa[static_cast<std::size_t>(list[i].numa)].os_index)
                 : " NUMA ?";
    }
  };
  devices(topo.gpus, "GPUs");
  devices(topo.nics, "NICs");
  if (!topo.this_system) out += "; " + topo.source;
  if (!topo.note.empty()) out += "; " + topo.note;
  return out;
}

}  // namespace dlaunch::placement
