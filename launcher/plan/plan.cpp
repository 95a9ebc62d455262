#include "plan/plan.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace dlaunch {
namespace {

// What is this machine's or this session's, not the job's: never sent to a
// node on another machine (docs/environment.md). Everything else the user
// exported travels, so that every rank sees the same environment.
constexpr std::array<std::string_view, 46> kStayNames = {"HOME",
                                                         "USER",
                                                         "LOGNAME",
                                                         "SHELL",
                                                         "PWD",
                                                         "OLDPWD",
                                                         "SHLVL",
                                                         "_",
                                                         "TERM",
                                                         "TERMCAP",
                                                         "COLORTERM",
                                                         "COLUMNS",
                                                         "LINES",
                                                         "DISPLAY",
                                                         "WAYLAND_DISPLAY",
                                                         "HOSTNAME",
                                                         "HOSTTYPE",
                                                         "OSTYPE",
                                                         "MACHTYPE",
                                                         "MAIL",
                                                         "MAILPATH",
                                                         "TMPDIR",
                                                         "TMUX",
                                                         "TMUX_PANE",
                                                         "STY",
                                                         "WINDOW",
                                                         "LS_COLORS",
                                                         "LESSOPEN",
                                                         "LESSCLOSE",
                                                         "PS1",
                                                         "PS2",
                                                         "PS3",
                                                         "PS4",
                                                         "PROMPT_COMMAND",
                                                         "HISTFILE",
                                                         "HISTSIZE",
                                                         "HISTFILESIZE",
                                                         "HISTCONTROL",
                                                         "KRB5CCNAME",
                                                         "GPG_AGENT_INFO",
                                                         "GPG_TTY",
                                                         "LD_PRELOAD",
                                                         "MOTD_SHOWN",
                                                         "SUDO_USER",
                                                         "SUDO_UID",
                                                         "CUDA_VISIBLE_DEVICES"};
// Prefixes of the same: the session's (SSH_, XDG_, DBUS_), a scheduler's or
// an MPI's own bookkeeping for this process (SLURM_, PMIX_, OMPI_ but
// OMPI_MCA_, ...), dlaunch's own (DLAUNCH_ but DLAUNCH_DEBUG), bash's
// exported functions.
constexpr std::array<std::string_view, 18> kStayPrefixes = {
    "SSH_",  "XDG_", "DBUS_", "SUDO_", "SLURM_", "SLURMD_", "PMIX_",      "PMI_",     "OMPI_",
    "PRTE_", "PBS_", "LSB_",  "LSF_",  "SGE_",   "FLUX_",   "BASH_FUNC_", "DLAUNCH_", "HIST"};

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

// Apps that name an image (--container-image) put their nodes' ranks in it:
// one container per node holds the node's ranks (docs/containers.md), so the
// apps sharing a node must agree on its image, an app without one counting as
// the node's own (the hostfile's `container:`, else the job's image, else
// none). The image goes in the node's host.container, where the rest of
// dlaunch looks for a node's image.
void place_app_images(JobPlan& plan, const std::string& job_image) {
  for (auto& node : plan.nodes) {
    const std::string own = node.host.container.empty() ? job_image : node.host.container;
    int named = -1;  // the first app on the node with an image of its own
    for (const auto& r : node.ranks) {
      const AppPlan& app = plan.apps.at(static_cast<std::size_t>(r.app));
      if (!app.container_image.empty() && named < 0) named = r.app;
    }
    if (named < 0) continue;
    const std::string& image = plan.apps.at(static_cast<std::size_t>(named)).container_image;
    for (const auto& r : node.ranks) {
      const AppPlan& app = plan.apps.at(static_cast<std::size_t>(r.app));
      const std::string& its = app.container_image.empty() ? own : app.container_image;
      if (its == image) continue;
      const auto what = [](const std::string& i) {
        return i.empty() ? std::string("on the host (no image)") : "in " + i;
      };
      const SourcePos& other = plan.apps.at(static_cast<std::size_t>(named)).pos;
      const std::string other_name =
          other.line > 0 ? "those of " + other.source + ":" + std::to_string(other.line)
                         : other.source + "'s";
      throw InputError(app.pos, "--container-image",
                       "its ranks run " + what(its) + " but share node " +
                           std::to_string(node.node_rank) + " (" + node.host.name + ") with " +
                           other_name + ", which run " + what(image) +
                           "; one container per node holds the node's ranks",
                       "give the apps of a node the same image, or keep them apart with --host");
    }
    node.host.container = image;
    node.container_app = named;
  }
}

}  // namespace

