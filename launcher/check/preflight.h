// `dlaunch --check`: checks every node of the plan in parallel without
// starting anything (connect, host key, authentication, agent present and of
// the same version, working directory, the program on PATH, GPU count when the
// hostfile lists `gpus`) and prints one table. Exit status 0 only if all pass.
// When those pass and the job spans machines, the agents are started once
// more, without workers, and the other nodes test node 0's addresses as a
// job would at start (column REACH); a node that reaches none is named with
// the addresses it tried.
#pragma once

#include <string>

#include "plan/plan.h"
#include "transport/ssh/ssh_transport.h"

namespace dlaunch {

struct PreflightOptions {
  std::string agent_path;  // default agent path (a host's `agent` wins)
  std::string workdir;
  std::string program;  // empty: not checked
  std::string path;     // PATH the workers will have (forwarded from the head)
  ssh::TransportOptions ssh;
};

int run_preflight(const JobPlan& plan, const PreflightOptions& opts);

// The shell script one node runs; prints key=value lines. Exposed for tests.
// `cache_key`: also report the agent copied to the node's cache under that
// key (agent_install.h); empty: not looked for.
std::string preflight_script(const std::string& agent, const std::string& workdir,
                             const std::string& program, const std::string& path, bool count_gpus,
                             const std::string& cache_key = {});

}  // namespace dlaunch
