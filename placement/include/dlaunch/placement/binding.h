// Binding: a rank's placement turned into what spawn() applies in the child
// between fork and exec (SpawnOptions::cpus and ::mem_nodes: sched_setaffinity
// and set_mempolicy, precomputed in the parent), and the variables the rank
// gets (OMP_NUM_THREADS), so that its threads and first-touch memory start
// where they belong.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dlaunch/placement/mapping.h"
#include "dlaunch/process.h"

namespace dlaunch::placement {

// Fills opts.cpus and opts.mem_nodes from p when the topology is this
// machine's and p binds; memory goes preferably to the rank's NUMA node when
// its CPUs lie in exactly one (elsewhere the kernel's first touch already
// allocates on the node of the CPU). Returns whether it bound.
bool apply(const Topology& topo, const RankPlacement& p, SpawnOptions& opts);

// OMP_NUM_THREADS=<cores> for a bound rank, unless the user set it (in
// user_env, the rank's variables from the head, or base, the agent's own).
// omp_default: user_env's OMP_NUM_THREADS is the head's default (torchrun's
// 1 per rank), which a bound rank's cores replace. Empty when not bound or
// set by the user.
std::vector<std::pair<std::string, std::string>> binding_env(
    const RankPlacement& p, bool bound,
    const std::vector<std::pair<std::string, std::string>>& user_env,
    const std::vector<std::string>& base, bool omp_default = false);

}  // namespace dlaunch::placement