bool is_forwarded_variable(const std::string& name) {
  if (name.empty() || name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                             "0123456789_") != std::string::npos) {
    return false;  // no portable name (bash's exported functions, say)
  }
  if (name.rfind("OMPI_MCA_", 0) == 0 || name == "DLAUNCH_DEBUG") return true;
  for (auto n : kStayNames) {
    if (name == n) return false;
  }
  for (auto p : kStayPrefixes) {
    if (std::string_view(name).substr(0, p.size()) == p) return false;
  }
  return true;
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
  if (node0.on_head_machine() && !is_local_host(node0.host)) return "127.0.0.1";
  if (node0.host == "localhost" || node0.host == "localhost.localdomain") return "127.0.0.1";
  return node0.host;
}

JobPlan make_plan(const Hostfile& hostfile, const PlanOptions& opts) {
  int total = 0;
  for (const auto& h : hostfile.hosts) total += h.slots;
  std::vector<AppPlan> apps = opts.apps;
  if (apps.empty()) {
    if (opts.np > total) {
      throw InputError({"-n"}, "",
                       std::to_string(opts.np) + " ranks requested but " + hostfile.source +
                           " has only " + std::to_string(total) + " slots",
                       "lower -n, or add hosts or slots");
    }
    AppPlan one;
    one.np = opts.np > 0 ? opts.np : total;
    one.role = "default";
    one.command = opts.command;
    apps.push_back(std::move(one));
  }

  JobPlan plan;
  plan.job_id = opts.job_id;
  plan.command = apps.front().command;

  // Each app takes the next free slots of its nodes, in node order.
  const std::size_t nhosts = hostfile.hosts.size();
  std::vector<std::vector<RankPlan>> on_host(nhosts);
  int next_rank = 0;
  for (std::size_t a = 0; a < apps.size(); ++a) {
    AppPlan& app = apps[a];
    app.first_rank = next_rank;
    for (const auto& name : app.hosts) {
      const bool known = std::any_of(hostfile.hosts.begin(), hostfile.hosts.end(),
                                     [&](const HostEntry& h) { return h.name == name; });
      if (!known) {
        std::string names;
        for (const auto& h : hostfile.hosts) names += (names.empty() ? "" : ", ") + h.name;
        throw InputError(app.pos, "--host", "no node named '" + name + "' in " + hostfile.source,
                         "the nodes are: " + names);
      }
    }
    int left = app.np;
    int free_total = 0;
    for (std::size_t h = 0; h < nhosts && left > 0; ++h) {
      const HostEntry& host = hostfile.hosts[h];
      if (!app.hosts.empty() &&
          std::find(app.hosts.begin(), app.hosts.end(), host.name) == app.hosts.end()) {
        continue;
      }
      int take = host.slots - static_cast<int>(on_host[h].size());
      if (app.nproc_per_node > 0) take = std::min(take, app.nproc_per_node);
      take = std::min(take, left);
      free_total += take;
      for (int i = 0; i < take; ++i) {
        RankPlan r;
        r.rank = next_rank++;
        r.local_rank = static_cast<int>(on_host[h].size());
        r.app = static_cast<int>(a);
        on_host[h].push_back(r);
      }
      left -= take;
    }
    if (left > 0) {
      throw InputError(
          app.pos, "-n",
          std::to_string(app.np) + " ranks requested but " +
              (apps.size() > 1 ? std::string("the slots left for this app on ") : std::string()) +
              hostfile.source + " come to only " + std::to_string(free_total),
          "lower -n, or add hosts or slots");
    }
  }
  plan.world_size = next_rank;
  const int world = plan.world_size;
  for (std::size_t h = 0; h < nhosts; ++h) {
    if (on_host[h].empty()) continue;
    NodePlan node;
    node.node_rank = static_cast<int>(plan.nodes.size());
    node.host = hostfile.hosts[h];
    const int n = static_cast<int>(on_host[h].size());
    node.host.slots = n;
    if (node.host.gpus.size() > static_cast<std::size_t>(n))
      node.host.gpus.resize(static_cast<std::size_t>(n));
    node.ranks = std::move(on_host[h]);
    plan.nodes.push_back(std::move(node));
  }
  // torchrun's ROLE_RANK and ROLE_WORLD_SIZE: among the ranks of one role
  // (apps with the same role name count together), in rank order.
  std::vector<int> role_rank(static_cast<std::size_t>(world));
  for (std::size_t a = 0; a < apps.size(); ++a) {
    int before = 0;
    int size = 0;
    for (std::size_t b = 0; b < apps.size(); ++b) {
      if (apps[b].role != apps[a].role) continue;
      if (b < a) before += apps[b].np;
      size += apps[b].np;
    }
    apps[a].role_world_size = size;
    for (int i = 0; i < apps[a].np; ++i)
      role_rank[static_cast<std::size_t>(apps[a].first_rank) + static_cast<std::size_t>(i)] =
          before + i;
  }
  plan.apps = apps;
  place_app_images(plan, opts.container_image);

  plan.master_addr =
      opts.master_addr.empty() ? default_master_addr(plan.nodes.front().host) : opts.master_addr;

  const int nnodes = static_cast<int>(plan.nodes.size());
  for (auto& node : plan.nodes) {
    // Lowest to highest precedence: forwarded, hostfile env, host env,
    // --env-file and -x, devices.
    // The head's variables reach a node whose agent does not start in
    // dlaunch's environment (sshd's; the job's own under qrsh -inherit and
    // blaunch) through plan.forwarded, kept once for the job, not once per node.
    const Transport t = node.host.transport;
    node.forwarded = t == Transport::kSsh || t == Transport::kSge || t == Transport::kLsf;
    for (const auto& kv : hostfile.env) node.env.push_back(kv);
    for (const auto& kv : node.host.env) node.env.push_back(kv);
    for (const auto& kv : opts.user_env) node.env.push_back(kv);
    if (!node.host.gpus.empty())
      node.env.emplace_back("CUDA_VISIBLE_DEVICES", join_ints(node.host.gpus));
    if (opts.virtual_local_rank) {
      // The devices the node's ranks share: the hostfile's, else (this
      // machine's nodes) the launcher's own CUDA_VISIBLE_DEVICES, as torchrun
      // takes its own.
      std::string visible;
      for (const auto& [k, v] : node.env) {
        if (k == "CUDA_VISIBLE_DEVICES") visible = v;
      }
      if (visible.empty() && node.host.on_head_machine()) {
        for (const auto& e : opts.head_env) {
          if (e.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) visible = e.substr(21);
        }
      }
      std::size_t start = 0;
      while (!visible.empty() && start <= visible.size()) {
        const auto comma = visible.find(',', start);
        node.devices.push_back(visible.substr(start, comma - start));
        start = comma == std::string::npos ? visible.size() + 1 : comma + 1;
      }
    }
    if (opts.collective_timeout_s >= 0)
      node.env.emplace_back("DLAUNCH_COLLECTIVE_TIMEOUT",
                            format_seconds(opts.collective_timeout_s));
    const int local_world = static_cast<int>(node.ranks.size());
    // torchrun's rule: one OpenMP thread per rank unless the user chose.
    if (local_world > 1 && !head_has(opts.head_env, "OMP_NUM_THREADS")) {
      bool set_by_user = false;  // hostfile, --env-file or -x
      for (const auto& [k, v] : node.env) set_by_user |= k == "OMP_NUM_THREADS";
      if (!set_by_user) {
        node.env.emplace_back("OMP_NUM_THREADS", "1");
        node.omp_default = true;
      }
    }
    // Python ranks print every thread's traceback on SIGABRT, which the agent
    // sends them when the job is stopped at --timeout or a stall (the report
    // groups them): unless the user chose.
    if (!head_has(opts.head_env, "PYTHONFAULTHANDLER")) {
      bool set_by_user = false;
      for (const auto& [k, v] : node.env) set_by_user |= k == "PYTHONFAULTHANDLER";
      if (!set_by_user) node.env.emplace_back("PYTHONFAULTHANDLER", "1");
    }
    // torchrun's (local_elastic_agent.py): rank 0's TCPStore is the workers'
    // own at MASTER_PORT (dlaunch's store is not a TCPStore), and NCCL errors
    // abort the rank rather than hang it; a value the user set wins.
    for (const char* name : {"TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING"}) {
      if (head_has(opts.head_env, name)) continue;
      bool set_by_user = false;
      for (const auto& [k, v] : node.env) set_by_user |= k == name;
      if (!set_by_user) {
        node.env.emplace_back(
            name, std::string_view(name) == "TORCHELASTIC_USE_AGENT_STORE" ? "False" : "1");
      }
    }
    node.env.shrink_to_fit();  // kept for the job's life, for every node
    for (auto& r : node.ranks) r.role_rank = role_rank[static_cast<std::size_t>(r.rank)];
  }
  if (std::any_of(plan.nodes.begin(), plan.nodes.end(),
                  [](const NodePlan& n) { return n.forwarded; })) {
    for (const auto& e : opts.head_env) {
      const auto eq = e.find('=');
      if (eq != std::string::npos && is_forwarded_variable(e.substr(0, eq))) {
        plan.forwarded.emplace_back(e.substr(0, eq), e.substr(eq + 1));
      }
    }
  }
  plan.nnodes = nnodes;
  plan.virtual_local_rank = opts.virtual_local_rank;
  plan.restart_count = opts.restart_count;
  plan.max_restarts = opts.max_restarts;
  plan.mpirun_env = opts.mpirun_env;
  return plan;
}

