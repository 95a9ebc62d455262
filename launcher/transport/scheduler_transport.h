// Scheduler transports (the nodes of an SGE, LSF or Flux allocation, or
// `--transport sge|lsf|flux`): each node's agent is started through the
// scheduler's own remote start, which runs it inside the job (accounted,
// limited and cleaned up by the scheduler), and the control protocol runs over
// that command's stdin/stdout exactly as over srun's (slurm_transport.h).
//
//   SGE:  qrsh -inherit NODE AGENT       (a task of the parallel job; the PE
//                                         needs control_slaves TRUE)
//   LSF:  blaunch NODE AGENT             (a task of the job, through RES)
//   Flux: flux run --nodes=1 --ntasks=1 --exclusive --requires=host:NODE
//              --unbuffered --setopt=cpu-affinity=off --setopt=gpu-affinity=off AGENT
//
// PBS has no such command: pbsdsh and pbs_tmrsh start programs with
// tm_spawn, which connects neither stdin nor stdout to the caller, so PBS
// nodes are reached over SSH (docs/schedulers.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "hostfile/hostfile.h"
#include "transport/transport.h"

namespace dlaunch {

// The program of transport t's remote start: $DLAUNCH_QRSH, $DLAUNCH_BLAUNCH,
// $DLAUNCH_FLUX when set (site wrappers, tests), else qrsh, blaunch, flux.
std::string remote_start_program(Transport t);

// The command that runs `command` on `node` through t's remote start (above).
// qrsh and blaunch hand their arguments to a shell on the node, as rsh does,
// so each word of `command` is shell-quoted; flux runs the words as they are.
std::vector<std::string> remote_start_command(Transport t, const std::string& node,
                                              const std::vector<std::string>& command);

// True inside an allocation of t's scheduler, the precondition of starting
// anything with its remote start: SGE a parallel job (JOB_ID and
// PE_HOSTFILE), LSF a job (LSB_JOBID), Flux an instance (FLUX_URI).
bool in_allocation_of(Transport t);

// What the variable that is missing is called, for the error message.
std::string allocation_marker(Transport t);

// Starts the node's agent. Throws dlaunch::Error when the command cannot be
// started; its own errors (no such node, no allocation) go to dlaunch's
// stderr and end the channel.
std::unique_ptr<AgentLink> start_scheduler_agent(boost::asio::io_context& io, Transport t,
                                                 const std::string& node,
                                                 const std::string& agent_path, int node_rank,
                                                 LinkCallbacks cb);

// The JSON of `flux resource R` (the Flux instance dlaunch runs in), run with
// remote_start_program(kFlux). Throws InputError (source FLUX_URI) when flux
// cannot be run, fails, or takes longer than timeout_s.
std::string flux_resource_r(double timeout_s = 30);

}  // namespace dlaunch
