// The head-node driver: one job from this machine to every node of the
// hostfile. It resolves the hosts (hostfile, batch allocation, --host, ssh
// config), plans the ranks, checks on this machine what can be checked before
// anything starts, and runs the job through a Controller per attempt, again
// after a failure that --max-restarts allows (lost nodes are dropped or
// replaced from --spares). --dry-run and --check stop before the first
// attempt. The per-node driver (drivers/pernode.h) is the other one.
#pragma once

#include <string>
#include <vector>

namespace dlaunch {

struct Options;

// Runs the job `o` describes; its exit status. `argv` is the command line as
// given, for the job's record (jobs/job_journal.h). Input errors throw
// InputError before anything starts.
int run_head_job(Options& o, const std::vector<std::string>& argv);

}  // namespace dlaunch
