#include "net/job_network.h"

#include "net/master_address.h"

namespace dlaunch::net {

bool all_local(const JobPlan& plan) {
  for (const auto& n : plan.nodes) {
    if (n.host.transport != Transport::kLocal) return false;
  }
  return true;
}

std::optional<std::string> given_master_addr(const JobPlan& plan, bool master_addr_explicit) {
  if (master_addr_explicit || (!plan.nodes.empty() && !plan.nodes.front().host.address.empty()))
    return plan.master_addr;
  return std::nullopt;
}

bool probe_wanted(const JobPlan& plan, bool master_addr_explicit, bool probe_only) {
  if (plan.nodes.size() < 2 || all_local(plan)) return false;
  const auto given = given_master_addr(plan, master_addr_explicit);
  if (!given) return true;
  return probe_only && is_ip_address(*given);
}

std::string dry_run_master_addr(const JobPlan& plan, bool master_addr_explicit) {
  if (given_master_addr(plan, master_addr_explicit) || all_local(plan)) return plan.master_addr;
  return "<chosen at start: node 0's first address every node reaches>";
}

}  // namespace dlaunch::net
