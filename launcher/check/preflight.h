// `dlaunch --check`: checks every node of the plan in parallel without
// starting anything (connect, host key, authentication, agent present and of
// the same version, working directory, the program on PATH and the script an
// interpreter is given (python3 train.py), or in a container the runtime,
// the image and the program in it, GPU count when the
// hostfile lists `gpus`, the node's health: check/health.h) and prints one
// table, then one of the health figures (with --json: one JSON object).
// Exit status 0 only if all pass.
// When those pass and the job spans machines or runs in containers, the
// agents are started once more, as the job would start them but stopped at
// Ready: a node's container is started and the programs looked for in it
// (then removed), and the other nodes test node 0's addresses as a job would
// at start (column REACH); a node that reaches none is named with the
// addresses it tried.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "check/health.h"
#include "dlaunch/proto/container.h"
#include "plan/plan.h"
#include "transport/ssh/ssh_transport.h"

namespace dlaunch {

struct PreflightOptions {
  std::string agent_path;  // default agent path (a host's `agent` wins)
  std::string workdir;
  bool check_programs = true;  // each node's programs (every app's with ranks there) on PATH
  std::string path;            // PATH the workers will have (forwarded from the head)
  ssh::TransportOptions ssh;
  // Each node's health (its agent's --health facts, check/health.h), judged
  // against its thresholds: the hostfile's `health:` for it, then these
  // --check-threshold NAME=VALUE words (health::node_thresholds); a node whose
  // agent cannot say (missing, to be copied, of another version) shows "-"
  // in the HEALTH column.
  std::vector<std::string> threshold_words;
  bool json = false;  // --json: one JSON object on stdout instead of the tables
  // The network test between nodes, when the job spans machines: each of its
  // rounds this long (controller/bandwidth_test.h); 0: none.
  std::chrono::milliseconds bandwidth_round{1000};
  // --container-*: a node whose ranks run in a container (this image, or
  // its hostfile's `container:`) is checked as the job starts it: its agent
  // starts the container, pulling the image as `pull` says, and looks for
  // the programs in it (column PROGRAM); then the container is removed.
  proto::ContainerSpec container;
};

// What the check found: each node's verdict (in plan order), the exit status
// --check gives, and what it prints (the tables, or the JSON object).
struct PreflightReport {
  struct Node {
    std::string name;
    bool ok = false;
    std::vector<std::string> problems;
  };
  std::vector<Node> nodes;
  int exit_code = 1;
  std::string text;
};
PreflightReport check_nodes(const JobPlan& plan, const PreflightOptions& opts);

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

// The shell script one node runs; prints key=value lines (program0=,
// program1=, ... for `programs`; script0=, ... for `scripts`: a file there,
// relative to the working directory). Exposed for tests. `cache_key`: also
// report the agent copied to the node's cache under that key
// (agent_install.h); empty: not looked for. `health`: also the agent's
// --health lines (health.KEY=VALUE).
std::string preflight_script(const std::string& agent, const std::string& workdir,
                             const std::vector<std::string>& programs, const std::string& path,
                             bool count_gpus, const std::string& cache_key = {},
                             const std::vector<std::string>& scripts = {}, bool health = false);

}  // namespace dlaunch
