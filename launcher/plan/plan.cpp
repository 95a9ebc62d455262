#include "plan/plan.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace dlaunch {
namespace {

constexpr std::array<std::string_view, 10> kForwardPrefixes = {
    "NCCL_", "OMP_", "PYTHON", "UCX_", "MKL_", "TORCH_", "CUDA_", "HF_", "GLOO_", "OMPI_MCA_"};
constexpr std::array<std::string_view, 9> kForwardNames = {
    "PATH",         "LD_LIBRARY_PATH", "VIRTUAL_ENV",   "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
    "ASAN_OPTIONS", "LSAN_OPTIONS",    "UBSAN_OPTIONS", "TSAN_OPTIONS"};

bool head_has(const std::vector<std::string>& env, std::string_view name) {
  for (const auto& e : env) {
    if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '=') {
      return true;
    }
  }
  return false;
}

// Seconds as the shortest decimal text that reads back the same ("600", "2.5").
std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", s);
  for (int digits = 1; digits <= 17; ++digits) {
    char shorter[32];
    std::snprintf(shorter, sizeof shorter, "%.*g", digits, s);
    if (std::strtod(shorter, nullptr) == s) return shorter;
  }
  return buf;
}

std::string join_ints(const std::vector<int>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out;
}

}  // namespace

bool is_forwarded_variable(const std::string& name) {
  // CUDA_VISIBLE_DEVICES is per node (from `gpus`), never the head's.
  if (name == "CUDA_VISIBLE_DEVICES") return false;
  for (auto p : kForwardPrefixes) {
    if (std::string_view(name).substr(0, p.size()) == p) return true;
  }
  for (auto n : kForwardNames) {
    if (name == n) return true;
  }
  return false;
}

Hostfile local_hostfile(int n) {
  Hostfile hf;
  hf.source = "-n";
  HostEntry h;
  h.name = h.host = "localhost";
  h.slots = n;
  h.transport = Transport::kLocal;
  hf.hosts.push_back(h);
  return hf;
}

std::string default_master_addr(const HostEntry& node0) {
  if (!node0.address.empty()) return node0.address;
  if (node0.transport == Transport::kLocal && !is_local_host(node0.host)) return "127.0.0.1";
  if (node0.host == "localhost" || node0.host == "localhost.localdomain") return "127.0.0.1";
  return node0.host;
}

JobPlan make_plan(const Hostfile& hostfile, const PlanOptions& opts) {
  int total = 0;
  for (const auto& h : hostfile.hosts) total += h.slots;
  if (opts.np > total) {
    throw InputError({"-n"}, "",
                     std::to_string(opts.np) + " ranks requested but " + hostfile.source +
                         " has only " + std::to_string(total) + " slots",
                     "lower -n, or add hosts or slots");
  }
  const int world = opts.np > 0 ? opts.np : total;

  JobPlan plan;
  plan.job_id = opts.job_id;
  plan.world_size = world;
  plan.command = opts.command;

  int next_rank = 0;
  for (const auto& host : hostfile.hosts) {
    if (next_rank >= world) break;
    NodePlan node;
    node.node_rank = static_cast<int>(plan.nodes.size());
    node.host = host;
    const int n = std::min(host.slots, world - next_rank);
    node.host.slots = n;
    if (node.host.gpus.size() > static_cast<std::size_t>(n))
      node.host.gpus.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) node.ranks.push_back(RankPlan{next_rank++, i, {}});
    plan.nodes.push_back(std::move(node));
  }
  plan.master_addr =
      opts.master_addr.empty() ? default_master_addr(plan.nodes.front().host) : opts.master_addr;

  const int nnodes = static_cast<int>(plan.nodes.size());
  for (auto& node : plan.nodes) {
    // Lowest to highest precedence: forwarded, hostfile env, host env,
    // --env-file and -x, devices.
    if (node.host.transport == Transport::kSsh) {
      for (const auto& e : opts.head_env) {
        auto eq = e.find('=');
        if (eq != std::string::npos && is_forwarded_variable(e.substr(0, eq))) {
          node.env.emplace_back(e.substr(0, eq), e.substr(eq + 1));
        }
      }
    }
    for (const auto& kv : hostfile.env) node.env.push_back(kv);
    for (const auto& kv : node.host.env) node.env.push_back(kv);
    for (const auto& kv : opts.user_env) node.env.push_back(kv);
    if (!node.host.gpus.empty())
      node.env.emplace_back("CUDA_VISIBLE_DEVICES", join_ints(node.host.gpus));
    if (opts.collective_timeout_s >= 0)
      node.env.emplace_back("DLAUNCH_COLLECTIVE_TIMEOUT",
                            format_seconds(opts.collective_timeout_s));
    const int local_world = static_cast<int>(node.ranks.size());
    // torchrun's rule: one OpenMP thread per rank unless the user chose.
    if (local_world > 1 && !head_has(opts.head_env, "OMP_NUM_THREADS")) {
      bool set_by_user = false;  // hostfile, --env-file or -x
      for (const auto& [k, v] : node.env) set_by_user |= k == "OMP_NUM_THREADS";
      if (!set_by_user) node.env.emplace_back("OMP_NUM_THREADS", "1");
    }
    // Python ranks print every thread's traceback on SIGABRT, which the agent
    // sends them when the job is stopped at --timeout or a stall (the report
    // groups them): unless the user chose.
    if (!head_has(opts.head_env, "PYTHONFAULTHANDLER")) {
      bool set_by_user = false;
      for (const auto& [k, v] : node.env) set_by_user |= k == "PYTHONFAULTHANDLER";
      if (!set_by_user) node.env.emplace_back("PYTHONFAULTHANDLER", "1");
    }
    for (auto& r : node.ranks) {
      const std::string rank = std::to_string(r.rank);
      r.env = {
          {"RANK", rank},
          {"LOCAL_RANK", std::to_string(r.local_rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_WORLD_SIZE", std::to_string(local_world)},
          {"GROUP_RANK", std::to_string(node.node_rank)},
          {"GROUP_WORLD_SIZE", std::to_string(nnodes)},
          {"ROLE_RANK", rank},
          {"ROLE_WORLD_SIZE", std::to_string(world)},
          {"ROLE_NAME", "default"},
          {"NODE_RANK", std::to_string(node.node_rank)},
          {"NNODES", std::to_string(nnodes)},
          {"TORCHELASTIC_RUN_ID", plan.job_id},
          {"TORCHELASTIC_RESTART_COUNT", std::to_string(opts.restart_count)},
          {"TORCHELASTIC_MAX_RESTARTS", std::to_string(opts.max_restarts)},
          {"DLAUNCH_RESTART_COUNT", std::to_string(opts.restart_count)},
          {"DLAUNCH_JOB_ID", plan.job_id},
          {"DLAUNCH_NODE_NAME", node.host.name},
      };
    }
  }
  return plan;
}

}  // namespace dlaunch
