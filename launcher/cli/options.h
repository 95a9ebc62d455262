// Command line of dlaunch. parse_options() prints usage errors itself, and
// throws InputError for values that parse but make no sense.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/apps.h"
#include "cli/pernode_options.h"
#include "dlaunch/proto/container.h"
#include "dlaunch/tunables.h"
#include "hostfile/hostfile.h"
#include "output/console_style.h"
#include "transport/ssh/host_key_policy.h"

namespace dlaunch {

// --signal's SECONDS when not given: srun's default for its --signal.
inline constexpr int kDefaultSignalTime = 60;

// --stdin: which rank reads dlaunch's stdin.
struct StdinTarget {
  enum class Kind { kRank, kAll, kNone };
  Kind kind = Kind::kRank;
  int rank = 0;  // kRank's rank (mpirun's default: 0)
};

// --stall-action: what a stall (--stall-timeout) does.
enum class StallAction { kReport, kAbort };

struct SignalSpec {
  int signal = 0;
  int seconds = kDefaultSignalTime;
};

// A signal by name (USR1, SIGUSR1, usr1) or number (10): its number, or 0.
int signal_number(const std::string& name);
// --signal's SIG[@SECONDS]; throws InputError naming --signal.
SignalSpec parse_signal_spec(const std::string& spec);

// A detached job's --head-grace unless one is given.
inline constexpr double kDetachedHeadGrace = 300.0;

struct Options {
  std::string hosts;     // -H: a hostfile or an inline host list
  std::string hostfile;  // --hostfile: always a file
  int np = 0;            // -n: total ranks (no hostfile: all on this machine)
  NodeFilter filter;
  // --transport: every node through this one; empty: auto (each host as its
  // hostfile entry or the allocation says).
  std::optional<Transport> transport;
  // Placement (docs/placement.md); empty: not given (the defaults apply).
  std::string bind_to;  // --bind-to none|hwthread|core|l3cache|numa|package|gpu
  std::string map_by;   // --map-by slot|core|l3cache|numa|package[:PE=n]
  bool oversubscribe = false;
  bool report_bindings = false;
  std::vector<std::string> command;  // the (first) app's program and arguments
  // MPMD (cli/apps.h): every app, in order, when there is more than one
  // program (`:`), an app file (--app), or --role/--host; empty otherwise.
  // Then np is the sum of the apps' ranks and command is the first app's.
  std::vector<AppSpec> apps;
  std::string app_file;               // --app FILE
  std::string role;                   // --role: the first app's ROLE_NAME
  std::vector<std::string> app_host;  // --host: the first app's nodes
  StdinTarget stdin_target;           // --stdin: a rank (0), all or none

  PrefixMode prefix = PrefixMode::kRank;
  std::string output_dir;
  std::string events;  // --events FILE|-: the job's events as JSON Lines
  // --log-size: the bytes of each rank's output (per attempt) the job's
  // record keeps (dlaunch logs); 0: none.
  std::uint64_t log_size = 16ULL << 20;
  // --output-filename DIR[:nojobid,nocopy] (mpirun's): DIR/1/rank.N/{stdout,stderr}.
  std::string output_filename;
  bool merge_stderr = false;  // --merge-stderr-to-stdout: a rank's stderr is its stdout
  // Defaults: the table in dlaunch/tunables.h.
  double kill_grace_s = tunables::kKillGrace.value;
  double heartbeat_timeout_s = tunables::kHeartbeatTimeout.value;
  double start_timeout_s = tunables::kStartTimeout.value;
  double timeout_s = tunables::kTimeout.value;  // whole job; 0: none
  // Restart the whole job after a failure, up to this often.
  int max_restarts = static_cast<int>(tunables::kMaxRestarts.value);
  // Elastic membership (plan/node_pool.h): a lost node is dropped and the
  // job restarts on at least min_nodes nodes; spares wait in reserve.
  int min_nodes = 0;  // 0: every node is needed
  int spares = 0;
  // --signal SIG[@SECONDS]: SIG to every rank SECONDS before --timeout, and
  // on SIGTERM a kill grace before the stop (controller/signal_relay.h).
  std::string signal_spec;
  int warn_signal = 0;  // 0: none
  int warn_before_s = kDefaultSignalTime;
  bool nohup = false;  // --nohup: SIGHUP is ignored
  // -d/--detach: the head goes on as a daemon once every node is ready
  // (drivers/detach.h); `dlaunch attach|logs|wait|stop JOB` reach it.
  bool detach = false;
  // --head-grace SECONDS: once the ranks run, each agent whose head is gone
  // keeps them this long for a new head (dlaunch attach --recover); < 0:
  // not given (a detached job's default, kDetachedHeadGrace, else 0).
  double head_grace_s = -1;
  // Set by `dlaunch attach --recover JOB`, never from the command line:
  // this head takes over the running job of that record.
  struct Takeover {
    std::string record_name;  // the record's name in the jobs folder
    std::string secret;
    int attempt = 0;
    int restarts = 0;
    std::vector<std::string> hosts;  // the attempt's, in node order
    std::int64_t started_ms = 0;     // the job's start (its --timeout counts from it)
  };
  std::optional<Takeover> takeover;
  // Hangs: every rank's stack at --timeout, on SIGQUIT and at a stall.
  double stack_timeout_s = tunables::kStackTimeout.value;  // 0: collect none
  double stall_timeout_s = tunables::kStallTimeout.value;  // 0: off
  StallAction stall_action = StallAction::kReport;
  double collective_timeout_s = -1;  // DLAUNCH_COLLECTIVE_TIMEOUT for comm; < 0: comm's default
  bool dry_run = false;
  bool show_secrets = false;  // --dry-run shows values of variables named like secrets
  bool mpi = false;           // agents serve PMIx: Open MPI programs run without mpirun
  bool no_mpi = false;        // --no-mpi: not even for a program that links Open MPI
  // The interpreter dlaunch put before a .py program (with_python), for the
  // report when it cannot run it; empty when the command is the user's own.
  std::string auto_python;
  // --signals-to-handle's signals without a meaning of dlaunch's own: forwarded.
  std::vector<int> forward_signals;
  std::string master_addr;
  int master_port = 0;  // 0: node 0 reserves a free one
  int store_port = 0;   // 0: node 0's store listens on any free port
  std::string agent_path;
  bool no_agent_upload = false;  // never copy dlaunch-agent to a node that lacks it
  std::string job_id;            // empty: random
  std::string workdir;           // empty: the current directory

