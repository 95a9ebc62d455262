#include "net/job_network.h"

#include "net/master_address.h"

namespace dlaunch::net {

bool all_local(const JobPlan& plan) {
  for (const auto& n : plan.nodes) {
    if (!n.host.on_head_machine()) return false;
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

std::string dry_run_interface_note(const JobPlan& plan, bool master_addr_explicit, bool mpi) {
  if (all_local(plan)) return {};
  const auto given = given_master_addr(plan, master_addr_explicit);
  if (given && !is_ip_address(*given)) return {};
  return std::string("each node's workers get GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME") +
         (mpi ? ", OMPI_MCA_btl_tcp_if_include, OMPI_MCA_oob_tcp_if_include" : "") +
         " at start: the node's interface toward MASTER_ADDR, unless set (hostfile env, -x, "
         "--env-file, the agent's environment)";
}

}  // namespace dlaunch::net
