// Slurm transport (`--transport slurm`, or the other nodes of the allocation
// dlaunch runs in): every node's agent is a job step of the current allocation,
// started by `srun` on that one node, and the control protocol runs over srun's
// stdin/stdout exactly as over a local pipe or an SSH channel.
//
// Nothing outlives the job:
//   - dlaunch exits or dies: srun's stdin closes, srun forwards the EOF to the
//     agent, which stops its workers and exits (the lifeline); srun also has
//     PR_SET_PDEATHSIG=SIGTERM, so it tells Slurm to signal the step at once;
//   - srun dies (even by SIGKILL): Slurm kills the whole step, agent, workers
//     and whatever they started, on that node;
//   - the agent dies: the step ends and srun exits, which dlaunch sees as a
//     closed channel (node lost).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "transport/transport.h"

namespace dlaunch {

// The srun command that runs `command` as a one-task step on `node`:
//   srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --nodelist=NODE --overlap
//        --unbuffered --mpi=none --cpu-bind=none --kill-on-bad-exit=1 --quiet
//        --job-name=dlaunch-agent COMMAND...
// `srun` is the program to run (DLAUNCH_SRUN in the environment overrides the
// default "srun", for wrappers and tests).
std::vector<std::string> srun_command(const std::string& node,
                                      const std::vector<std::string>& command);

// True when this process runs inside a Slurm allocation (SLURM_JOB_ID is set),
// the precondition of the Slurm transport.
bool in_slurm_allocation();

// Starts the node's agent as a job step. Throws dlaunch::Error when srun
// cannot be started; srun's own errors (unknown node, no allocation) go to
// dlaunch's stderr and end the channel.
std::unique_ptr<AgentLink> start_slurm_agent(boost::asio::io_context& io, const std::string& node,
                                             const std::string& agent_path, int node_rank,
                                             LinkCallbacks cb);

}  // namespace dlaunch
