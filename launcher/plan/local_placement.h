// Placement of the ranks of this machine's nodes, computed by the head with
// the same pure mapping the agents use (dlaunch/placement/mapping.h) on this
// machine's topology (HWLOC_SYNTHETIC / HWLOC_XMLFILE honoured): --dry-run
// shows it, and a policy this machine cannot meet (oversubscription without
// --oversubscribe) is refused before anything starts. Remote nodes map on
// their own topology, in their agent.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dlaunch/placement/mapping.h"
#include "plan/plan.h"

namespace dlaunch {

struct LocalPlacement {
  placement::Topology topo;
  placement::Policy policy;
  std::map<std::size_t, std::vector<placement::RankPlacement>> nodes;  // by index in plan.nodes
  std::string note;
};

// nullopt when no node is local or nothing is to be bound. Throws InputError
// (exit 2) naming the option when the policy cannot be met here, or when
// hwloc cannot read the topology it was pointed at.
std::optional<LocalPlacement> place_local_nodes(const JobPlan& plan,
                                                const placement::PolicyRequest& req);

// --dry-run's lines for node i: "placement: ..." then one per rank.
std::vector<std::string> describe_placement(const LocalPlacement& lp, const JobPlan& plan,
                                            std::size_t i);

}  // namespace dlaunch
