// The value a process would see for `name` in an EnvList (the last entry
// wins), or "<unset>": shared by the plan and user-environment tests.
#pragma once

#include <cstddef>
#include <string>

#include "plan/plan.h"

namespace dltest {

inline std::string get(const dlaunch::EnvList& env, const std::string& name) {
  std::string v = "<unset>";
  for (const auto& [k, val] : env) {
    if (k == name) v = val;
  }
  return v;
}

// What dlaunch sets for `name` in the rank_index-th rank of plan node node_index.
inline std::string rank_var(const dlaunch::JobPlan& plan, std::size_t node_index,
                            std::size_t rank_index, const std::string& name) {
  const auto& node = plan.nodes.at(node_index);
  return get(dlaunch::rank_environment(plan, node, node.ranks.at(rank_index)), name);
}

}  // namespace dltest
