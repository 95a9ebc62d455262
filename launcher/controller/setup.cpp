#include "controller/setup.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "dlaunch/proc_stat.h"
#include "dlaunch/proto/heartbeat.h"
#include "dlaunch/tunables.h"
#include "hostfile/hostfile.h"
#include "net/job_network.h"
#include "plan/node_programs.h"

namespace dlaunch {

proto::Setup make_node_setup(const JobPlan& plan, const ControllerConfig& cfg, std::size_t i) {
  const NodePlan& np = plan.nodes.at(i);
  proto::Setup s;
  s.job_id = plan.job_id;
  s.node_rank = np.node_rank;
  s.reserve_master_port = i == 0 && cfg.reserve_master_port;
  if (i == 0) {
    s.store_secret = cfg.store_secret;
    s.store_port = cfg.store_port;
    // Every node on this machine: no other host needs to reach the store.
    // Else every address, IPv6 too (the address chosen at start may be one).
    s.store_bind = net::all_local(plan) ? "127.0.0.1" : "::";
    s.accept_probes = net::probe_wanted(plan, cfg.master_addr_explicit, cfg.probe_only);
  }
  s.master_port = cfg.master_port;
  using proto::ms;
  s.kill_grace_ms = ms(cfg.kill_grace);
  s.heartbeat_timeout_ms = ms(cfg.heartbeat_timeout);
  s.heartbeat_interval_ms = ms(proto::heartbeat_interval(cfg.heartbeat_timeout));
  s.flush_ms = ms(cfg.flush);
  // --head-grace: the ranks outlive their head that long, for a new head
  // that proves the job's secret at each node's door.
  s.head_grace_ms = ms(cfg.head_grace);
  if (cfg.head_grace.count() > 0) s.reattach_secret = cfg.store_secret;
  // This process, for an agent on the same boot to tell a starved head from
  // a gone one.
  static const std::string head_boot = boot_id();
  static const ProcessRef head = this_process();
  s.head_boot_id = head_boot;
  s.head_pid = static_cast<std::int32_t>(head.pid);
  s.head_start_ticks = head.start_ticks;
  // --stall-timeout: the ranks' comm calls count as activity, looked at four
  // times per limit (0.1 s to 5 s apart).
  if (cfg.stall_timeout.count() > 0) {
    s.progress_interval_ms = ms(std::clamp(cfg.stall_timeout / 4, std::chrono::milliseconds(100),
                                           std::chrono::milliseconds(5000)));
  }
  s.workdir = cfg.workdir;
  s.mpi = cfg.mpi;
  if (cfg.mpi && !cfg.mpi_node_names.empty()) {
    // One node of a job run by several launchers: the whole job's map.
    s.node_names = cfg.mpi_node_names;
    s.ranks_per_node = cfg.mpi_ranks_per_node;
  } else if (cfg.mpi) {
    for (const auto& n : plan.nodes) {
      s.node_names.push_back(n.host.name);
      s.ranks_per_node.push_back(static_cast<std::int32_t>(n.ranks.size()));
    }
    // MPMD apps restricted to some nodes can leave a node's ranks apart.
    std::vector<std::int32_t> node_of_rank(static_cast<std::size_t>(plan.world_size));
    for (const auto& n : plan.nodes) {
      for (const auto& r : n.ranks) node_of_rank.at(static_cast<std::size_t>(r.rank)) = n.node_rank;
    }
    if (!std::is_sorted(node_of_rank.begin(), node_of_rank.end()))
      s.node_of_rank = std::move(node_of_rank);
    // MPMD: each app's ranks, for the app numbers MPI reads (MPI_APPNUM).
    if (plan.apps.size() > 1) {
      for (const auto& app : plan.apps) s.app_sizes.push_back(app.np);
    }
  }
  // Logical nodes of one machine (this one's, or the same host name) share
  // its cores: the agent decides from this what MPI must be told.
  const bool local = np.host.on_head_machine();
  for (const auto& n : plan.nodes) {
    const bool same_machine =
        local ? n.host.on_head_machine() : !n.host.on_head_machine() && n.host.host == np.host.host;
    if (!same_machine) continue;
    // Logical nodes before this one on its machine: this node binds the slice after theirs.
    if (n.node_rank < np.node_rank) s.host_rank_offset += static_cast<std::int32_t>(n.ranks.size());
    s.ranks_on_host += static_cast<std::int32_t>(n.ranks.size());
  }
  s.bind_to = cfg.bind_to;
  s.map_by = cfg.map_by;
  s.oversubscribe = cfg.oversubscribe;
  s.omp_default = np.omp_default;
  s.container = cfg.container;
  // The hostfile's `container:` for this node beats --container-image.
  if (!np.host.container.empty()) s.container.image = np.host.container;
  // --check: the job stops at Ready (ControllerConfig::probe_only). The
  // workers are described as for the job, and never started: the agent looks
  // for their programs (on the host, or in the node's container), the scripts
  // their interpreters are given, and reads the node's facts.
  if (cfg.probe_only) {
    s.check = true;
    // (In a container the image's files are not the host's: its programs
    // are looked for there, its scripts are not.)
    if (s.container.image.empty()) s.check_scripts = node_scripts(plan, i);
    s.count_gpus = !np.host.gpus.empty();
    s.gpu_test_mb = cfg.gpu_test_mb;
  }
  for (const auto& r : np.ranks) {
    proto::WorkerSpec w;
    w.rank = r.rank;
    w.local_rank = r.local_rank;
    const AppPlan* app =
        plan.apps.empty() ? nullptr : &plan.apps.at(static_cast<std::size_t>(r.app));
    w.argv = app != nullptr ? app->command : plan.command;
    if (np.forwarded) w.env = plan.forwarded;
    w.env.insert(w.env.end(), np.env.begin(), np.env.end());
    if (app != nullptr) w.env.insert(w.env.end(), app->env.begin(), app->env.end());
    for (auto& kv : rank_environment(plan, np, r)) w.env.push_back(std::move(kv));
    if (app != nullptr && !app->workdir.empty()) {
      w.workdir = app->workdir.front() == '/' || cfg.workdir.empty()
                      ? app->workdir
                      : cfg.workdir + "/" + app->workdir;
    }
    w.stdin_pipe = cfg.stdin_rank == kStdinAll || cfg.stdin_rank == r.rank;
    s.workers.push_back(std::move(w));
  }
  return s;
}

namespace {

// What the agent adds to every worker's environment at start (MASTER_*,
// DLAUNCH_STORE_*, the agent's token, TORCHELASTIC_ERROR_FILE, PMIx's and
// Open MPI's variables under --mpi): a generous allowance.
constexpr std::size_t kStartEnvAllowance = 16 * 1024;
// Start, Abort and the other frames besides a node's Setup are small.
constexpr std::size_t kFrameAllowance = 64 * 1024;

[[noreturn]] void refuse(const std::string& field, const std::string& message,
                         const std::string& hint = {}) {
  throw InputError({}, field, message, hint);
}

// execve's view of one string: its bytes and the NUL.
std::size_t arg_bytes(std::size_t n) { return n + 1; }

void check_one(const std::string& name, std::size_t bytes, const std::string& from) {
  if (bytes < limits::kMaxArgStringBytes) return;
  refuse(name,
         fmt::format("{} is {} bytes, over Linux's limit of {} bytes for one variable or argument "
                     "(MAX_ARG_STRLEN), so no worker could start",
                     from, bytes, limits::kMaxArgStringBytes),
         "pass large data in a file");
}

}  // namespace

void check_job_fits(const JobPlan& plan, const ControllerConfig& cfg,
                    const std::vector<std::string>& head_env, std::size_t arg_max) {
  std::size_t head_bytes = 0;
  for (const auto& e : head_env) {
    check_one(e.substr(0, e.find('=')), arg_bytes(e.size()), "dlaunch's own environment variable");
    head_bytes += arg_bytes(e.size()) + sizeof(char*);
  }
  for (const auto& app : plan.apps) {
    for (const auto& a : app.command) check_one("argument", arg_bytes(a.size()), "an argument");
  }
  for (const auto& a : plan.command) check_one("argument", arg_bytes(a.size()), "an argument");
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    const proto::Setup setup = make_node_setup(plan, cfg, i);
    std::string size;  // of the frame when over, or "more than that"
    try {
      const std::size_t frame = proto::encode(setup).size();
      if (frame + kFrameAllowance > proto::kMaxFrameBytes) size = std::to_string(frame) + " bytes";
    } catch (const proto::ProtocolError&) {
      size = "more than that";  // the encoder refuses frames over the limit
    }
    if (!size.empty()) {
      refuse("",
             fmt::format("node {} ({}) has {} rank(s) whose set-up is {}, over the control "
                         "protocol's frame limit of {} bytes",
                         i, plan.nodes[i].host.name, setup.workers.size(), size,
                         proto::kMaxFrameBytes),
             "fewer ranks per node, or less environment per rank");
    }
    const bool local = plan.nodes[i].host.on_head_machine();
    std::vector<bool> app_seen(std::max<std::size_t>(plan.apps.size(), 1));
    for (std::size_t wi = 0; wi < setup.workers.size(); ++wi) {
      const auto& w = setup.workers[wi];
      // Every rank of one app on a node has the same variables: one is enough.
      const auto app = static_cast<std::size_t>(plan.nodes[i].ranks.at(wi).app);
      if (app < app_seen.size() && app_seen[app]) continue;
      if (app < app_seen.size()) app_seen[app] = true;
      std::size_t bytes = (local ? head_bytes : 0) + kStartEnvAllowance;
      for (const auto& a : w.argv) bytes += arg_bytes(a.size()) + sizeof(char*);
      for (const auto& [k, v] : w.env) {
        check_one(k, arg_bytes(k.size() + 1 + v.size()), "variable " + k);
        bytes += arg_bytes(k.size() + 1 + v.size()) + sizeof(char*);
      }
      if (arg_max > 0 && bytes > arg_max) {
        refuse("",
               fmt::format("rank {}'s environment and arguments come to about {} bytes, over "
                           "this system's limit of {} (ARG_MAX){}",
                           w.rank, bytes, arg_max,
                           local ? ", dlaunch's own environment included" : ""),
               "pass large data in a file, or trim the environment (-x, env files, env:)");
      }
    }
  }
}

}  // namespace dlaunch
