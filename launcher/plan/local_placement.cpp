#include "plan/local_placement.h"

#include <cstdlib>

#include <fmt/format.h>

namespace dlaunch {

std::optional<LocalPlacement> place_local_nodes(const JobPlan& plan,
                                                const placement::PolicyRequest& req) {
  int host_ranks = 0;
  for (const auto& n : plan.nodes) {
    if (n.host.on_head_machine()) host_ranks += static_cast<int>(n.ranks.size());
  }
  if (host_ranks == 0) return std::nullopt;
  auto policy = placement::resolve_policy(req, host_ranks);
  if (!policy) throw InputError({}, "", policy.error());
  if (policy->bind_to == placement::BindTo::kNone) return std::nullopt;
  auto topo = placement::load_topology(placement::binds_to_gpu(policy->bind_to));
  if (!topo)
    throw InputError({}, "", topo.error(), "unset HWLOC_SYNTHETIC / HWLOC_XMLFILE or fix them");
  // --bind-to gpu: each rank's GPU from CUDA_VISIBLE_DEVICES (its node's
  // variables, else dlaunch's) and its local rank, as the agent does.
  std::vector<int> gpus;
  const char* head_visible = std::getenv("CUDA_VISIBLE_DEVICES");
  for (const auto& n : plan.nodes) {
    if (!n.host.on_head_machine()) continue;
    std::string visible = head_visible != nullptr ? head_visible : "";
    for (const auto& [k, v] : n.env) {
      if (k == "CUDA_VISIBLE_DEVICES") visible = v;
    }
    for (const auto& r : n.ranks)
      gpus.push_back(placement::visible_gpu_index(visible, r.local_rank));
  }
  auto placed = placement::map_ranks(*topo, *policy, host_ranks, gpus);
  if (!placed)
    throw InputError({}, "", placed.error() + " (this machine: " + placement::summary(*topo) + ")");
  LocalPlacement out{
      .topo = std::move(*topo), .policy = *policy, .nodes = {}, .note = placed->note};
  std::size_t next = 0;
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    if (!plan.nodes[i].host.on_head_machine()) continue;
    auto& mine = out.nodes[i];
    for (std::size_t k = 0; k < plan.nodes[i].ranks.size(); ++k)
      mine.push_back(placed->ranks[next++]);
  }
  return out;
}

std::vector<std::string> describe_placement(const LocalPlacement& lp, const JobPlan& plan,
                                            std::size_t i) {
  std::vector<std::string> out;
  auto it = lp.nodes.find(i);
  if (it == lp.nodes.end()) {
    out.emplace_back("placement: mapped by the node's agent on its own topology at start");
    return out;
  }
  std::string head =
      fmt::format("placement: --bind-to {}{}{}{} on {}", placement::to_string(lp.policy.bind_to),
                  placement::binds_to_gpu(lp.policy.bind_to)
                      ? std::string()
                      : std::string(" --map-by ") + placement::to_string(lp.policy.map_by),
                  lp.policy.pe > 1 ? fmt::format(":PE={}", lp.policy.pe) : "",
                  lp.policy.defaulted ? " (the --mpi default)" : "", placement::summary(lp.topo));
  if (!lp.topo.this_system) head += "; not this machine: nothing will be bound";
  if (!lp.note.empty()) head += "; " + lp.note;
  out.push_back(std::move(head));
  const auto& ranks = plan.nodes[i].ranks;
  for (std::size_t k = 0; k < ranks.size() && k < it->second.size(); ++k) {
    const auto& p = it->second[k];
    if (p.cpus.empty()) {
      out.push_back(fmt::format("rank {}: not bound", ranks[k].rank));
      continue;
    }
    std::string numa;
    for (int n : p.numa) numa += (numa.empty() ? "" : ",") + std::to_string(n);
    out.push_back(fmt::format(
        "rank {}: cpus {} {} ({} core(s), NUMA {}{}{})", ranks[k].rank, placement::cpu_list(p.cpus),
        placement::cpu_picture(lp.topo, p.cpus), p.cores, numa,
        p.gpu >= 0 ? ", GPU " + lp.topo.gpus[static_cast<std::size_t>(p.gpu)].pci_bus_id : "",
        p.oversubscribed ? ", oversubscribed" : ""));
  }
  return out;
}

}  // namespace dlaunch
