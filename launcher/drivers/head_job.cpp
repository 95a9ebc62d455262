// The head-node driver (drivers/head_job.h).
#include "drivers/head_job.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "check/descriptors.h"
#include "check/exclude_file.h"
#include "check/preflight.h"
#include "cli/controller_config.h"
#include "cli/options.h"
#include "cli/peer_options.h"
#include "controller/controller.h"
#include "controller/setup.h"
#include "dlaunch/clock.h"
#include "dlaunch/process.h"
#include "dlaunch/random.h"
#include "dlaunch/text.h"
#include "drivers/attempts.h"
#include "drivers/detach.h"
#include "drivers/local_inputs.h"
#include "drivers/pernode.h"
#include "hostfile/allocation.h"
#include "jobs/job_journal.h"
#include "jobs/registry.h"
#include "net/job_network.h"
#include "output/console_style.h"
#include "output/output_sink.h"
#include "output/secret_mask.h"
#include "plan/local_placement.h"
#include "plan/node_pool.h"
#include "plan/plan.h"
#include "plan/user_env.h"
#include "transport/link_factory.h"
#include "transport/local_transport.h"
#include "transport/scheduler_transport.h"
#include "transport/slurm_transport.h"
#include "transport/ssh/agent_install.h"
#include "transport/ssh/host_options.h"
#include "transport/ssh/known_hosts.h"

namespace dl = dlaunch;
namespace fs = std::filesystem;