EnvList rank_environment(const JobPlan& plan, const NodePlan& node, const RankPlan& r) {
  const std::string rank = std::to_string(r.rank);
  const AppPlan* app = static_cast<std::size_t>(r.app) < plan.apps.size()
                           ? &plan.apps[static_cast<std::size_t>(r.app)]
                           : nullptr;
  EnvList env = {
      {"RANK", rank},
      {"LOCAL_RANK", plan.virtual_local_rank ? "0" : std::to_string(r.local_rank)},
      {"WORLD_SIZE", std::to_string(plan.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(node.ranks.size())},
      {"GROUP_RANK", std::to_string(node.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(plan.nnodes)},
      {"ROLE_RANK", std::to_string(r.role_rank)},
      {"ROLE_WORLD_SIZE", std::to_string(app != nullptr ? app->role_world_size : plan.world_size)},
      {"ROLE_NAME", app != nullptr ? app->role : std::string("default")},
      {"NODE_RANK", std::to_string(node.node_rank)},
      {"NNODES", std::to_string(plan.nnodes)},
      {"TORCHELASTIC_RUN_ID", plan.job_id},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(plan.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(plan.max_restarts)},
      {"DLAUNCH_RESTART_COUNT", std::to_string(plan.restart_count)},
      {"DLAUNCH_JOB_ID", plan.job_id},
      {"DLAUNCH_NODE_NAME", node.host.name},
  };
  if (plan.virtual_local_rank) {
    const auto i = static_cast<std::size_t>(r.local_rank);
    env.emplace_back("CUDA_VISIBLE_DEVICES",
                     i < node.devices.size() ? node.devices[i] : std::to_string(r.local_rank));
  }
  if (plan.mpirun_env) {
    // Programs written for mpirun read these (Open MPI documents them for its processes).
    const std::string world = std::to_string(plan.world_size);
    const std::string local = std::to_string(r.local_rank);
    env.insert(env.end(), {{"OMPI_COMM_WORLD_SIZE", world},
                           {"OMPI_COMM_WORLD_RANK", rank},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", local},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(node.ranks.size())},
                           {"OMPI_COMM_WORLD_NODE_RANK", local},
                           {"OMPI_UNIVERSE_SIZE", world}});
  }
  return env;
}

}  // namespace dlaunch
