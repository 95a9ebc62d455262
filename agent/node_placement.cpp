#include "node_placement.h"

#include <algorithm>
#include <cstdlib>

#include "dlaunch/placement/binding.h"
#include "dlaunch/tunables.h"

namespace dlaunch::agent {

std::optional<std::string> NodePlacement::plan(const proto::Setup& setup, const std::string& host) {
  omp_default_ = setup.omp_default;
  const int mine = static_cast<int>(setup.workers.size());
  if (setup.host_rank_offset < 0 || setup.host_rank_offset > limits::kMaxRanksPerJob ||
      setup.ranks_on_host > limits::kMaxRanksPerJob) {
    return "Setup: host_rank_offset or ranks_on_host out of range";
  }
  const int host_ranks = std::max(setup.ranks_on_host, setup.host_rank_offset + mine);
  auto policy = placement::resolve_policy({.bind_to = setup.bind_to,
                                           .map_by = setup.map_by,
                                           .oversubscribe = setup.oversubscribe,
                                           .mpi = setup.mpi},
                                          host_ranks);
  if (!policy) return policy.error();
  policy_ = *policy;
  if (policy->bind_to == placement::BindTo::kNone || mine == 0) return std::nullopt;
  auto topo = placement::load_topology(placement::binds_to_gpu(policy->bind_to));
  if (!topo) return "cannot read the topology of " + host + ": " + topo.error();
  // Each rank's GPU, for --bind-to gpu: CUDA_VISIBLE_DEVICES (the rank's,
  // else the agent's) and its local rank.
  const auto offset = static_cast<std::size_t>(setup.host_rank_offset);
  std::vector<int> gpu_of_rank(static_cast<std::size_t>(host_ranks), -1);
  const char* agent_visible = std::getenv("CUDA_VISIBLE_DEVICES");
  for (int i = 0; i < mine; ++i) {
    const auto& w = setup.workers[static_cast<std::size_t>(i)];
    std::string visible = agent_visible != nullptr ? agent_visible : "";
    for (const auto& [k, v] : w.env) {
      if (k == "CUDA_VISIBLE_DEVICES") visible = v;
    }
    gpu_of_rank[offset + static_cast<std::size_t>(i)] =
        placement::visible_gpu_index(visible, w.local_rank);
  }
  auto placed = placement::map_ranks(*topo, *policy, host_ranks, gpu_of_rank);
  if (!placed) return placed.error() + " (on " + host + ")";
  for (int i = 0; i < mine; ++i) {
    ranks_[setup.workers[static_cast<std::size_t>(i)].rank] =
        placed->ranks[offset + static_cast<std::size_t>(i)];
  }
  note_ = placed->note;
  if (!topo->this_system) {
    note_ =
        "not bound: " + topo->source + " is not this machine" + (note_.empty() ? "" : "; " + note_);
  }
  topology_ = std::make_unique<placement::Topology>(std::move(*topo));
  return std::nullopt;
}

void NodePlacement::place(int rank, const proto::Env& user_env,
                          const std::vector<std::string>& base, SpawnOptions& opts,
                          proto::Env& job_env, proto::Started& started) const {
  started.binding_note = note_;
  const auto placed = ranks_.find(rank);
  if (placed == ranks_.end() || !topology_) return;
  const placement::RankPlacement& p = placed->second;
  const bool bound = placement::apply(*topology_, p, opts);
  for (auto& kv : placement::binding_env(p, bound, user_env, base, omp_default_))
    job_env.push_back(std::move(kv));
  started.cpus = placement::cpu_list(p.cpus);
  started.cpu_picture = placement::cpu_picture(*topology_, p.cpus);
  auto add_note = [&](const std::string& note) {
    started.binding_note += (started.binding_note.empty() ? "" : "; ") + note;
  };
  if (p.gpu >= 0)
    add_note("near GPU " + topology_->gpus[static_cast<std::size_t>(p.gpu)].pci_bus_id);
  if (p.oversubscribed) add_note("shares its CPUs with an earlier rank");
}

std::map<int, std::string> NodePlacement::bound_cpus() const {
  std::map<int, std::string> out;
  if (!topology_ || !topology_->this_system) return out;
  for (const auto& [rank, p] : ranks_) {
    if (!p.cpus.empty()) out[rank] = placement::cpu_list(p.cpus);
  }
  return out;
}

}  // namespace dlaunch::agent
