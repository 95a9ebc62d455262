// dlaunch: the head-node launcher. Reads hosts, plans ranks, starts one agent
// per node and runs the job to completion (see docs/architecture.md).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "check/descriptors.h"
#include "check/preflight.h"
#include "cli/options.h"
#include "controller/controller.h"
#include "controller/setup.h"
#include "dlaunch/clock.h"
#include "dlaunch/process.h"
#include "dlaunch/random.h"
#include "dlaunch/text.h"
#include "hostfile/slurm.h"
#include "net/job_network.h"
#include "output/console_style.h"
#include "output/output_sink.h"
#include "plan/plan.h"
#include "plan/user_env.h"
#include "transport/link_factory.h"
#include "transport/local_transport.h"
#include "transport/slurm_transport.h"
#include "transport/ssh/host_options.h"

namespace dl = dlaunch;
namespace fs = std::filesystem;

namespace {

dl::Hostfile load_hosts(const dl::Options& o) {
  if (!o.hostfile.empty()) return dl::parse_hostfile_file(o.hostfile);
  if (!o.hosts.empty()) return dl::parse_hosts_argument(o.hosts);
  // Inside a Slurm allocation the allocation's nodes are the hosts (as mpirun
  // does); -n then takes the first N of its slots.
  char here[256] = {};
  ::gethostname(here, sizeof here - 1);
  if (auto slurm = dl::slurm_allocation_hostfile(dl::current_environment(), here)) return *slurm;
  if (o.np > dl::limits::kMaxRanksPerNode) {
    throw dl::InputError({"-n"}, "",
                         std::to_string(o.np) + " ranks on this machine is over the limit of " +
                             std::to_string(dl::limits::kMaxRanksPerNode) + " ranks per node",
                         "give hosts with -H to spread them");
  }
  if (o.np > 0) return dl::local_hostfile(o.np);
  throw dl::InputError(
      {}, "", "no hosts given",
      "use -H HOSTFILE, -H host:slots,..., --hostfile FILE, or -n N for this machine");
}

// --transport ssh|slurm: every node that way; auto keeps what the hosts say.
// Slurm nodes need an allocation to start steps in (outside one, srun would
// queue a new job per node).
void apply_transport(dl::Hostfile& hosts, const std::string& transport) {
  for (auto& h : hosts.hosts) {
    if (transport == "ssh") h.transport = dl::Transport::kSsh;
    if (transport == "slurm") h.transport = dl::Transport::kSlurm;
    if (h.transport == dl::Transport::kSlurm && !dl::in_slurm_allocation()) {
      throw dl::InputError(transport == "slurm" ? dl::SourcePos{"--transport"} : h.pos,
                           transport == "slurm" ? "" : "transport",
                           "slurm needs a Slurm allocation (SLURM_JOB_ID is not set)",
                           "run dlaunch inside salloc or an sbatch script");
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
  for (const auto& h : hosts.hosts) here += h.transport == dl::Transport::kLocal ? h.slots : 0;
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
void check_identity_files(const dl::Hostfile& hosts) {
  for (const auto& h : hosts.hosts) {
    if (h.identity.empty() || ::access(h.identity.c_str(), R_OK) == 0) continue;
    throw dl::InputError(h.pos, "identity",
                         "identity file '" + h.identity + "' of host '" + h.host +
                             "' cannot be read: " + std::strerror(errno),
                         "give the path of a private key on this machine");
  }
}

// Whether a variable's name says it holds a secret: --dry-run shows its value
// only with --show-secrets (what it prints lands in logs and CI output).
bool looks_secret(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* word : {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL"}) {
    if (upper.find(word) != std::string::npos) return true;
  }
  return false;
}

std::string join_env(const dl::EnvList& env, bool show_secrets) {
  std::string out;
  for (const auto& [k, v] : env) {
    out += k + "=" + (show_secrets || !looks_secret(k) ? dl::shell_quote(v) : "<hidden>") + " ";
  }
  return out;
}

void print_dry_run(const dl::JobPlan& plan, const dl::Options& o, const std::string& agent,
                   const dl::ssh::HostSettings& ssh, const dl::ssh::OpensshOptions& ssh_openssh) {
  const std::string port =
      o.master_port > 0 ? std::to_string(o.master_port) : "<reserved by node 0>";
  std::string cmd;
  for (const auto& a : plan.command) {
    if (!cmd.empty()) cmd += ' ';
    cmd += dl::shell_quote(a);
  }
  const std::string master_addr = dl::net::dry_run_master_addr(plan, !o.master_addr.empty());
  fmt::print(
      "job {}: {} rank(s) on {} node(s), MASTER_ADDR={} MASTER_PORT={}; comm store on node 0 "
      "(DLAUNCH_STORE_ADDR/PORT/SECRET set at start)\n",
      plan.job_id, plan.world_size, plan.nodes.size(), master_addr, port);
  const auto ifnames = dl::net::dry_run_interface_note(plan, !o.master_addr.empty(), o.mpi);
  if (!ifnames.empty()) fmt::print("network: {}\n", ifnames);
  for (const auto& n : plan.nodes) {
    const auto& h = n.host;
    const bool local = h.transport == dl::Transport::kLocal;
    const bool slurm = h.transport == dl::Transport::kSlurm;
    fmt::print("node {}: {} ({}, {}), ranks {}-{}\n", n.node_rank, h.name, h.host,
               local   ? "local"
               : slurm ? "slurm"
                       : "ssh",
               n.ranks.front().rank, n.ranks.back().rank);
    if (h.transport == dl::Transport::kSsh && h.ssh_client == dl::SshClient::kOpenssh) {
      std::string argv;
      for (const auto& a : dl::ssh::openssh_argv(h, ssh_openssh)) argv += dl::shell_quote(a) + " ";
      fmt::print("  ssh: {}(OpenSSH reads its own configuration)\n", argv);
    } else if (h.transport == dl::Transport::kSsh) {
      for (const auto& line : dl::ssh::describe(dl::ssh::resolve_host(h, ssh)))
        fmt::print("  {}\n", line);
    }
    fmt::print("  agent: {}\n", dl::shell_quote(h.agent.empty() ? agent : h.agent));
    fmt::print("  inherits: {}\n",
               local   ? "dlaunch's whole environment"
               : slurm ? "dlaunch's whole environment (srun exports it), "
                         "then the node env below"
                       : "what sshd gives a command on " + h.host + ", then the node env below");
    if (!n.env.empty()) fmt::print("  node env: {}\n", join_env(n.env, o.show_secrets));
    for (const auto& r : n.ranks) {
      fmt::print("  rank {}: {}MASTER_ADDR={} MASTER_PORT={} {}\n", r.rank,
                 join_env(r.env, o.show_secrets), dl::shell_quote(master_addr),
                 dl::shell_quote(port), cmd);
    }
  }
}

int run(int argc, char** argv) {
  dl::Options o;
  int early_exit = 0;
  if (!dl::parse_options(argc, argv, o, early_exit)) return early_exit;
  // --nohup: a closed terminal's SIGHUP does nothing, from here on (the
  // controller leaves it ignored; children get the default back at exec).
  if (o.nohup) ::signal(SIGHUP, SIG_IGN);
  auto to_ms = [](double s) { return std::chrono::milliseconds(static_cast<long>(s * 1000.0)); };
  if (o.command.empty() && !o.check)
    throw dl::InputError({}, "", "no program to run", "dlaunch [options] PROGRAM [ARGS...]");

  dl::Hostfile hosts = dl::apply_node_filter(load_hosts(o), o.filter);
  apply_transport(hosts, o.transport);
  if (!o.ssh_client.empty()) {
    for (auto& h : hosts.hosts) {
      h.ssh_client = o.ssh_client == "openssh" ? dl::SshClient::kOpenssh : dl::SshClient::kLibssh2;
    }
  }
  check_job_size(hosts, o);
  check_identity_files(hosts);
  dl::PlanOptions po;
  po.np = o.np;
  po.job_id = o.job_id.empty() ? dl::random_hex(8) : o.job_id;
  po.master_addr = o.master_addr;
  po.command = o.command;
  po.head_env = dl::current_environment();
  po.user_env = dl::user_environment(o.env_files, o.exports, po.head_env);
  po.max_restarts = o.max_restarts;
  po.collective_timeout_s = o.collective_timeout_s;
  dl::JobPlan plan = dl::make_plan(hosts, po);
  const std::vector<int> shown_ranks =
      o.ranks.empty() ? std::vector<int>{} : dl::parse_rank_list(o.ranks, plan.world_size);

  const std::string workdir = o.workdir.empty() ? fs::current_path().string() : o.workdir;
  const std::string agent = o.agent_path.empty() ? dl::default_agent_path() : o.agent_path;
  dl::ssh::TransportOptions ssh_opts;
  ssh_opts.concurrency = o.ssh_concurrency;
  auto& hs = ssh_opts.hosts;
  hs.connect_timeout = to_ms(o.connect_timeout_s);
  hs.connect_timeout_given = o.connect_timeout_given;
  hs.host_key_policy = o.host_key_check == "off"          ? dl::ssh::HostKeyPolicy::kOff
                       : o.host_key_check == "accept-new" ? dl::ssh::HostKeyPolicy::kAcceptNew
                                                          : dl::ssh::HostKeyPolicy::kStrict;
  hs.host_key_policy_given = o.host_key_check_given;
  hs.keepalive_s = std::max(1, static_cast<int>(o.heartbeat_timeout_s / 3));
  // Nodes without an agent at the expected path get a copy of this one,
  // unless the path is forced or the user said no.
  if (o.agent_path.empty() && !o.no_agent_upload) ssh_opts.agent_image = agent;
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
  const bool any_ssh = std::any_of(plan.nodes.begin(), plan.nodes.end(), [](const auto& n) {
    return n.host.transport == dl::Transport::kSsh && n.host.ssh_client == dl::SshClient::kLibssh2;
  });
  long long proxied = 0;  // SSH nodes behind a jump host or ProxyCommand
  if (any_ssh) {
    hs.context = dl::ssh::ResolveContext::current();
    dl::ssh::LoadOptions lo;
    if (!o.ssh_config.empty()) lo.config_file = o.ssh_config;
    lo.home = hs.context.home;
    hs.config = std::make_shared<const dl::ssh::SshConfig>(dl::ssh::SshConfig::load(lo));
    for (const auto& n : plan.nodes) {
      if (n.host.transport != dl::Transport::kSsh || n.host.ssh_client != dl::SshClient::kLibssh2)
        continue;
      const auto c = dl::ssh::resolve_host(n.host, hs);
      if (!c.jumps.empty() || !c.proxy_command.empty()) ++proxied;
    }
  } else if (!o.ssh_config.empty() && o.ssh_config != "none") {
    (void)dl::ssh::SshConfig::load({.config_file = o.ssh_config});  // still checked
  }
  // One descriptor per SSH node, two per local node: a job over the limit
  // would fail part-way, with some agents started (EMFILE on a connection).
  if (!o.dry_run) dl::check_descriptors(plan, !o.output_dir.empty(), proxied);
  if (o.check) {
    const char* path = std::getenv("PATH");
    return dl::run_preflight(plan, {.agent_path = agent,
                                    .workdir = workdir,
                                    .program = plan.command.empty() ? "" : plan.command.front(),
                                    .path = path != nullptr ? path : "",
                                    .ssh = ssh_opts});
  }
  if (o.dry_run) {
    print_dry_run(plan, o, agent, hs, ssh_opts.openssh);
    return 0;
  }
  // What can be checked on this machine is checked before anything starts;
  // SSH nodes check the same in their agent before any worker starts.
  bool any_local = false;
  for (const auto& n : plan.nodes) {
    if (n.host.transport != dl::Transport::kLocal) continue;
    any_local = true;
    const std::string a = n.host.agent.empty() ? agent : n.host.agent;
    if (::access(a.c_str(), X_OK) != 0) {
      throw dl::InputError(n.host.agent.empty() ? dl::SourcePos{"--agent"} : n.host.pos,
                           n.host.agent.empty() ? "" : "agent",
                           "dlaunch-agent not found at '" + a + "'",
                           "build it next to dlaunch or give its path with --agent");
    }
  }
  if (any_local && !fs::is_directory(workdir)) {
    throw dl::InputError({"--wdir"}, "", "'" + workdir + "' is not a directory");
  }
  if (any_local &&
      dl::find_program(plan.command.front(), dl::current_environment(), workdir).empty()) {
    throw dl::InputError({}, "",
                         "program '" + plan.command.front() + "' not found or not executable",
                         "give a path, or put it on PATH");
  }

  std::vector<std::string> node_of_rank(static_cast<std::size_t>(plan.world_size));
  for (const auto& n : plan.nodes) {
    for (const auto& r : n.ranks) node_of_rank[static_cast<std::size_t>(r.rank)] = n.host.name;
  }
  const auto color = dl::parse_color_mode(o.color);
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  dl::OutputSink sink({.prefix = o.prefix,
                       .output_dir = o.output_dir,
                       .job_id = plan.job_id,
                       .node_of_rank = std::move(node_of_rank),
                       .ranks = shown_ranks,
                       .timestamps = o.timestamps,
                       .color_stdout = dl::color_enabled(color, ::isatty(1) == 1, no_color, term),
                       .color_stderr = dl::color_enabled(color, ::isatty(2) == 1, no_color, term)});
  const dl::ControllerConfig config{.agent_path = agent,
                                    .workdir = workdir,
                                    .master_port = static_cast<std::uint16_t>(o.master_port),
                                    .kill_grace = to_ms(o.kill_grace_s),
                                    .heartbeat_timeout = to_ms(o.heartbeat_timeout_s),
                                    .start_timeout = to_ms(o.start_timeout_s),
                                    .timeout = to_ms(o.timeout_s),
                                    .warn_signal = o.warn_signal,
                                    .warn_before = std::chrono::seconds(o.warn_before_s),
                                    .nohup = o.nohup,
                                    .stack_timeout = to_ms(o.stack_timeout_s),
                                    .stall_timeout = to_ms(o.stall_timeout_s),
                                    .stall_abort = o.stall_action == "abort",
                                    .output_dir = o.output_dir,
                                    .master_addr_explicit = !o.master_addr.empty(),
                                    .progress = ::isatty(2) == 1,
                                    .mpi = o.mpi,
                                    .store_secret = dl::random_hex(32),
                                    .store_port = static_cast<std::uint16_t>(o.store_port)};
  dl::check_job_fits(plan, config, dl::current_environment(),
                     static_cast<std::size_t>(std::max(0L, ::sysconf(_SC_ARG_MAX))));
  // --max-restarts: a failed rank or a lost node tears the whole job down and
  // starts it again with fresh agents; an interrupt, a timeout or a launch
  // error ends it at once (trying again would fail the same way).
  std::vector<std::string> attempts;
  for (int attempt = 0;; ++attempt) {
    boost::asio::io_context io;
    dl::AsioClock clock(io);
    dl::TransportLinks links(io, ssh_opts);
    dl::Controller controller(plan, config, sink, {.io = io, .links = links, .clock = clock});
    const int status = controller.run();
    if (status == 0 || !dl::allows_restart(controller.cause()) || attempt >= o.max_restarts) {
      if (!attempts.empty()) {
        std::string summary = fmt::format("dlaunch: {} attempt(s):\n", attempts.size() + 1);
        for (std::size_t k = 0; k < attempts.size(); ++k) {
          summary += fmt::format("  attempt {}: failed, exit status {}\n", k, attempts[k]);
        }
        summary +=
            fmt::format("  attempt {}: {}\n", attempts.size(),
                        status == 0 ? "succeeded" : fmt::format("failed, exit status {}", status));
        dl::write_all(2, summary);
      }
      return status;
    }
    attempts.push_back(std::to_string(status));
    dl::write_all(2, fmt::format("dlaunch: restarting the job ({} of {} restarts)\n", attempt + 1,
                                 o.max_restarts));
    po.restart_count = attempt + 1;
    plan = dl::make_plan(hosts, po);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  dl::raise_descriptor_limit();
  try {
    return run(argc, argv);
  } catch (const dl::Error& e) {
    // The user's input: exit 2, nothing started. Anything else: exit 1.
    std::fprintf(stderr, "dlaunch: error: %s\n", dl::printable(e.what()).c_str());
    return e.kind() == dl::ErrorKind::kInput ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlaunch: internal error: %s\n", dl::printable(e.what()).c_str());
    return 1;
  }
}
