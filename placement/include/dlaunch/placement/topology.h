// A node's topology as placement needs it, read with hwloc: packages, NUMA
// nodes, L3 caches, cores and their hardware threads (PUs), and the GPUs and
// NICs hwloc sees on the PCI bus with the NUMA node they hang off.
//
// hwloc honours HWLOC_SYNTHETIC (a synthetic description such as
// "package:2 numa:1 core:4 pu:1") and HWLOC_XMLFILE (a topology exported from
// another machine): load_topology() reads those like hwloc does, and then
// says that the topology is not this machine's (this_system false), so that
// nothing is bound by it (docs/placement.md).
//
// The summary is plain data: the mapping (mapping.h) is a pure function of it.
#pragma once

#include <string>
#include <vector>

#include "dlaunch/error.h"

namespace dlaunch::placement {

struct CoreInfo {
  int package = 0;       // index into the node's packages (logical order)
  int numa = 0;          // index into Topology::numa
  int l3 = -1;           // index of its L3 cache; -1: the node has none
  std::vector<int> pus;  // OS indices of its hardware threads (what sched_setaffinity takes)
};

struct NumaInfo {
  int os_index = 0;      // what set_mempolicy takes
  std::vector<int> pus;  // OS indices
};

// A PCI device hwloc sees: a GPU (3D controller, or a device with a CUDA,
// NVML, OpenCL or DRM child) or a NIC (network class, or a network or
// OpenFabrics child).
struct DeviceInfo {
  std::string name;        // its OS device names ("cuda0", "eth0 mlx5_0"), else the PCI id
  std::string pci_bus_id;  // "0000:65:00.0"
  int numa = -1;           // index into Topology::numa of the closest NUMA node; -1: unknown
};

struct Topology {
  int packages = 0;
  int l3caches = 0;
  std::vector<NumaInfo> numa;
  std::vector<CoreInfo> cores;   // in hwloc's logical order
  std::vector<DeviceInfo> gpus;  // in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID)
  std::vector<DeviceInfo> nics;
  // False for a synthetic or XML topology: placement is computed and
  // reported, but nothing is bound by it.
  bool this_system = true;
  // Where it came from: "this machine", "synthetic topology (HWLOC_SYNTHETIC=...)",
  // "XML topology (HWLOC_XMLFILE=...)".
  std::string source = "this machine";
  // Why this machine's topology is simpler than the machine (hwloc could not
  // read it, or showed CPUs this process may not use); empty: hwloc's view.
  std::string note;

  int pu_count() const;
};

// The topology hwloc sees for this process (HWLOC_SYNTHETIC, HWLOC_XMLFILE
// honoured), with its I/O devices (GPUs, NICs) when with_io: PCI discovery
// costs time, and only --bind-to gpu and summaries need it. Failure: hwloc's
// reason (a bad synthetic string, an unreadable XML file).
Result<Topology> load_topology(bool with_io = true);
// For tests and tools: from a synthetic description or an XML file.
Result<Topology> load_synthetic_topology(const std::string& description);
Result<Topology> load_xml_topology(const std::string& path);

// One line: "2 packages, 4 NUMA nodes, 32 cores, 64 hardware threads, L3 x4;
// GPUs: 0000:65:00.0 (cuda0) NUMA 0; NICs: ..." (with the source when it is
// not this machine).
std::string summary(const Topology& topo);

}  // namespace dlaunch::placement
