// What each node of a plan runs, as --check looks for it: the programs (the
// first word of each app with ranks there) and the scripts an interpreter is
// given. The head sends them in a check's Setup; the agent looks for them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace dlaunch {

// The programs node `node` of the plan runs: the first word of each app
// with ranks there (MPMD), once each, in app order; else the job's program.
std::vector<std::string> node_programs(const JobPlan& plan, std::size_t node);

// The script file a command hands its interpreter, as a user reads the
// command line: for python*, bash, sh, dash, zsh, ksh, perl, ruby, node,
// Rscript and julia, the first argument that is neither an option nor an
// option's value ("python3 -u train.py" -> "train.py"); "" where there is
// none (python3 -c CODE, python3 -m MODULE, bash -c ..., a program that is
// no interpreter, "-" for standard input).
std::string script_argument(const std::vector<std::string>& command);

// The scripts node `node` runs (script_argument of each of its programs),
// once each, in app order.
std::vector<std::string> node_scripts(const JobPlan& plan, std::size_t node);

}  // namespace dlaunch
