// Per-node mode: `dlaunch --nnodes N --nproc-per-node M ... prog` run once on
// every node, as torchrun is (docs/per-node.md). The launchers meet through a
// rendezvous (pernode/rendezvous.h); each then runs its own node as a head
// whose job has exactly one node, this one, with a local dlaunch-agent, and
// global ranks offset by the nodes before it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cli/options.h"
#include "plan/plan.h"

namespace dlaunch {

struct Membership;

// Runs this node's part of the job; returns dlaunch's exit status.
int run_per_node(const Options& o);

// --rdzv-conf KEY=VALUE,...: throws InputError naming the key.
struct RdzvConf {
  double join_timeout_s = 600;
  double last_call_timeout_s = 30;
  double close_timeout_s = 30;
  double read_timeout_s = 60;
  std::string secret;
  bool insecure = false;
};
RdzvConf parse_rdzv_conf(const std::string& text);

// A rendezvous secret shorter than this is refused: the store's handshake
// lets whoever reaches it test guesses offline (docs/security.md).
inline constexpr std::size_t kMinRdzvSecretBytes = 16;
// The key of an open rendezvous (no secret given, or insecure=1): public,
// so it authenticates nobody; it only keeps the protocol one.
inline constexpr const char* kOpenRendezvousKey = "dlaunch-open-rendezvous-no-secret";
// The key the launchers and workers of job `run_id` use, as hex:
// HMAC-SHA256(secret, "dlaunch-rendezvous-key\n" + run_id). Jobs that share
// one secret (one Kubernetes Secret) get keys of their own.
std::string rendezvous_key(const std::string& secret, const std::string& run_id);

// --nproc-per-node N|gpu|cpu|auto on this machine.
int resolve_nproc(const std::string& spec, const std::vector<std::string>& env);

// The node names of a per-node job for PMIx (--mpi), from the launchers'
// names ("host pid N") in node order: the hosts, made unique with the node
// rank where launchers share one.
std::vector<std::string> mpi_node_names(const std::vector<std::string>& launchers);

// This node's plan: the plan of a one-node job (this machine, nproc ranks)
// made part of the whole: global ranks from node_rank * nproc, WORLD_SIZE,
// GROUP_RANK, NODE_RANK, NNODES and the rest of torchrun's environment.
JobPlan make_node_plan(const PlanOptions& po, const Membership& m, const std::string& node_name,
                       const std::string& role, const std::string& store_secret);

}  // namespace dlaunch
