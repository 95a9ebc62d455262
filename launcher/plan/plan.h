// The job plan: which node runs which ranks with which environment. Pure and
// deterministic (architecture principle 4): the same hostfile and options
// always give the same ranks. Node rank = position in the filtered hostfile;
// global ranks are assigned in node order.
#pragma once

#include <string>
#include <vector>

#include "hostfile/hostfile.h"

namespace dlaunch {

struct RankPlan {
  int rank = 0;
  int local_rank = 0;
  int role_rank = 0;  // among the ranks of its app's role (ROLE_RANK)
  int app = 0;        // index into JobPlan::apps
};

// One program of the job (MPMD, docs/mpmd.md; a job of one program has one).
// Apps take their ranks in order: app 0 gets ranks 0..np-1, and so on; each
// app fills the free slots of its nodes in node order, as mpirun maps MPMD
// jobs by slot.
struct AppPlan {
  int np = 0;
  std::string role;                // ROLE_NAME; apps of one role share ROLE_RANK's count
  std::vector<std::string> hosts;  // node names it may use; empty: every node
  int nproc_per_node = 0;          // at most this many ranks per node; 0: no limit
  EnvList env;                     // this app's -x and --env-file, over the job's
  std::string workdir;             // empty: the job's
  // --container-image of this app: its ranks run in that image; empty: the
  // node's (the hostfile's `container:`, else the job's --container-image).
  std::string container_image;
  std::vector<std::string> command;
  SourcePos pos;            // where the app was given (errors)
  int first_rank = 0;       // set by make_plan
  int role_world_size = 0;  // ranks of its role (ROLE_WORLD_SIZE), set by make_plan
};

struct NodePlan {
  int node_rank = 0;
  HostEntry host;
  std::vector<RankPlan> ranks;
  EnvList env;  // set for every rank of this node (hostfile env, -x, devices)
  // The node is on another machine: its ranks get plan.forwarded first
  // (the head's environment but what stays on this machine).
  bool forwarded = false;
  // env's OMP_NUM_THREADS=1 is dlaunch's default (torchrun's rule), not the
  // user's: a bound rank gets its number of cores instead (docs/placement.md).
  bool omp_default = false;
  // --virtual-local-rank: the node's devices, each rank gets the one at its
  // local rank (its CUDA_VISIBLE_DEVICES); empty: the local rank's number.
  std::vector<std::string> devices;
  // The app whose --container-image host.container now holds (make_plan):
  // one container per node holds its ranks; -1: the hostfile's, or none.
  int container_app = -1;
};

struct PlanOptions {
  int np = 0;  // > 0: use the first np slots in node order
  std::string job_id;
  std::string master_addr;  // empty: derived from node 0
  std::vector<std::string> command;
  // MPMD: the apps in order (their np add up to the world); empty: one app
  // running command on np ranks (ROLE_NAME=default, torchrun's).
  std::vector<AppPlan> apps;
  std::vector<std::string> head_env;  // the head's environment ("NAME=VALUE")
  // --env-file and -x (user_env.h): for every node, after the hostfile's env.
  EnvList user_env;
  int restart_count = 0;  // this attempt (TORCHELASTIC_RESTART_COUNT)
  int max_restarts = 0;
  double collective_timeout_s = -1;  // >= 0: DLAUNCH_COLLECTIVE_TIMEOUT for every rank
  // torchrun's --virtual-local-rank: every rank LOCAL_RANK=0 and
  // CUDA_VISIBLE_DEVICES its own device.
  bool virtual_local_rank = false;
  // mpirun's OMPI_COMM_WORLD_* for every rank (head-node mode, not --no-mpi).
  bool mpirun_env = false;
  // The job's --container-image: the image of a node without a hostfile
  // `container:` whose apps name none (to check apps that share a node).
  std::string container_image;
};

struct JobPlan {
  std::string job_id;
  int world_size = 0;
  int nnodes = 0;  // NNODES, GROUP_WORLD_SIZE: the plan's nodes, or the per-node job's
  int restart_count = 0;
  int max_restarts = 0;
  bool virtual_local_rank = false;
  // The head's variables every node on another machine gets (the lowest
  // layer of its ranks' environment), once for the whole job.
  EnvList forwarded;
  std::string master_addr;
  std::vector<std::string> command;  // the first app's
  std::vector<AppPlan> apps;         // at least one
  std::vector<NodePlan> nodes;
  bool mpirun_env = false;  // PlanOptions::mpirun_env
};

// Throws InputError when np exceeds the slots available, or when apps with
// different images (AppPlan::container_image) share a node.
JobPlan make_plan(const Hostfile& hostfile, const PlanOptions& opts);

// What dlaunch sets for one rank (not the inherited environment): torchrun's
// variables and dlaunch's own, and with mpirun_env the ones Open MPI documents
// for its processes (OMPI_COMM_WORLD_RANK, ...). Made when asked, not kept in
// the plan: at a thousand nodes of eight ranks that would be ten megabytes for the head to hold
// through the job.
EnvList rank_environment(const JobPlan& plan, const NodePlan& node, const RankPlan& rank);

// A hostfile of one local node with n slots: `dlaunch -n N prog` without hosts.
Hostfile local_hostfile(int n);

// MASTER_ADDR when not given: node 0's `address`, else its host, where a local
// node's "localhost" becomes 127.0.0.1 (an address every tool accepts).
std::string default_master_addr(const HostEntry& node0);

// Whether a variable of the head's environment travels to the ranks of SSH
// nodes (local nodes inherit everything): every one but what belongs to
// this machine or this session (HOME, SSH_*, LD_PRELOAD, a scheduler's and
// dlaunch's own bookkeeping, ...; the list in docs/environment.md), so that
// every rank sees the user's environment whatever its node.
bool is_forwarded_variable(const std::string& name);

}  // namespace dlaunch
