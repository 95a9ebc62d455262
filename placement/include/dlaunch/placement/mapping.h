// Mapping: which CPUs (and NUMA node for memory) each rank of a node gets.
// A pure function of the topology summary (topology.h), the policy and the
// number of ranks, so that it is tested on synthetic topologies and gives the
// head's --dry-run the same answer as the agent.
//
// The policy is spelt as mpirun spells it (docs/placement.md):
//   --bind-to none|hwthread|core|l3cache|numa|package|gpu
//   --map-by slot|core|l3cache|numa|package[:PE=n]
// Ranks are laid out over allocation units (cores; PUs for --bind-to
// hwthread), PE units per rank, in the order --map-by says: slot and core
// fill the units in order, the others deal ranks round-robin over the
// objects of that kind. Each rank is then bound to the objects of the
// --bind-to kind that hold its units. More ranks than units / PE is
// oversubscription: an error unless --oversubscribe, which binds round-robin
// (the units are dealt again from the start, and the report says so).
// --bind-to gpu: every rank gets the CPUs of the NUMA node of its GPU;
// gpu-package, gpu-l3cache and gpu-exclusive as BindTo says.
#pragma once

#include <string>
#include <vector>

#include "dlaunch/error.h"
#include "dlaunch/placement/topology.h"

namespace dlaunch::placement {

// kGpu and its kin bind each rank near its GPU (torchrun's --numa-binding):
// kGpu the GPU's NUMA node (torchrun's node), kGpuPackage its package
// (socket), kGpuL3cache one of the L3 caches of its NUMA node, dealt among
// the ranks whose GPUs share that node (core-complex), kGpuExclusive a share
// of the NUMA node's cores of its own (exclusive).
enum class BindTo {
  kNone,
  kHwthread,
  kCore,
  kL3cache,
  kNuma,
  kPackage,
  kGpu,
  kGpuPackage,
  kGpuL3cache,
  kGpuExclusive
};
// One of the GPU bindings above.
bool binds_to_gpu(BindTo b);
enum class MapBy { kSlot, kCore, kL3cache, kNuma, kPackage };

const char* to_string(BindTo b);
const char* to_string(MapBy m);

struct Policy {
  BindTo bind_to = BindTo::kNone;
  MapBy map_by = MapBy::kSlot;
  int pe = 1;  // units (cores, or PUs under hwthread) per rank
  bool oversubscribe = false;
  // The binding nobody asked for (--mpi's default): when the node is
  // oversubscribed it is dropped rather than refused, as mpirun does.
  bool defaulted = false;
};

// What the user gave (empty: not given). Errors name the option (exit 2).
struct PolicyRequest {
  std::string bind_to;
  std::string map_by;
  bool oversubscribe = false;
  bool mpi = false;  // the default follows mpirun under --mpi, torchrun otherwise
};

// The policy for a node running `ranks` ranks (of the whole job, on that
// machine). Defaults (docs/placement.md): --map-by alone binds to its object
// (core for slot); --bind-to alone maps by its object (slot for core and
// hwthread); neither: none, or under --mpi core for <= 2 ranks and package
// otherwise (mpirun's rule). Throws nothing; failure: why, naming the option.
Result<Policy> resolve_policy(const PolicyRequest& req, int ranks);
// Checks the spelling only (the head, before anything starts).
Result<Policy> parse_policy(const PolicyRequest& req);

struct RankPlacement {
  std::vector<int> cpus;        // OS indices of its PUs, ascending; empty: not bound
  std::vector<int> numa;        // OS indices of the NUMA nodes those PUs are in
  int cores = 0;                // whole or partial cores in cpus (OMP_NUM_THREADS)
  int gpu = -1;                 // --bind-to gpu: its index in Topology::gpus
  bool oversubscribed = false;  // dealt again from the first unit
};

struct Placement {
  std::vector<RankPlacement> ranks;  // one per rank of the machine, in order
  std::string note;                  // e.g. why nothing is bound; empty when all is as asked
};

// gpu_of_rank: for --bind-to gpu, the index (into topo.gpus) of each rank's
// GPU, -1 when unknown (then rank i gets GPU i % gpus); may be shorter than
// ranks. Failure (ErrorKind::kInput): oversubscription without
// --oversubscribe, --bind-to gpu with no GPU, an object the node lacks.
Result<Placement> map_ranks(const Topology& topo, const Policy& policy, int ranks,
                            const std::vector<int>& gpu_of_rank = {});

// "0-3,8,10-11".
std::string cpu_list(const std::vector<int>& cpus);
// mpirun's picture: one [...] per package, '/' between cores, one character
// per hardware thread: 'B' bound, '.' not. "[BB/../..][../../..]".
std::string cpu_picture(const Topology& topo, const std::vector<int>& cpus);

// CUDA_VISIBLE_DEVICES and a local rank: the index of the rank's GPU in
// topo-order (PCI bus order) when the list is numeric (local_rank modulo its
// length picks the entry), else local_rank; -1 when the entry is not a
// number (a UUID: unknown without NVML).
int visible_gpu_index(const std::string& cuda_visible_devices, int local_rank);

}  // namespace dlaunch::placement