namespace {

// The batch allocation dlaunch runs in (Flux, Slurm, PBS, LSF, SGE; the
// first by docs/schedulers.md's precedence), or nullopt.
std::optional<dl::Allocation> find_allocation() {
  dl::AllocationProbe probe;
  probe.env = dl::current_environment();
  probe.this_host = dl::host_name();
  probe.read_file = [](const std::string& path, const std::string& var) {
    return dl::read_input_file(path, var);
  };
  probe.flux_resource_r = [] { return dl::flux_resource_r(); };
  probe.remote_start_program = dl::remote_start_program;
  probe.on_path = [&env = probe.env](const std::string& program) {
    return !dl::find_program(program, env, "").empty();
  };
  auto a = dl::find_allocation(probe);
  if (a && !a->ignored.empty()) {
    // Another scheduler's variables too (a nested or inherited environment):
    // say which allocation was taken, so a surprise is one line away.
    std::string others;
    for (const auto& i : a->ignored) others += (others.empty() ? "" : ", ") + i;
    fmt::print(stderr, "dlaunch: hosts from the {} allocation ({}); also set, ignored: {}\n",
               dl::scheduler_name(a->scheduler), a->from, others);
  }
  return a;
}

// --detach: where the head's log is made (the jobs folder, so that it can
// become the record's head.log); empty where there will be no record
// (JobJournal says why): the log then stays in memory.
std::string detach_log_dir() {
  try {
    return dl::jobs_dir(true);
  } catch (const dl::Error&) {
    return {};
  }
}

// A new head (dlaunch attach --recover): the hosts of the attempt it takes
// over, in that attempt's node order, each as the hostfile says it now.
void take_over_hosts(dl::Hostfile& hosts, const dl::Options::Takeover& t,
                     const std::string& job_id) {
  std::vector<dl::HostEntry> kept;
  for (const auto& name : t.hosts) {
    const auto it = std::find_if(hosts.hosts.begin(), hosts.hosts.end(),
                                 [&](const dl::HostEntry& h) { return h.name == name; });
    if (it == hosts.hosts.end()) {
      throw dl::InputError(
          {hosts.source}, "",
          fmt::format("host '{}', a node of job {}, is not in it any more", name, job_id),
          "give the job's hosts as they were (its record names them: dlaunch "
          "status " +
              job_id + ")");
    }
    kept.push_back(*it);
  }
  hosts.hosts = std::move(kept);
}

dl::Hostfile load_hosts(const dl::Options& o, std::optional<dl::Allocation>& allocation) {
  if (!o.hostfile.empty()) return dl::parse_hostfile_file(o.hostfile);
  if (!o.hosts.empty()) return dl::parse_hosts_argument(o.hosts);
  // Inside a batch allocation its nodes are the hosts (as mpirun does); -n
  // then takes the first N of its slots.
  allocation = find_allocation();
  if (allocation) return allocation->hosts;
  if (o.np > dl::limits::kMaxRanksPerNode) {
    throw dl::InputError({"-n"}, "",
                         std::to_string(o.np) + " ranks on this machine is over the limit of " +
                             std::to_string(dl::limits::kMaxRanksPerNode) + " ranks per node",
                         "give hosts with -H to spread them");
  }
  if (o.np > 0) return dl::local_hostfile(o.np);
  // -N 2 ./prog, deepspeed --num_gpus 2 train.py: that many ranks here.
  if (o.filter.nproc_per_node > 0) return dl::local_hostfile(o.filter.nproc_per_node);
  // deepspeed --include localhost:0,1 train.py: this machine, a slot per GPU.
  if (!o.filter.include.empty() || !o.filter.exclude.empty()) {
    const std::string option = o.filter.include.empty() ? "--exclude" : "--include";
    try {
      return dl::local_hostfile(dl::resolve_nproc("gpu", dl::current_environment()));
    } catch (const dl::InputError&) {
      throw dl::InputError({option}, "",
                           "no hosts given, and this machine has no GPU to choose from (no "
                           "CUDA_VISIBLE_DEVICES, no /dev/nvidiaN)",
                           "give the hosts with -H or --hostfile, or -n N for this machine");
    }
  }
  throw dl::InputError(
      {}, "", "no hosts given",
      "use -H HOSTFILE, -H host:slots,..., --hostfile FILE, or -n N for this machine");
}

// --transport ssh|slurm|sge|lsf|flux: every node that way; auto keeps what
// the hosts say. A scheduler's nodes need its allocation to start tasks in
// (outside one, srun would queue a new job per node; qrsh, blaunch and flux
// would fail or do the same).
void apply_transport(dl::Hostfile& hosts, std::optional<dl::Transport> transport) {
  for (auto& h : hosts.hosts) {
    if (transport) h.transport = *transport;
    const dl::SourcePos where = transport ? dl::SourcePos{"--transport"} : h.pos;
    const std::string field = transport ? "" : "transport";
    if (h.transport == dl::Transport::kSlurm && !dl::in_slurm_allocation()) {
      throw dl::InputError(where, field, "slurm needs a Slurm allocation (SLURM_JOB_ID is not set)",
                           "run dlaunch inside salloc or an sbatch script");
    }
    const bool scheduler = h.transport == dl::Transport::kSge ||
                           h.transport == dl::Transport::kLsf ||
                           h.transport == dl::Transport::kFlux;
    if (scheduler && !dl::in_allocation_of(h.transport)) {
      throw dl::InputError(where, field,
                           std::string(dl::transport_name(h.transport)) + " needs " +
                               dl::allocation_marker(h.transport),
                           "run dlaunch inside the scheduler's job, or use --transport ssh");
    }
  }
}

// The ranks the job would have, against the limit, before the plan makes
// anything per rank.
void check_job_size(const dl::Hostfile& hosts, const dl::Options& o) {
  long long slots = 0;
  for (const auto& h : hosts.hosts) slots += h.slots;
  const long long ranks = o.np > 0 ? std::min<long long>(o.np, slots) : slots;
  // Logical nodes of this machine share it: their ranks count as one node's.
  long long here = 0;
  for (const auto& h : hosts.hosts) here += h.on_head_machine() ? h.slots : 0;
  if (o.np > 0) here = std::min<long long>(here, o.np);
  if (here > dl::limits::kMaxRanksPerNode) {
    throw dl::InputError({hosts.source}, "slots",
                         std::to_string(here) +
                             " ranks on this machine (its logical nodes "
                             "together) is over the limit of " +
                             std::to_string(dl::limits::kMaxRanksPerNode) + " ranks per node",
                         "spread them over hosts, or use -n to run fewer");
  }
  if (ranks > dl::limits::kMaxRanksPerJob) {
    throw dl::InputError({hosts.source}, "slots",
                         "the hosts have " + std::to_string(slots) + " slots, over the limit of " +
                             std::to_string(dl::limits::kMaxRanksPerJob) + " ranks per job",
                         "use -n, --num-nodes or --include to run on fewer");
  }
}

// A hostfile's `identity:` is a file of this machine: one that is not there
// would only show as an authentication failure once connecting.
// `identity: ~/KEY` as IdentityFile reads it: ~ is the passwd entry's home
// (the one ssh takes, whatever $HOME says), then every identity is checked.
void check_identity_files(dl::Hostfile& hosts) {
  for (auto& h : hosts.hosts) {
    if (h.identity == "~" || h.identity.starts_with("~/")) {
      h.identity = dl::ssh::home_directory() + h.identity.substr(1);
    }
    if (h.identity.empty() || ::access(h.identity.c_str(), R_OK) == 0) continue;
    throw dl::InputError(h.pos, "identity",
                         "identity file '" + h.identity + "' of host '" + h.host +
                             "' cannot be read: " + std::strerror(errno),
                         "give the path of a private key on this machine");
  }
}

// DeepSpeed's .deepspeed_env (~, then the current directory): variables for
// every rank, under --env-file and -x. Said on stderr, since nothing on the
// command line names the files.
dl::EnvList deepspeed_environment(const std::vector<std::string>& head_env) {
  const char* home = std::getenv("HOME");
  dl::EnvList out;
  for (const auto& path :
       dl::deepspeed_env_files(head_env, home != nullptr ? home : "", fs::current_path())) {
    const auto vars = dl::parse_deepspeed_env(path);
    std::string names;
    for (const auto& [k, v] : vars) names += (names.empty() ? "" : ", ") + k;
    if (!vars.empty()) {
      std::fprintf(stderr, "dlaunch: every rank gets %s from %s (DeepSpeed's environment file)\n",
                   dl::printable(names).c_str(), dl::printable(path).c_str());
    }
    out.insert(out.end(), vars.begin(), vars.end());
  }
  return out;
}

std::string join_env(const dl::EnvList& env, dl::SecretMask& mask) {
  std::string out;
  for (const auto& [k, v] : env) out += k + "=" + mask(k, v) + " ";
  return out;
}

void print_dry_run(const dl::JobPlan& plan, const dl::Options& o, const std::string& agent,
                   const dl::ssh::HostSettings& ssh, const dl::ssh::OpensshOptions& ssh_openssh,
                   const std::optional<dl::LocalPlacement>& placed,
                   const std::optional<dl::Allocation>& allocation) {
  const std::string port =
      o.master_port > 0 ? std::to_string(o.master_port) : "<reserved by node 0>";
  dl::SecretMask mask(o.show_secrets);
  std::vector<std::string> app_cmd;
  for (const auto& app : plan.apps) {
    std::string cmd;
    for (std::size_t k = 0; k < app.command.size(); ++k) {
      if (!cmd.empty()) cmd += ' ';
      cmd += mask.argument(k > 0 ? std::string_view(app.command[k - 1]) : std::string_view(),
                           app.command[k]);
    }
    app_cmd.push_back(std::move(cmd));
  }
  const std::string master_addr = dl::net::dry_run_master_addr(plan, !o.master_addr.empty());
  fmt::print(
      "job {}: {} rank(s) on {} node(s), MASTER_ADDR={} MASTER_PORT={}; comm store on node 0 "
      "(DLAUNCH_STORE_ADDR/PORT/SECRET set at start)\n",
      plan.job_id, plan.world_size, plan.nodes.size(), master_addr, port);
  if (allocation) {
    fmt::print("hosts: the {} allocation, {}; other nodes start with {}\n",
               dl::scheduler_name(allocation->scheduler), allocation->from,
               allocation->remote_start);
  }
  const auto ifnames = dl::net::dry_run_interface_note(plan, !o.master_addr.empty(), o.mpi);
  if (!ifnames.empty()) fmt::print("network: {}\n", ifnames);
  if (!o.container.image.empty()) {
    // Where each node's ranks run (docs/containers.md); the runtime's
    // command lines are the agent's, made on the node.
    const auto& c = o.container;
    std::string more;
    if (!c.mounts.empty()) more += fmt::format(", mounts {}", fmt::join(c.mounts, ","));
    if (!c.workdir.empty()) more += ", workdir " + dl::shell_quote(c.workdir);
    if (!c.env.empty()) more += fmt::format(", host values of {}", fmt::join(c.env, ","));
    if (c.mount_home) more += ", home mounted";
    if (c.entrypoint) more += ", through the image's entrypoint";
    fmt::print("container: one per node of image {}, runtime {}, pull {}{} (docs/containers.md)\n",
               c.image, c.runtime, c.pull, more);
  }
  for (const auto& n : plan.nodes) {
    if (n.host.container.empty()) continue;
    const std::string from =
        n.container_app < 0 ? std::string("hostfile")
                            : "--container-image of app " + std::to_string(n.container_app + 1);
    fmt::print("container: node {} ({}): image {} ({}), runtime {}, pull {}\n", n.node_rank,
               n.host.name, n.host.container, from, o.container.runtime, o.container.pull);
  }
  // One environment on every node: what SSH (and SGE, LSF) nodes get of
  // dlaunch's own, and why (local nodes inherit all of it).
  if (!plan.forwarded.empty()) {
    fmt::print(
        "forwarded to SSH, SGE and LSF nodes (dlaunch's environment but what belongs to this "
        "machine or session, docs/environment.md): {}\n",
        join_env(plan.forwarded, mask));
  }
  if (plan.apps.size() > 1) {
    for (std::size_t k = 0; k < plan.apps.size(); ++k) {
      const auto& app = plan.apps[k];
      std::string extra;
      for (const auto& [name, value] : app.env) {
        extra += " " + name + "=" + mask(name, value);
      }
      fmt::print("app {}: ranks {}-{}, ROLE_NAME={}{}{}{}{}: {}\n", k + 1, app.first_rank,
                 app.first_rank + app.np - 1, app.role,
                 app.hosts.empty() ? "" : ", hosts " + fmt::format("{}", fmt::join(app.hosts, ",")),
                 app.workdir.empty() ? "" : ", wdir " + dl::shell_quote(app.workdir),
                 app.container_image.empty() ? "" : ", image " + app.container_image,
                 extra.empty() ? "" : ", env" + extra, app_cmd[k]);
    }
  }
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    const auto& n = plan.nodes[i];
    const auto& h = n.host;
    const bool local = h.on_head_machine();
    const bool slurm = h.transport == dl::Transport::kSlurm;
    const bool scheduler = !local && !slurm && h.transport != dl::Transport::kSsh;
    // Contiguous ranks as a range; MPMD apps on some nodes only can leave gaps.
    std::string ranks;
    for (std::size_t k = 0; k < n.ranks.size(); ++k) {
      std::size_t e = k;
      while (e + 1 < n.ranks.size() && n.ranks[e + 1].rank == n.ranks[e].rank + 1) ++e;
      ranks += (ranks.empty() ? "" : ",") + std::to_string(n.ranks[k].rank) + "-" +
               std::to_string(n.ranks[e].rank);
      k = e;
    }
    fmt::print("node {}: {} ({}, {}), ranks {}\n", n.node_rank, h.name, h.host,
               dl::transport_name(h.transport), ranks);
    const std::string agent_path = h.agent.empty() ? agent : h.agent;
    if (h.transport == dl::Transport::kSsh && h.ssh_client == dl::SshClient::kOpenssh) {
      std::string argv;
      for (const auto& a : dl::ssh::openssh_argv(h, ssh_openssh)) argv += dl::shell_quote(a) + " ";
      fmt::print("  ssh: {}(OpenSSH reads its own configuration)\n", argv);
    } else if (h.transport == dl::Transport::kSsh) {
      for (const auto& line : dl::ssh::describe(dl::ssh::resolve_host(h, ssh)))
        fmt::print("  {}\n", line);
    } else if (scheduler) {
      std::string argv;
      for (const auto& a : dl::remote_start_command(h.transport, h.host, {agent_path})) {
        argv += (argv.empty() ? "" : " ") + dl::shell_quote(a);
      }
      fmt::print("  start: {}\n", argv);
    }
    fmt::print("  agent: {}\n", dl::shell_quote(agent_path));
    fmt::print("  inherits: {}\n",
               local ? "dlaunch's whole environment"
               : slurm || h.transport == dl::Transport::kFlux
                   ? fmt::format("dlaunch's whole environment ({} exports it), then the node env "
                                 "below",
                                 slurm ? "srun" : "flux run")
               : h.transport == dl::Transport::kSge
                   ? "the job's environment on that node (qrsh -inherit passes not dlaunch's), "
                     "then the forwarded variables (above), then the node env below"
               : h.transport == dl::Transport::kLsf
                   ? "what blaunch gives a task on " + h.host +
                         ", then the forwarded variables (above), then the node env below"
                   : "what sshd gives a command on " + h.host +
                         ", then the forwarded variables (above), then the node env below");
    if (!n.env.empty()) fmt::print("  node env: {}\n", join_env(n.env, mask));
    for (const auto& r : n.ranks) {
      fmt::print("  rank {}: {}MASTER_ADDR={} MASTER_PORT={} {}\n", r.rank,
                 join_env(dl::rank_environment(plan, n, r), mask), dl::shell_quote(master_addr),
                 dl::shell_quote(port), app_cmd.at(static_cast<std::size_t>(r.app)));
    }
    if (placed || !local) {
      if (!placed && !o.bind_to.empty() && o.bind_to != "none") {
        fmt::print("  placement: mapped by the node's agent on its own topology at start\n");
      } else if (placed) {
        for (const auto& line : dl::describe_placement(*placed, plan, i))
          fmt::print("  {}\n", line);
      }
    }
  }
  if (mask.hidden() > 0) {
    fmt::print(
        "{} value(s) hidden as possible secrets (by name or shape); --show-secrets shows them\n",
        mask.hidden());
  }
}
// --preflight: --check's checks on every host, spares included (a spare that
// fails is no spare), before anything starts. A failing node is left out as
// a lost node would be (a spare in its place, or fewer nodes under
// --min-nodes); without --spares or --min-nodes, or with too few nodes
// left, the job does not start. The table goes to stderr when a node
// failed. False: do not start (the reason said on stderr).
struct LeftOut {
  std::string host;
  bool spare = false;
  std::string reason;
};
bool preflight(const dl::Hostfile& hosts, const dl::PlanOptions& po, dl::NodePool& pool,
               dl::JobPlan& plan, const dl::PreflightOptions& opts, int np,
               std::vector<LeftOut>& left_out, std::vector<dl::ExcludedHost>& failing) {
  // Every host with all its slots, whatever -n asks: each is checked.
  dl::PlanOptions every = po;
  every.np = 0;
  every.apps.clear();
  if (every.command.empty() && !po.apps.empty()) every.command = po.apps.front().command;
  if (!po.apps.empty() && !po.apps.front().container_image.empty()) {
    // The first app's program, looked for where it runs: in its image.
    dl::AppPlan first = po.apps.front();
    first.np = 0;
    for (const auto& h : hosts.hosts) first.np += h.slots;
    first.hosts.clear();
    first.nproc_per_node = 0;
    every.apps = {std::move(first)};
  }
  const auto report = dl::check_nodes(dl::make_plan(hosts, every), opts);
  const auto why = [](const dl::PreflightReport::Node& n) {
    std::string s = n.problems.empty() ? "failed" : n.problems.front();
    if (n.problems.size() > 1) s += fmt::format(" (and {} more)", n.problems.size() - 1);
    return "preflight: " + s;
  };
  int failed = 0;
  for (const auto& n : report.nodes) {
    if (n.ok) continue;
    ++failed;
    failing.emplace_back(n.name, why(n));
  }
  if (failed == 0) {
    dl::write_all(2, fmt::format("dlaunch: preflight: {} node(s) passed\n", report.nodes.size()));
    return true;
  }
  dl::write_all(2, report.text);
  for (const auto& n : report.nodes) {
    if (!n.ok && pool.drop_spare(n.name, why(n))) {
      dl::write_all(2, fmt::format("dlaunch: preflight: spare {} left out\n", n.name));
      left_out.push_back({.host = n.name, .spare = true, .reason = why(n)});
    }
  }
  for (const auto& n : report.nodes) {
    if (n.ok) continue;
    const auto& active = pool.active().hosts;
    const auto it = std::find_if(active.begin(), active.end(),
                                 [&n](const dl::HostEntry& h) { return h.name == n.name; });
    if (it == active.end()) continue;  // a spare, or left out with its host already
    if (!pool.elastic()) {
      dl::write_all(2, fmt::format("dlaunch: preflight: node {} failed; not starting (--spares "
                                   "or --min-nodes would leave it out and run on the rest)\n",
                                   n.name));
      return false;
    }
    const auto change = pool.node_lost(static_cast<int>(it - active.begin()), why(n));
    left_out.push_back({.host = n.name, .spare = false, .reason = why(n)});
    dl::write_all(2, "dlaunch: preflight: " + change.message + "\n");
    if (!change.restart) {
      dl::write_all(2, "dlaunch: preflight: not starting: too few nodes\n");
      return false;
    }
  }
  int slots = 0;
  for (const auto& h : pool.active().hosts) slots += h.slots;
  if (np > slots) {
    dl::write_all(2, fmt::format("dlaunch: preflight: not starting: -n {} needs {} slots and the "
                                 "nodes left have {}\n",
                                 np, np, slots));
    return false;
  }
  plan = dl::make_plan(pool.active(), po);
  return true;
}

}  // namespace

