// `dlaunch --check`: checks every node of the plan in parallel without
// starting any rank, and prints one table, then one of the health figures
// (with --json: one JSON object). Exit status 0 only if all pass.
//
// It is the job itself stopped at Ready (the Controller's probe_only), one
// transport as another: each node's agent is started as the job starts it
// (copied where the job would copy it); how far that went gives CONNECT,
// HOSTKEY, AUTH and AGENT (start_cells: where the link's start failed, which
// agent said Hello). The agent gets the workers described and looks for the
// working directory (WDIR), each program on PATH or in the node's container,
// which it starts as the job would, and the script an interpreter is given,
// `python3 train.py` (PROGRAM), and reads the node's facts: GPUs (GPUS, when
// the hostfile lists `gpus`), health (HEALTH: check/health.h), topology.
// When every node passed and the job spans machines, the other nodes then
// test node 0's addresses as a job would at start (REACH; a node that reaches
// none is named with the addresses it tried), and the network test between
// nodes runs.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "check/health.h"
#include "controller/controller.h"
#include "dlaunch/proto/container.h"
#include "dlaunch/tunables.h"
#include "plan/node_programs.h"
#include "plan/plan.h"
#include "transport/ssh/ssh_transport.h"

namespace dlaunch {

struct PreflightOptions {
  std::string agent_path;  // default agent path (a host's `agent` wins)
  std::string workdir;
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
  // The GPU test on every node whose NVML sees GPUs (health/gpu_test.h), of
  // the gpu_test_mb threshold's size; false: none (=quick).
  bool gpu_test = true;
  // --container-*: a node whose ranks run in a container (this image, or
  // its hostfile's `container:`) is checked as the job starts it: its agent
  // starts the container, pulling the image as `pull` says, and looks for
  // the programs in it (column PROGRAM); then the container is removed.
  proto::ContainerSpec container;
  // --start-timeout: how long the nodes have to be set up (a node's image
  // pull not counted), as for the job.
  std::chrono::milliseconds start_timeout = default_ms(tunables::kStartTimeout);
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

// A node's CONNECT, HOSTKEY, AUTH and AGENT cells from what its link and its
// agent said (Controller::NodeCheck), with the problem that kept it from
// going further, if one did. `agent`: the agent's path on that node.
struct StartCells {
  std::string connect = "-", hostkey = "-", auth = "-", agent = "-";
  std::vector<std::string> problems;
};
StartCells start_cells(const HostEntry& host, const std::string& agent,
                       const Controller::NodeCheck& check);

}  // namespace dlaunch
