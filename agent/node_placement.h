// Where this node's ranks run (docs/placement.md): the policy from Setup
// (defaults here) mapped on this node's topology over every rank of its
// machine, of which this node binds its own slice. Planned at Setup, before
// the node services' (the PMIx server registers each rank's CPUs and the
// policies in mpirun's words from it); read by each spawn.
//
// Thread safety: none; the agent's event loop only.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlaunch/placement/mapping.h"
#include "dlaunch/process.h"
#include "dlaunch/proto/protocol.h"

namespace dlaunch::agent {

class NodePlacement {
 public:
  // Plans the node's ranks for Setup on host (named in messages). A policy
  // that cannot be met (more ranks than cores without --oversubscribe), a
  // topology that cannot be read or a Setup out of range: the message that
  // fails the node, before any worker starts.
  std::optional<std::string> plan(const proto::Setup& setup, const std::string& host);

  // What a rank's spawn takes of the plan: its CPUs and memory (opts), its
  // variables (OMP_NUM_THREADS when bound and the user left it: user_env is
  // the rank's own, base the agent's), and what its Started says of where
  // it runs.
  void place(int rank, const proto::Env& user_env, const std::vector<std::string>& base,
             SpawnOptions& opts, proto::Env& job_env, proto::Started& started) const;

  // The policy as resolved for this node; none before plan().
  const std::optional<placement::Policy>& policy() const { return policy_; }
  // The CPUs of each rank this node binds, as lists ("0-3,8"); empty when
  // nothing is bound or the topology is not this machine's.
  std::map<int, std::string> bound_cpus() const;

 private:
  std::unique_ptr<placement::Topology> topology_;
  std::map<int, placement::RankPlacement> ranks_;  // by rank
  std::optional<placement::Policy> policy_;
  std::string note_;  // every rank's binding note
  bool omp_default_ = false;
};

}  // namespace dlaunch::agent
