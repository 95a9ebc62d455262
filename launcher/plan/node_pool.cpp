#include "plan/node_pool.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace dlaunch {

NodePool::NodePool(Hostfile hosts, NodePoolOptions opts)
    : active_(std::move(hosts)),
      min_nodes_(opts.min_nodes),
      elastic_(opts.min_nodes > 0 || opts.spares > 0) {
  const int total = static_cast<int>(active_.hosts.size());
  if (opts.spares < 0) throw InputError({"--spares"}, "", "must be 0 or more");
  if (opts.min_nodes < 0) throw InputError({"--min-nodes"}, "", "must be 0 or more");
  if (opts.spares >= total) {
    throw InputError({"--spares"}, "",
                     fmt::format("{} spare(s) leave no node to run on: the hostfile has {} node(s)",
                                 opts.spares, total),
                     "keep at least one node that runs");
  }
  const int running = total - opts.spares;
  if (opts.min_nodes > running) {
    throw InputError(
        {"--min-nodes"}, "",
        fmt::format(
            "{} is more than the {} node(s) that run{}", opts.min_nodes, running,
            opts.spares > 0 ? fmt::format(" ({} spare(s) wait)", opts.spares) : std::string()),
        "give at most the number of running nodes");
  }
  // Without --min-nodes, spares replace lost nodes and the job never shrinks.
  if (min_nodes_ == 0) min_nodes_ = running;
  spares_.assign(active_.hosts.end() - opts.spares, active_.hosts.end());
  active_.hosts.resize(static_cast<std::size_t>(running));
}

namespace {

std::string label(const HostEntry& h) {
  return h.name == h.host ? h.name : h.name + " (" + h.host + ")";
}

}  // namespace

bool NodePool::drop_spare(const std::string& name, const std::string& reason) {
  const auto it = std::find_if(spares_.begin(), spares_.end(),
                               [&name](const HostEntry& h) { return h.name == name; });
  if (it == spares_.end()) return false;
  excluded_.push_back(label(*it) + " (spare): " + reason);
  spares_.erase(it);
  return true;
}

NodePool::Change NodePool::node_lost(int node_index, const std::string& reason) {
  if (!elastic_ || node_index < 0 || node_index >= static_cast<int>(active_.hosts.size())) {
    return {.restart = true, .message = {}};
  }
  const HostEntry lost = active_.hosts[static_cast<std::size_t>(node_index)];
  // The machine is gone, not just one logical node of it: every node on the
  // same remote host goes too (they would fail the next start). Local
  // logical nodes share this machine, which is still here: only the one.
  const auto same_machine = [&lost](const HostEntry& h) {
    return !h.on_head_machine() && !lost.on_head_machine() && h.host == lost.host;
  };
  std::string what = fmt::format("node {} {}", node_index, label(lost));
  excluded_.push_back(label(lost) + ": " + reason);
  std::erase_if(spares_, same_machine);

  std::vector<HostEntry> next;
  std::vector<std::string> replaced;
  for (std::size_t k = 0; k < active_.hosts.size(); ++k) {
    const HostEntry& h = active_.hosts[k];
    const bool drop = static_cast<int>(k) == node_index || same_machine(h);
    if (!drop) {
      next.push_back(h);
      continue;
    }
    if (static_cast<int>(k) != node_index) {
      what += fmt::format(", node {} {} (same host)", k, label(h));
      excluded_.push_back(label(h) + ": on the same host as " + label(lost));
    }
    if (!spares_.empty()) {
      replaced.push_back(label(spares_.front()));
      next.push_back(std::move(spares_.front()));
      spares_.erase(spares_.begin());
    }
  }
  active_.hosts = std::move(next);
  what += " excluded";
  if (!replaced.empty()) {
    std::string names;
    for (const auto& r : replaced) names += (names.empty() ? "" : ", ") + r;
    what += fmt::format("; spare {} in its place ({} spare(s) left)", names, spares_.size());
  }
  const int left = static_cast<int>(active_.hosts.size());
  if (left < min_nodes_) {
    return {.restart = false,
            .message = fmt::format("{}; {} node(s) left, fewer than --min-nodes {}", what, left,
                                   min_nodes_)};
  }
  return {.restart = true,
          .message = fmt::format("{}; {} node(s) run the next attempt", what, left)};
}

}  // namespace dlaunch