  // Ranks on every node from the peers' spellings (-N, --npernode, --map-by
  // ppr:N:node; DeepSpeed's --num_gpus, which also makes GPUs 0..N-1 the
  // node's); 0: not given. finish_peer_options turns them into filter's.
  int npernode = 0;
  int num_gpus = 0;

  // Environment for every worker (launcher/plan/user_env.h)
  std::vector<std::string> exports;    // -x NAME or NAME=VALUE, in order
  std::vector<std::string> mca;        // --mca K V, flattened: OMPI_MCA_K=V for every rank
  std::vector<std::string> env_files;  // --env-file, in order
  // Console output (launcher/output/console_style.h)
  std::string ranks;  // --ranks: show only these ranks; empty: all
  bool timestamps = false;
  ColorMode color = ColorMode::kAuto;  // --color

  // SSH
  int ssh_concurrency = static_cast<int>(tunables::kSshConcurrency.value);
  double connect_timeout_s = tunables::kConnectTimeout.value;
  bool connect_timeout_given = false;  // beats the ssh config's ConnectTimeout
  ssh::HostKeyPolicy host_key_check = ssh::HostKeyPolicy::kStrict;  // --host-key-check
  bool host_key_check_given = false;    // beats the ssh config's StrictHostKeyChecking
  std::string ssh_config;               // -F: in place of ~/.ssh/config and /etc/ssh/ssh_config
  std::optional<SshClient> ssh_client;  // --ssh; empty: what each host says
  bool check = false;                   // preflight only
  // --preflight: --check's checks before the job; failing nodes are left out
  // (with --spares or --min-nodes) or the job does not start.
  bool preflight = false;
  // --check=quick, --preflight=quick: without the checks that take seconds
  // (the network test between nodes); =full or nothing: every check.
  bool check_quick = false;
  std::string exclude_file;  // --exclude-file FILE (check/exclude_file.h)
  // --check-threshold NAME=VALUE (docs/health.md): checked here, applied over
  // each node's hostfile `health:` (health::node_thresholds).
  std::vector<std::string> check_threshold_words;
  bool json = false;  // --check --json: one JSON object

  // Per-node mode: torchrun's options (cli/pernode_options.h)
  PerNodeOptions pernode;

  // Containers (cli/container_options.h): checked and complete after parse.
  proto::ContainerSpec container;
  std::string container_mounts;  // --container-mounts as given
  std::string container_env;     // --container-env as given
  // A --container-* option given without --container-image (its name): the
  // hostfile's `container:` must then name the image (drivers/head_job.cpp).
  std::string container_option_alone;
};

// docs/tunables.md: the table of dlaunch/tunables.h as Markdown.
std::string tunables_markdown();

// Returns false when dlaunch should exit at once with exit_code: after
// --help/--version (0) or a usage error already printed (2).
bool parse_options(int argc, char** argv, Options& out, int& exit_code);

// Sets o.mpi when a program of the job is an Open MPI program
// (plan/mpi_program.h) and --mpi was not given (unless --no-mpi), saying so
// once on stderr; InputError for a program of another MPI, which only its own
// launcher can start. `env` holds the PATH the programs are found with.
void choose_mpi(Options& o, const std::vector<std::string>& env);

}  // namespace dlaunch
