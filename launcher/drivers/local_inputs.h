// What a driver can see of the nodes on its own machine before anything
// starts, refused as bad input (InputError: exit 2, naming the option or the
// hostfile's line and field, nothing started): the agent, the working
// directory, a program. The same words for the head-node and the per-node
// driver. Remote nodes (and a node's container) are the agents' to check,
// at Setup: a job refuses there at the first problem, --check lists them all.
#pragma once

#include <string>
#include <vector>

#include "hostfile/hostfile.h"

namespace dlaunch {

// `agent` is executable here; else the error names `pos` and `field`
// (--agent, or the hostfile's `agent:`).
void require_agent_here(const std::string& agent, const SourcePos& pos, const std::string& field);
// `dir` is a directory here.
void require_directory_here(const std::string& dir, const SourcePos& pos, const std::string& field);
// `program` is found here as a worker would find it (PATH of `env`, in `dir`).
void require_program_here(const std::string& program, const std::vector<std::string>& env,
                          const std::string& dir, const SourcePos& pos);

}  // namespace dlaunch
