// Hosts from a Slurm allocation: the hostlist syntax of SLURM_JOB_NODELIST
// (`node[01-04,07],gpu-a[1-2]`), the task counts of SLURM_TASKS_PER_NODE
// (`2(x3),1`), and the Hostfile dlaunch builds from them when it runs inside
// an allocation without -H/--hostfile.
//
// Errors are InputError with source = the variable's name, line 1 and the
// 1-based column of the offending character, e.g.
//   "SLURM_JOB_NODELIST:1:5: unclosed '[' in 'node[01-04' (hint: ...)".
// All functions are pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hostfile/hostfile.h"

namespace dlaunch {

// Expands a Slurm hostlist, in order: top-level commas separate items; an item
// is text with any number of bracket groups `[a-b,c,...]` (several groups give
// every combination, the first group outermost); a range keeps the zero padding
// of its lower bound (`[08-10]` -> 08 09 10). Host names may hold letters,
// digits, '-', '_' and '.'. Duplicates, empty items, decreasing ranges and more
// than kMaxHostlistHosts names are errors. `var` names the source in errors.
inline constexpr std::size_t kMaxHostlistHosts = 1 << 20;
std::vector<std::string> expand_hostlist(std::string_view text, const std::string& var);

// "2(x3),1" -> {2, 2, 2, 1}: counts with an optional repeat `(xN)`.
std::vector<int> parse_tasks_per_node(std::string_view text, const std::string& var);

// "4", "a100:4", "gpu:a100:2,gpu:v100:2" (SLURM_GPUS_PER_NODE): the total count.
int parse_gpu_count(std::string_view text, const std::string& var);

// The allocation dlaunch runs in, read from `env` ("NAME=VALUE" entries), or
// nullopt when there is none (SLURM_JOB_NODELIST, else SLURM_NODELIST, unset or
// empty). Slots per node, first that applies:
//   1. SLURM_NTASKS_PER_NODE (the user asked for --ntasks-per-node): every node;
//   2. SLURM_TASKS_PER_NODE when the user asked for a task count (SLURM_NTASKS
//      or SLURM_NPROCS set): Slurm's layout, node by node;
//   3. the GPUs of a node, SLURM_GPUS_ON_NODE, else SLURM_GPUS_PER_NODE: every
//      node (Slurm gives one count for all);
//   4. SLURM_TASKS_PER_NODE (Slurm's default layout, usually 1 per node);
//   5. 1.
// (--nproc-per-node and -n still apply on top, as for any hostfile.)
// `slots_from` receives the name of the variable the slots came from.
// A node whose short name is `this_host`'s short name runs its agent locally
// (address = its name, so other nodes reach it); every other node gets the
// Slurm transport (agents started with srun). `gpus` stays empty: Slurm sets
// CUDA_VISIBLE_DEVICES for the job itself.
std::optional<Hostfile> slurm_allocation_hostfile(const std::vector<std::string>& env,
                                                  std::string_view this_host,
                                                  std::string* slots_from = nullptr);

}  // namespace dlaunch
