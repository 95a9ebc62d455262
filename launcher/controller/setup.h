// What each node's agent is told (proto::Setup), and whether the job fits
// through the control protocol and through execve at all, checked before
// anything starts.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "dlaunch/proto/protocol.h"
#include "plan/plan.h"

namespace dlaunch {

// Node `node`'s Setup for this plan and configuration.
proto::Setup make_node_setup(const JobPlan& plan, const ControllerConfig& cfg, std::size_t node);

// Throws InputError (exit 2, nothing started) when the job cannot run as
// asked: a node's Setup over the protocol's frame limit (too many ranks on
// it, or too much environment), one variable over Linux's limit for one
// string (MAX_ARG_STRLEN), or a rank's whole environment and arguments over
// the system's ARG_MAX (`arg_max`: sysconf(_SC_ARG_MAX) of this machine,
// taken for the others too). Local nodes inherit dlaunch's own environment
// (`head_env`), which is counted for them; what sshd adds on other hosts is
// unknown and left out.
void check_job_fits(const JobPlan& plan, const ControllerConfig& cfg,
                    const std::vector<std::string>& head_env, std::size_t arg_max);

}  // namespace dlaunch