int dlaunch::run_head_job(Options& o, const std::vector<std::string>& argv) {
  const auto to_ms = dl::option_ms;
  if (o.command.empty() && !o.check)
    throw dl::InputError({}, "", "no program to run", "dlaunch [options] PROGRAM [ARGS...]");

  std::optional<dl::Allocation> allocation;
  dl::Hostfile hosts = dl::apply_node_filter(load_hosts(o, allocation), o.filter);
  // A new head (dlaunch attach --recover): the attempt's hosts, in its order.
  if (o.takeover) take_over_hosts(hosts, *o.takeover, o.job_id);
  // The hostfile's `health:` thresholds are input, --check or not: a bad one
  // is refused here, naming its line, before anything starts.
  for (const auto& h : hosts.hosts) (void)dl::health::node_thresholds(h.health, {});
  // --exclude-file: the hosts an earlier check found failing stay out (a
  // check itself looks at every host again, and rewrites the file).
  if (!o.exclude_file.empty()) dl::check_exclude_file(o.exclude_file);
  if (!o.exclude_file.empty() && !o.check && !o.takeover) {
    const auto listed = dl::read_exclude_file(o.exclude_file);
    std::string names;
    std::erase_if(hosts.hosts, [&](const dl::HostEntry& h) {
      if (std::find(listed.begin(), listed.end(), h.name) == listed.end()) return false;
      names += (names.empty() ? "" : ", ") + h.name;
      return true;
    });
    if (hosts.hosts.empty()) {
      throw dl::InputError({"--exclude-file"}, "",
                           "every host of the job is listed in '" + o.exclude_file + "'",
                           "take the hosts that were mended out of the file, or check them again "
                           "with --check --exclude-file");
    }
    if (!names.empty()) {
      dl::write_all(2,
                    fmt::format("dlaunch: left out as {} lists them: {}\n", o.exclude_file, names));
    }
  }
  apply_transport(hosts, o.transport);
  if (o.ssh_client) {
    for (auto& h : hosts.hosts) h.ssh_client = *o.ssh_client;
  }
  check_job_size(hosts, o);
  check_identity_files(hosts);
  if (!o.container_option_alone.empty() && o.container.image.empty() &&
      std::none_of(hosts.hosts.begin(), hosts.hosts.end(),
                   [](const dl::HostEntry& h) { return !h.container.empty(); }) &&
      std::none_of(o.apps.begin(), o.apps.end(),
                   [](const dl::AppSpec& a) { return !a.container_image.empty(); })) {
    throw dl::InputError({o.container_option_alone}, "",
                         "needs --container-image, a hostfile `container:` or an app's "
                         "--container-image",
                         "name the image the ranks run in");
  }
  // mpirun -hostfile f -host aa ./a.out: as many ranks as aa has slots.
  for (auto& a : o.apps) {
    if (a.np > 0) continue;
    for (const auto& h : hosts.hosts) {
      if (std::find(a.hosts.begin(), a.hosts.end(), h.name) != a.hosts.end()) a.np += h.slots;
    }
    o.np += a.np;
  }
  dl::PlanOptions po;
  po.np = o.np;
  po.job_id = o.job_id.empty() ? dl::random_hex(8) : o.job_id;
  po.master_addr = o.master_addr;
  po.command = o.command;
  po.head_env = dl::current_environment();
  po.user_env = deepspeed_environment(po.head_env);
  for (auto& kv : dl::user_environment(o.env_files, o.exports, po.head_env)) {
    po.user_env.push_back(std::move(kv));
  }
  po.mpirun_env = !o.no_mpi;
  // -x MASTER_PORT=N pins the ranks' MASTER_PORT, as --master-port does.
  if (const int pinned = dl::pinned_master_port(po.user_env); pinned != 0) {
    if (o.master_port != 0 && o.master_port != pinned) {
      throw dl::InputError(
          {"-x"}, "MASTER_PORT",
          fmt::format("MASTER_PORT={} and --master-port {} disagree", pinned, o.master_port),
          "give the port once");
    }
    o.master_port = pinned;
  }
  po.max_restarts = o.max_restarts;
  if (o.takeover) po.restart_count = o.takeover->restarts;
  po.collective_timeout_s = o.collective_timeout_s;
  po.virtual_local_rank = o.pernode.virtual_local_rank;
  for (const auto& a : o.apps) {
    dl::AppPlan app;
    app.np = a.np;
    // One program (--host alone, an app file of one line): torchrun's role.
    app.role = o.apps.size() == 1 && a.role.empty() ? "default" : dl::app_role(a);
    app.hosts = a.hosts;
    app.nproc_per_node = a.nproc_per_node;
    app.env = dl::user_environment(a.env_files, a.exports, po.head_env);
    app.workdir = a.workdir;
    app.container_image = a.container_image;
    app.command = a.command;
    app.pos = a.pos;
    po.apps.push_back(std::move(app));
  }
  po.container_image = o.container.image;
  // --spares: the last hosts wait; --min-nodes: lost nodes are dropped.
  // (A new head runs on the hosts the job runs on: the spares not taken
  // before its head was lost stay out.)
  dl::NodePool pool(hosts, {.min_nodes = o.min_nodes, .spares = o.takeover ? 0 : o.spares});
  dl::JobPlan plan = dl::make_plan(pool.active(), po);
  int stdin_rank = dl::kStdinNone;
  if (o.stdin_target.kind == dl::StdinTarget::Kind::kAll) {
    stdin_rank = dl::kStdinAll;
  } else if (o.stdin_target.kind == dl::StdinTarget::Kind::kRank) {
    stdin_rank = o.stdin_target.rank;
    if (stdin_rank >= plan.world_size) {
      throw dl::InputError(
          {"--stdin"}, "",
          "rank " + std::to_string(stdin_rank) + " is not in the job (it has " +
              std::to_string(plan.world_size) + " rank(s))",
          "give a rank from 0 to " + std::to_string(plan.world_size - 1) + ", all or none");
    }
  }
  const std::vector<int> shown_ranks =
      o.ranks.empty() ? std::vector<int>{} : dl::parse_rank_list(o.ranks, plan.world_size);

  const std::string workdir = o.workdir.empty() ? fs::current_path().string() : o.workdir;
  const std::string agent = o.agent_path.empty() ? dl::default_agent_path() : o.agent_path;
  dl::ssh::TransportOptions ssh_opts;
  ssh_opts.concurrency = o.ssh_concurrency;
  auto& hs = ssh_opts.hosts;
  hs.connect_timeout = to_ms(o.connect_timeout_s);
  hs.connect_timeout_given = o.connect_timeout_given;
  hs.host_key_policy = o.host_key_check;
  hs.host_key_policy_given = o.host_key_check_given;
  hs.keepalive_s = std::max(1, static_cast<int>(o.heartbeat_timeout_s / 3));
  // Nodes without an agent at the expected path get a copy of this one,
  // unless the path is forced or the user said no.
  if (o.agent_path.empty() && !o.no_agent_upload) {
    ssh_opts.agent_image = dl::ssh::packed_agent_for(agent);
  }
  ssh_opts.openssh = {.config_file = o.ssh_config,
                      .host_key_policy = hs.host_key_policy,
                      .host_key_policy_given = hs.host_key_policy_given,
                      .connect_timeout_s = o.connect_timeout_given
                                               ? static_cast<int>(std::ceil(o.connect_timeout_s))
                                               : 0,
                      .known_hosts = {}};
  // The OpenSSH configuration, read (and checked) once, only when a node is
  // reached over SSH; every SSH node's options are resolved now, so that a
  // mistake in them stops the job before anything starts.
  // Spares included: one that cannot be resolved must stop the job now, not
  // when it is needed.
  const bool any_ssh = std::any_of(hosts.hosts.begin(), hosts.hosts.end(), [](const auto& h) {
    return h.transport == dl::Transport::kSsh && h.ssh_client == dl::SshClient::kLibssh2;
  });
  long long proxied = 0;  // SSH nodes behind a jump host or ProxyCommand
  if (any_ssh) {
    hs.context = dl::ssh::ResolveContext::current();
    dl::ssh::LoadOptions lo;
    if (!o.ssh_config.empty()) lo.config_file = o.ssh_config;
    lo.home = hs.context.home;
    hs.config = std::make_shared<const dl::ssh::SshConfig>(dl::ssh::SshConfig::load(lo));
    for (const auto& h : hosts.hosts) {
      if (h.transport != dl::Transport::kSsh || h.ssh_client != dl::SshClient::kLibssh2) continue;
      const auto c = dl::ssh::resolve_host(h, hs);
      if (!c.jumps.empty() || !c.proxy_command.empty()) ++proxied;
    }
  } else if (!o.ssh_config.empty() && o.ssh_config != "none") {
    (void)dl::ssh::SshConfig::load({.config_file = o.ssh_config});  // still checked
  }
  // One descriptor per SSH node, two per local node: a job over the limit
  // would fail part-way, with some agents started (EMFILE on a connection).
  if (!o.dry_run) {
    dl::check_descriptors(plan, !o.output_dir.empty() || !o.output_filename.empty(), proxied);
  }
  // --check's checks, for --check itself or before the job (--preflight).
  const dl::PreflightOptions check_options{.agent_path = agent,
                                           .workdir = workdir,
                                           .ssh = ssh_opts,
                                           .threshold_words = o.check_threshold_words,
                                           .json = o.json,  // only with --check
                                           // =quick: no network test between nodes
                                           .bandwidth_round = o.check_quick
                                                                  ? std::chrono::milliseconds(0)
                                                                  : std::chrono::milliseconds(1000),
                                           // =quick: no GPU test either
                                           .gpu_test = !o.check_quick,
                                           .container = o.container,
                                           .start_timeout = dl::option_ms(o.start_timeout_s)};
  if (o.check) {
    const auto report = dl::check_nodes(plan, check_options);
    fmt::print("{}", report.text);
    std::fflush(stdout);
    if (!o.exclude_file.empty()) {
      std::vector<dl::ExcludedHost> failed;
      for (const auto& n : report.nodes) {
        if (!n.ok) failed.emplace_back(n.name, n.problems.empty() ? "" : n.problems.front());
      }
      dl::write_exclude_file(o.exclude_file, failed);
    }
    return report.exit_code;
  }
  std::vector<LeftOut> left_out;  // by --preflight, for the job's events
  if (o.preflight && !o.dry_run && !o.takeover) {
    std::vector<dl::ExcludedHost> failing;
    const bool start = preflight(hosts, po, pool, plan, check_options, o.np, left_out, failing);
    if (!o.exclude_file.empty()) dl::append_exclude_file(o.exclude_file, failing);
    if (!start) return 1;
  }
  // The ranks of this machine's nodes, placed as their agents will place
  // them: a policy this machine cannot meet stops here (exit 2).
  const auto placed = dl::place_local_nodes(
      plan,
      {.bind_to = o.bind_to, .map_by = o.map_by, .oversubscribe = o.oversubscribe, .mpi = o.mpi});
  if (o.dry_run) {
    print_dry_run(plan, o, agent, hs, ssh_opts.openssh, placed, allocation);
    for (std::size_t k = pool.active().hosts.size(); k < hosts.hosts.size(); ++k) {
      fmt::print("spare: {} ({})\n", hosts.hosts[k].name, hosts.hosts[k].host);
    }
    return 0;
  }
  // What can be checked on this machine is checked before anything starts;
  // SSH nodes check the same in their agent before any worker starts.
  bool any_local = false;
  // A node whose ranks run in a container looks for the program in its
  // image, where it may be alone (agent/runtime/): the program is looked for
  // here only when a node of this machine runs it from this machine's files.
  bool any_local_native = false;
  for (const auto& n : plan.nodes) {
    if (!n.host.on_head_machine()) continue;
    any_local = true;
    if (o.container.image.empty() && n.host.container.empty()) any_local_native = true;
    if (n.host.agent.empty()) {
      dl::require_agent_here(agent, {"--agent"}, "");
    } else {
      dl::require_agent_here(n.host.agent, n.host.pos, "agent");
    }
  }
  if (any_local) dl::require_directory_here(workdir, {"--wdir"}, "");
  for (const auto& app : plan.apps) {
    if (!any_local) break;
    const std::string dir = app.workdir.empty()          ? workdir
                            : app.workdir.front() == '/' ? app.workdir
                                                         : workdir + "/" + app.workdir;
    if (!app.workdir.empty()) dl::require_directory_here(dir, app.pos, "--wdir");
    if (any_local_native) {
      dl::require_program_here(app.command.front(), dl::current_environment(), dir,
                               plan.apps.size() > 1 ? app.pos : dl::SourcePos{});
    }
  }

  // --detach: from here on the head is a daemon; the command returns once
  // every node is ready (or with the start failure's exit status). Before
  // the output's thread or any connection exists: a fork keeps one thread.
  // --head-grace: a detached job's ranks outlive its head for a while unless
  // told otherwise. A scheduler's task (srun, qrsh, blaunch, flux) ends with
  // the process that started it, the head: such nodes have none.
  double head_grace_s = o.head_grace_s >= 0 ? o.head_grace_s
                        : o.detach          ? dl::kDetachedHeadGrace
                                            : 0;
  if (head_grace_s > 0) {
    for (const auto& n : plan.nodes) {
      const auto t = n.host.transport;
      if (t == dl::Transport::kLocal || t == dl::Transport::kSsh) continue;
      if (o.head_grace_s > 0) {
        throw dl::InputError({"--head-grace"}, "",
                             fmt::format("node {} ({}) is a {} task, which ends with the head "
                                         "that started it",
                                         n.node_rank, n.host.name, dl::transport_name(t)),
                             "leave --head-grace out, or reach the node over SSH");
      }
      head_grace_s = 0;
    }
  }
  std::optional<int> command_status;
  std::optional<dl::DetachedHead> detached =
      o.detach ? dl::detach_head(command_status, detach_log_dir()) : std::nullopt;
  if (command_status) return *command_status;

  std::vector<std::string> node_of_rank(static_cast<std::size_t>(plan.world_size));
  for (const auto& n : plan.nodes) {
    for (const auto& r : n.ranks) node_of_rank[static_cast<std::size_t>(r.rank)] = n.host.name;
  }
  const auto color = o.color;
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  const auto per_rank_files = o.output_filename.empty()
                                  ? dl::OutputFilename{}
                                  : dl::parse_output_filename(o.output_filename);
  dl::OutputSink sink({.prefix = o.prefix,
                       .output_dir = o.output_dir,
                       .mpirun_dir = per_rank_files.dir,
                       .mpirun_jobid = per_rank_files.jobid,
                       // Detached, the ranks' output is in the record only.
                       .console = per_rank_files.copy && !o.detach,
                       .merge_stderr = o.merge_stderr,
                       .job_id = plan.job_id,
                       .node_of_rank = std::move(node_of_rank),
                       .ranks = shown_ranks,
                       .timestamps = o.timestamps,
                       .color_stdout = dl::color_enabled(color, ::isatty(1) == 1, no_color, term),
                       .color_stderr = dl::color_enabled(color, ::isatty(2) == 1, no_color, term)});
  dl::ControllerConfig config = dl::controller_config(o);
  config.agent_path = agent;
  config.workdir = workdir;
  config.master_port = static_cast<std::uint16_t>(o.master_port);
  config.master_addr_explicit = !o.master_addr.empty();
  config.progress = ::isatty(2) == 1;
  config.mpi = o.mpi;
  config.store_secret = o.takeover ? o.takeover->secret : dl::random_hex(32);
  config.store_port = static_cast<std::uint16_t>(o.store_port);
  config.stdin_rank = o.takeover ? dl::kStdinNone : stdin_rank;
  config.head_grace = dl::option_ms(head_grace_s);
  dl::check_job_fits(plan, config, dl::current_environment(),
                     static_cast<std::size_t>(std::max(0L, ::sysconf(_SC_ARG_MAX))));
  int last_status = 0;
  // The job's record and events (jobs/job_journal.h): `dlaunch ps` and
  // `dlaunch status` know it from here on.
  std::optional<dl::JobJournal> journal_;
  if (o.takeover) {
    journal_.emplace(dl::find_job(dl::jobs_dir(false), o.takeover->record_name), plan, o.events,
                     sink);
  } else {
    journal_.emplace(plan, argv, o.events, sink);
    journal_->started(plan);
  }
  dl::JobJournal& journal = *journal_;
  const std::int64_t journal_started_ms = dl::unix_now_ms();
  // The record keeps each rank's output (dlaunch logs): one file per rank
  // open at a time, where the open-file limit leaves room for them; and the
  // stacks reports asked for from another shell (dlaunch stacks).
  if (journal.record()) sink.keep_record(journal.record()->dir());
  if (journal.record() && o.log_size > 0) {
    if (dl::descriptors_fit(plan, !o.output_dir.empty() || !o.output_filename.empty(), proxied,
                            plan.world_size + 2LL)) {
      sink.keep_rank_logs(journal.record()->dir(), o.log_size);
    } else {
      dl::write_all(2, fmt::format("dlaunch: the ranks' output is not kept in the job's record: "
                                   "{} more open files would pass the limit (ulimit -n; "
                                   "--log-size 0 says you do not want it)\n",
                                   plan.world_size + 2));
    }
  }
  if (detached) {
    if (!journal.record()) {
      dl::write_all(2,
                    "dlaunch: --detach: this job has no record (see above): nothing will "
                    "keep its output, and attach, logs and wait cannot find it\n");
    }
    detached->watch(journal.events(), static_cast<int>(plan.nodes.size()),
                    journal.record() ? journal.record()->dir() : std::string(),
                    journal.record() ? journal.record()->name() : plan.job_id,
                    o.takeover ? "node_resumed" : "node_ready");
  }
  for (const auto& l : left_out) {
    journal.events().emit("node_excluded",
                          {{"host", l.host}, {"spare", l.spare}, {"reason", l.reason}});
  }
  dl::RootCause last_cause;  // the last attempt's
  // The attempt that ended lost a node, which an elastic job goes on without.
  bool lost_node = false;
  dl::AttemptHooks hooks;
  const int first_attempt = o.takeover ? o.takeover->restarts : 0;
  int taken_over = -1;  // a new head: the nodes it took over
  hooks.run = [&](int attempt) {
    // A new head takes the attempt that runs over; a restart after it is a
    // new attempt as any.
    const bool taking_over = o.takeover && attempt == first_attempt;
    sink.start_attempt(attempt, taking_over);
    dl::ControllerConfig attempt_config = config;
    attempt_config.recover = taking_over;
    if (taking_over) {
      journal.recovered(attempt, plan);
      // --timeout counts from the job's start, as it did for the head that was lost.
      if (config.timeout.count() > 0) {
        const auto spent = std::chrono::milliseconds(dl::unix_now_ms() - o.takeover->started_ms);
        attempt_config.timeout = std::max(config.timeout - spent, std::chrono::milliseconds(1));
      }
    }
    if (config.head_grace.count() > 0 && journal.record()) {
      dl::Takeover t{.secret = config.store_secret,
                     .attempt = attempt,
                     .restarts = attempt,
                     .hosts = {},
                     .started_ms = o.takeover ? o.takeover->started_ms : journal_started_ms};
      for (const auto& n : plan.nodes) t.hosts.push_back(n.host.name);
      try {
        journal.record()->write_takeover(t);
      } catch (const dl::Error& e) {
        dl::write_all(
            2, fmt::format("dlaunch: note: no new head could take this job over ({})\n", e.what()));
      }
    }
    boost::asio::io_context io;
    dl::AsioClock clock(io);
    dl::TransportLinks links(io, ssh_opts);
    dl::Controller controller(
        plan, attempt_config, sink,
        {.io = io, .links = links, .clock = clock, .observers = {&journal.events()}});
    const int status = controller.run();
    const dl::RootCause& cause = controller.cause();
    if (taking_over) taken_over = controller.nodes_ready();
    last_status = status;
    last_cause = cause;
    // A node that cannot start on a restart is one more lost node (the first
    // attempt's launch errors end the job: the hostfile or the hosts are wrong).
    lost_node = pool.elastic() && cause.node_index >= 0 &&
                (cause.kind == dl::CauseKind::kNode ||
                 (cause.kind == dl::CauseKind::kLaunch && attempt > 0));
    return dl::AttemptEnd{.status = status, .restartable = dl::allows_restart(cause) || lost_node};
  };
  hooks.keep = [&](const dl::AttemptEnd&) -> std::optional<std::string> {
    if (!lost_node) return std::nullopt;
    const auto change = pool.node_lost(last_cause.node_index, last_cause.message);
    dl::write_all(2, "dlaunch: " + change.message + "\n");
    if (!change.restart) return "too few nodes";
    // -n fixes the world size: it must still fit.
    int slots = 0;
    for (const auto& h : pool.active().hosts) slots += h.slots;
    if (o.np > slots) {
      dl::write_all(2, fmt::format("dlaunch: not restarting: -n {} needs {} slots and the nodes "
                                   "left have {}\n",
                                   o.np, o.np, slots));
      return "too few slots";
    }
    return std::nullopt;
  };
  hooks.prepare = [&](const dl::AttemptEnd& end, int restart) -> std::optional<std::string> {
    po.restart_count = restart;
    if (o.preflight && pool.elastic()) {
      // An elastic restart checks the nodes it keeps again, quickly (no
      // network test), and leaves out those that fail now as --preflight
      // did before the first attempt. (A spare put in meanwhile was checked
      // with the others before the first.)
      std::vector<LeftOut> dropped;
      std::vector<dl::ExcludedHost> failing;
      const dl::Hostfile kept = pool.active();
      dl::PreflightOptions quick = check_options;
      quick.bandwidth_round = std::chrono::milliseconds(0);
      quick.gpu_test = false;
      const bool go = preflight(kept, po, pool, plan, quick, o.np, dropped, failing);
      if (!o.exclude_file.empty()) dl::append_exclude_file(o.exclude_file, failing);
      for (const auto& l : dropped) {
        journal.events().emit("node_excluded",
                              {{"host", l.host}, {"spare", l.spare}, {"reason", l.reason}});
      }
      if (!go) return "too few nodes passed the checks";
    }
    try {
      plan = dl::make_plan(pool.active(), po);
      journal.restarting(restart, dl::AttemptLog::failed(end.status), plan);
    } catch (const dl::InputError& e) {
      // The nodes left cannot hold the job as asked (an app's --host was
      // excluded, too few slots): the last failure stands.
      dl::write_all(2, fmt::format("dlaunch: not restarting: {}\n", e.what()));
      return "the nodes left cannot hold the job";
    }
    return std::nullopt;
  };
  hooks.finish = [&](const std::string& last, const dl::AttemptLog& attempts) {
    if (taken_over == 0 && attempts.count() == 0) {
      // No node's agent let this head in (none left, or none it could
      // prove the secret to): the job is as it was, and another head may
      // try while its agents wait.
      dl::write_all(2, "dlaunch: no node was taken over: the job's record stays as it was\n");
      return;
    }
    journal.ended(last_status, last_cause, static_cast<int>(attempts.count()) + 1, plan.job_id);
    dl::write_all(2, attempts.summary(last, pool.excluded()));
    // One attempt has no summary; nodes --preflight left out are still said
    // at the end, where a user looks for how the job went.
    if (attempts.count() == 0) {
      for (const auto& e : pool.excluded()) dl::write_all(2, "dlaunch: left out: " + e + "\n");
    }
  };
  // --max-restarts: a failed rank or a lost node tears the whole job down and
  // starts it again with fresh agents; an interrupt, a timeout or a launch
  // error ends it at once (trying again would fail the same way).
  return dl::run_attempts(o.max_restarts, hooks, first_attempt);
}
