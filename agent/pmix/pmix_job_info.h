// The job-level and per-process PMIx keys that mpirun (Open MPI 4.1's ORTE)
// registers and dlaunch registers the same way: the mapping and binding
// policies in its words, the machine's memory, each rank's CPUs.
#pragma once

#include <cstdint>
#include <string>

#include "dlaunch/placement/mapping.h"

namespace dlaunch::agent {

// PMIX_MAPBY as mpirun gives it: "BYCORE:NOOVERSUBSCRIBE", "BYSOCKET:OVERSUBSCRIBE".
std::string mpirun_map_by(const placement::Policy& policy);
// PMIX_BINDTO as mpirun gives it: "CORE:IF-SUPPORTED" (the default binding),
// "NONE" (asked for none), ":OVERLOAD-ALLOWED" when oversubscribing. bound:
// whether this node binds its ranks at all (a default binding is dropped on
// an oversubscribed node: "NONE:IF-SUPPORTED:OVERLOAD-ALLOWED").
std::string mpirun_bind_to(const placement::Policy& policy, bool bound);
// PMIX_AVAIL_PHYS_MEMORY as mpirun gives it: hwloc's memory of the machine,
// the sum of its NUMA nodes' MemTotal (/sys/devices/system/node), else
// /proc/meminfo's MemTotal; 0 when neither can be read.
std::uint64_t physical_memory();

}  // namespace dlaunch::agent
