#include "cli/pernode_options.h"

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <string_view>

#include <CLI/CLI.hpp>
#include <climits>

#include "cli/options.h"
#include "dlaunch/process.h"
#include "dlaunch/tunables.h"

namespace dlaunch {

namespace {

const char* const kGroup = "Per-node mode (torchrun)";

// torchrun options that select the per-node mode on their own.
constexpr std::string_view kSelectors[] = {"--nnodes",        "--node-rank", "--rdzv-backend",
                                           "--rdzv-endpoint", "--rdzv-id",   "--rdzv-conf",
                                           "--standalone"};
// torchrun options with no meaning outside per-node mode.
constexpr std::string_view kPerNodeOnly[] = {
    "--log-dir",          "--redirects", "--tee", "--local-addr", "--local-ranks-filter",
    "--monitor-interval", "--use-env"};
// torchrun's ways to say how the program runs: the per-node mode without a
// head-node option (as --nproc-per-node), and good in the head-node mode too.
constexpr std::string_view kProgramOptions[] = {"--module",
                                                "--no-python",
                                                "--run-path",
                                                "--shutdown-timeout",
                                                "--virtual-local-rank",
                                                "--logs-specs",
                                                "--event-log-handler",
                                                "--signals-to-handle"};
// dlaunch options of the head-node mode that make no sense on one node.
constexpr std::string_view kHeadOnly[] = {"--hosts",
                                          "--hostfile",
                                          "--np",
                                          "--include",
                                          "--exclude",
                                          "--num-nodes",
                                          "--transport",
                                          "--check",
                                          "--ssh",
                                          "--ssh-config",
                                          "--host-key-check",
                                          "--connect-timeout",
                                          "--ssh-concurrency",
                                          "--no-agent-upload",
                                          "--dry-run",
                                          "--show-secrets",
                                          "--ranks",
                                          "--min-nodes",
                                          "--spares",
                                          "--app",
                                          "--host",
                                          "--stdin",
                                          "--npernode",
                                          "--pernode",
                                          "--num-gpus",
                                          "--output-filename",
                                          "--merge-stderr-to-stdout"};

std::string both(std::string_view dashed) {
  std::string s(dashed);
  std::string under = s;
  std::replace(under.begin() + 2, under.end(), '-', '_');
  return under == s ? s : s + "," + under;
}

bool given(const CLI::App& app, std::string_view name) { return app.count(std::string(name)) > 0; }

// torchrun's variable for an option: --nproc-per-node -> PET_NPROC_PER_NODE.
std::string pet_name(std::string_view option) {
  std::string env = "PET_";
  for (char c : option.substr(2)) env += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return env;
}

// Given on the command line, not only through its PET_ variable (which
// CLI11 reads for torchrun's options): an explicit -H, --hostfile or -n
// keeps the head-node mode whatever the environment says.
bool on_command_line(const CLI::App& app, std::string_view option) {
  if (!given(app, option)) return false;
  const char* v = std::getenv(pet_name(option).c_str());
  if (v == nullptr || *v == '\0') return true;
  const auto& results = app.get_option(std::string(option))->results();
  return !(results.size() == 1 && results.front() == v);
}

int parse_count(const std::string& text, const std::string& option, int lo) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > INT_MAX) {
    throw InputError({option}, "",
                     "expected " + std::string(lo > 0 ? "a positive integer" : "an integer >= 0") +
                         ", got '" + text + "'");
  }
  return static_cast<int>(v);
}

void parse_nnodes(PerNodeOptions& p) {
  const auto colon = p.nnodes.find(':');
  if (colon == std::string::npos) {
    p.min_nodes = p.max_nodes = parse_count(p.nnodes, "--nnodes", 1);
    return;
  }
  p.min_nodes = parse_count(p.nnodes.substr(0, colon), "--nnodes", 1);
  p.max_nodes = parse_count(p.nnodes.substr(colon + 1), "--nnodes", 1);
  if (p.min_nodes > p.max_nodes) {
    throw InputError({"--nnodes"}, "", "'" + p.nnodes + "': MIN is larger than MAX",
                     "give MIN:MAX with MIN <= MAX");
  }
}

std::string env_value(const std::vector<std::string>& env, std::string_view name) {
  for (const auto& e : env) {
    if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '=') {
      return e.substr(name.size() + 1);
    }
  }
  return {};
}

// The job's shape from the environment, for the options the command line
// leaves out (docs/per-node.md#kubernetes): torchrun's own PET_<OPTION>
// variables first (CLI11 reads those of torchrun's options; here the
// master's and --max-restarts'), then a PyTorchJob pod's MASTER_ADDR,
// MASTER_PORT and RANK (the pod's index), and an older operator's WORLD_SIZE
// (the pods), then an Indexed Job's JOB_COMPLETION_INDEX as the node rank
// (JobSet).
class EnvDefaults {
 public:
  // Where a variable counts: anywhere, in a pod, in an older operator's pod.
  enum class Scope { kAny, kPod, kOldPod };

  explicit EnvDefaults(std::vector<std::string> env) : env_(std::move(env)) {
    // A pod, and not a rank of a launcher (LOCAL_RANK set: WORLD_SIZE, RANK,
    // MASTER_ADDR are that job's).
    pod_ = !get("KUBERNETES_SERVICE_HOST").empty() && get("LOCAL_RANK").empty();
    // WORLD_SIZE is the pods only where no PET_NNODES is set: operators that
    // set it count processes in WORLD_SIZE (pods x nprocPerNode).
    old_pod_ = pod_ && !get("WORLD_SIZE").empty() && !get("RANK").empty() &&
               !get("MASTER_ADDR").empty() && get("PET_NNODES").empty();
  }

  // The environment alone makes this the per-node mode (torchrun's PET_
  // variables do through CLI11).
  bool selects() const { return old_pod_; }

  // Sets `value` from the first variable that is set, for `option`.
  bool fill(const CLI::App& app, const std::string& option, std::string& value,
            std::initializer_list<std::pair<const char*, Scope>> vars) {
    if (given(app, option)) return false;
    for (const auto& [var, scope] : vars) {
      if ((scope == Scope::kPod && !pod_) || (scope == Scope::kOldPod && !old_pod_)) continue;
      const std::string v = get(var);
      if (v.empty()) continue;
      value = v;
      from_[option] = std::string(var) + "=" + v;
      return true;
    }
    return false;
  }
  bool fill_int(const CLI::App& app, const std::string& option, int& value, int lo, int hi,
                std::initializer_list<std::pair<const char*, Scope>> vars) {
    std::string text;
    if (!fill(app, option, text, vars)) return false;
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE || v < lo || v > hi) {
      throw InputError({option}, "",
                       "'" + text + "' is not a number from " + std::to_string(lo) + " to " +
                           std::to_string(hi));
    }
    value = static_cast<int>(v);
    return true;
  }
  // Options of torchrun's group CLI11 fills from PET_<OPTION> itself
  // (add_pernode_options): notes which came from there (set in the
  // environment, not on the command line, where it would have the same
  // value at most), for the messages and the c10d rule.
  void note_pet(const CLI::App& app, const std::string& option) {
    if (given(app, option) && !on_command_line(app, option)) {
      from_[option] = pet_name(option) + "=" + get(pet_name(option));
    }
  }
  void forget(const std::string& option) { from_.erase(option); }
  std::string get(std::string_view name) const { return env_value(env_, name); }
  // "VAR=value" when option came from the environment, else empty.
  std::string from(const std::string& option) const {
    auto it = from_.find(option);
    return it == from_.end() ? std::string() : it->second;
  }

 private:
  std::vector<std::string> env_;
  bool pod_ = false;
  bool old_pod_ = false;
  std::map<std::string, std::string> from_;
};

// The per-node options, the environment's defaults filled in, checked.
void check_pernode_options(const CLI::App& app, Options& o, EnvDefaults& env);

}  // namespace

std::map<int, int> parse_std_spec(const std::string& text, const char* option) {
  const auto stream = [&](const std::string& v) {
    if (v.size() != 1 || v[0] < '0' || v[0] > '3') {
      throw InputError({option}, "",
                       "'" + text +
                           "': expected 0-3 (none, stdout, stderr, both) or "
                           "LOCAL_RANK:0-3,...",
                       "e.g. " + std::string(option) + " 3, or " + option + " 0:1,1:2");
    }
    return v[0] - '0';
  };
  std::map<int, int> out;
  if (text.find(':') == std::string::npos) {
    out[-1] = stream(text);
    return out;
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const std::string item = text.substr(start, comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    const auto colon = item.find(':');
    const std::string rank = item.substr(0, colon);
    if (colon == std::string::npos || rank.empty() || rank.size() > 4 ||
        rank.find_first_not_of("0123456789") != std::string::npos) {
      throw InputError({option}, "", "'" + text + "': '" + item + "' is not LOCAL_RANK:0-3");
    }
    out[std::stoi(rank)] = stream(item.substr(colon + 1));
  }
  return out;
}

std::string pernode_python() {
  const char* exec = std::getenv("PYTHON_EXEC");
  return exec != nullptr && *exec != '\0' ? exec : "python3";
}

std::string with_python(const PerNodeOptions& p, std::vector<std::string>& command) {
  // As torchrun and `deepspeed train.py`: a .py (and -m, --run-path) runs
  // under Python unless --no-python.
  if (command.empty()) return {};
  if (p.module && p.no_python) {
    throw InputError({"--module"}, "", "-m and --no-python exclude each other");
  }
  std::string py = pernode_python();
  // -u: unbuffered, as both run it, so that a rank's lines come as printed.
  if (p.module) {
    command.insert(command.begin(), {py, "-u", "-m"});
    return py;
  }
  if (!p.no_python) {
    const std::string& first = command.front();
    if (p.run_path || (first.size() > 3 && first.compare(first.size() - 3, 3, ".py") == 0)) {
      command.insert(command.begin(), {py, "-u"});
      return py;
    }
  }
  return {};
}

void add_pernode_options(CLI::App& app, Options& o) {
  auto* g = app.add_option_group(kGroup);
  PerNodeOptions& p = o.pernode;
  g->add_option(both("--nproc-per-node"), p.nproc,
                "ranks per node: N (head mode: overrides the hostfile's slots); per-node mode "
                "also gpu (one per visible GPU), xpu (one per Intel GPU), cpu (one per CPU), auto "
                "(gpu if any, else cpu)");
  g->add_option("--nnodes", p.nnodes,
                "per-node mode: number of nodes, N or MIN:MAX (elastic, with --max-restarts)");
  g->add_option(
       both("--node-rank"), p.node_rank,
       "per-node mode: this node's rank (static rendezvous at --master-addr:--master-port)")
      ->check(CLI::Range(0, INT_MAX));
  g->add_option(both("--rdzv-backend"), p.rdzv_backend,
                "per-node mode: c10d (node ranks assigned when the rendezvous closes) or static");
  g->add_option(both("--rdzv-endpoint"), p.rdzv_endpoint,
                "per-node mode: HOST[:PORT] (default port 29400); the launcher that can bind it "
                "hosts the rendezvous");
  g->add_option(both("--rdzv-id"), p.rdzv_id, "per-node mode: the job's id (TORCHELASTIC_RUN_ID)");
  g->add_option(both("--rdzv-conf"), p.rdzv_conf,
                "per-node mode: KEY=VALUE,... join_timeout, last_call_timeout, close_timeout, "
                "read_timeout (seconds), secret (else $DLAUNCH_RDZV_SECRET), insecure=1");
  g->add_flag("--standalone", p.standalone,
              "per-node mode: a job of this node alone (no other launcher to meet)");
  g->add_option(both("--monitor-interval"), p.monitor_interval_s,
                "accepted for torchrun's command lines; dlaunch sees exits at once (SIGCHLD)")
      ->check(CLI::PositiveNumber);
  g->add_option(both("--local-addr"), p.local_addr,
                "per-node mode: this node's address as the others reach it (MASTER_ADDR when it "
                "is node 0 of a c10d rendezvous)");
  g->add_flag(both("--no-python"), p.no_python,
              "run the program as it is, even a .py file (a .py runs under $PYTHON_EXEC, else "
              "python3, in both modes)");
  g->add_flag("-m,--module", p.module,
              "run the program as `python3 -m MODULE` ($PYTHON_EXEC if set)");
  g->add_flag(both("--run-path"), p.run_path,
              "run the program with python3 ($PYTHON_EXEC if set) whatever its name");
  g->add_option(both("--log-dir"), p.log_dir,
                "per-node mode: also write every rank's output to DIR/<job-id>/rank.N.{out,err} "
                "(as --output-dir)");
  g->add_option(
      "-r,--redirects", p.redirects,
      "per-node mode: N or LOCAL_RANK:N,... (torchrun's: 1 stdout, 2 stderr, 3 both) goes to "
      "the --log-dir files only, not the console");
  g->add_option("-t,--tee", p.tee,
                "per-node mode: N or LOCAL_RANK:N,...: to the --log-dir files as well as the "
                "console (dlaunch writes every rank's files whenever there is a --log-dir)");
  g->add_option(both("--local-ranks-filter"), p.local_ranks_filter,
                "per-node mode: show only these local ranks' output on the console, e.g. 0,1");
  bool use_env = false;
  g->add_flag(both("--use-env"), use_env,
              "torch.distributed.launch's: accepted (LOCAL_RANK is always in the environment)");
  g->add_option(both("--shutdown-timeout"), p.shutdown_timeout_s,
                "torchrun's: seconds between SIGTERM and SIGKILL when ranks are stopped (dlaunch's "
                "--kill-grace; else $TORCH_ELASTIC_SHUTDOWN_TIMEOUT)")
      ->check(CLI::NonNegativeNumber);
  g->add_flag(both("--virtual-local-rank"), p.virtual_local_rank,
              "torchrun's: every rank sees only its own GPU, as device 0 (LOCAL_RANK=0, "
              "CUDA_VISIBLE_DEVICES the rank's one)");
  g->add_option(both("--logs-specs"), p.logs_specs,
                "torchrun's: only its built-in `default` (dlaunch's output and --log-dir)");
  g->add_option(both("--event-log-handler"), p.event_log_handler,
                "torchrun's: its built-in `null` or `console` (no events are logged either way)");
  // Refused by name: torchrun options that make no sense for dlaunch.
  static std::string refused_value;
  for (const char* name : {"--start-method", "--max-worker-restarts"}) {
    g->add_option(both(name), refused_value, "refused (torchrun's; see docs/per-node.md)")
        ->group("");
  }
  g->add_option(both("--numa-binding"), p.numa_binding,
                "torchrun's: bind each rank near its GPU: node (its NUMA node), socket, exclusive "
                "(cores of its own in that node), core-complex (an L3 cache there); dlaunch's "
                "--bind-to gpu, gpu-package, gpu-exclusive, gpu-l3cache")
      ->check(CLI::IsMember({"node", "socket", "exclusive", "core-complex"}));
  g->add_option(both("--signals-to-handle"), p.signals_to_handle,
                "torchrun's: signals (SIGTERM,SIGINT,...) dlaunch acts on; those it has no "
                "meaning of its own for are forwarded to every rank (docs/per-node.md)");
  // torchrun reads every option from PET_<NAME> when it is not on the
  // command line (PET_NPROC_PER_NODE, PET_RDZV_ENDPOINT, ...): so does dlaunch.
  for (CLI::Option* opt : g->get_options()) {
    for (const auto& name : opt->get_lnames()) {
      if (name.find('_') != std::string::npos) continue;  // the underscore spelling
      std::string env = "PET_";
      for (char c : name) env += c == '-' ? '_' : static_cast<char>(std::toupper(c));
      opt->envname(env);
      break;
    }
  }
}

void finish_pernode_options(const CLI::App& app, Options& o) {
  PerNodeOptions& p = o.pernode;
  for (const char* name : {"--start-method", "--max-worker-restarts"}) {
    if (!given(app, name)) continue;
    const std::string_view n(name);
    const char* why = n == "--start-method"
                          ? "dlaunch execs every worker (no fork or multiprocessing start)"
                          : "torchrun has no such option";
    throw InputError({name}, "", std::string(name) + " is not supported: " + why,
                     "leave it out (docs/per-node.md lists what is supported)");
  }
  // What the command line says decides; torchrun's PET_ variables and a
  // pod's environment select the per-node mode only without -H, --hostfile
  // or -n.
  bool selector = false;
  bool env_selector = false;
  for (auto n : kSelectors) {
    selector |= on_command_line(app, n);
    env_selector |= given(app, n);
  }
  bool head_hosts = false;
  for (const char* n :
       {"--hosts", "--hostfile", "--np", "--host", "--npernode", "--pernode", "--num-gpus"}) {
    head_hosts |= given(app, n);
  }
  bool pernode_only = false;
  std::string pernode_only_name;
  for (auto n : kPerNodeOnly) {
    if (on_command_line(app, n) && pernode_only_name.empty()) pernode_only_name = std::string(n);
    pernode_only |= on_command_line(app, n);
  }
  bool program_option = false;
  for (auto n : kProgramOptions) program_option |= given(app, n);
  EnvDefaults pod_env(current_environment());
  p.enabled = selector || (!head_hosts && (pernode_only || program_option || env_selector ||
                                           given(app, "--nproc-per-node") || pod_env.selects()));
  // --role (an app option of the head-node mode) is ROLE_NAME here.
  if (!o.role.empty()) p.role = o.role;
  p.master_addr_given = given(app, "--master-addr");
  p.master_port_given = given(app, "--master-port");

  // torchrun's list, also from TORCHELASTIC_SIGNALS_TO_HANDLE: each must be
  // a signal; the ones dlaunch has no meaning of its own for are forwarded.
  std::string signals = p.signals_to_handle;
  if (signals.empty()) {
    const char* env = std::getenv("TORCHELASTIC_SIGNALS_TO_HANDLE");
    if (env != nullptr) signals = env;
  }
  for (std::size_t start = 0; !signals.empty() && start <= signals.size();) {
    const auto comma = signals.find(',', start);
    const std::string name = signals.substr(start, comma - start);
    start = comma == std::string::npos ? signals.size() + 1 : comma + 1;
    const int sig = signal_number(name);
    if (sig == 0 || sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD || sig == SIGPIPE) {
      throw InputError({"--signals-to-handle"}, "",
                       "'" + name + "' is not a signal dlaunch can handle",
                       "give names such as SIGTERM,SIGINT,SIGUSR1");
    }
    static constexpr int kOwn[] = {SIGTERM, SIGINT,  SIGHUP,  SIGQUIT,
                                   SIGUSR1, SIGUSR2, SIGCONT, SIGTSTP};
    if (std::find(std::begin(kOwn), std::end(kOwn), sig) == std::end(kOwn) &&
        std::find(o.forward_signals.begin(), o.forward_signals.end(), sig) ==
            o.forward_signals.end()) {
      o.forward_signals.push_back(sig);
    }
  }
  if (!p.numa_binding.empty()) {
    if (!o.bind_to.empty()) {
      throw InputError({"--numa-binding"}, "", "--numa-binding and --bind-to both given",
                       "give one: --numa-binding " + p.numa_binding + " is --bind-to " +
                           (p.numa_binding == "node"        ? "gpu"
                            : p.numa_binding == "socket"    ? "gpu-package"
                            : p.numa_binding == "exclusive" ? "gpu-exclusive"
                                                            : "gpu-l3cache"));
    }
    o.bind_to = p.numa_binding == "node"        ? "gpu"
                : p.numa_binding == "socket"    ? "gpu-package"
                : p.numa_binding == "exclusive" ? "gpu-exclusive"
                                                : "gpu-l3cache";
  }
  if (!p.logs_specs.empty() && p.logs_specs != "default") {
    throw InputError({"--logs-specs"}, "",
                     "'" + p.logs_specs + "': dlaunch has torchrun's built-in `default` only",
                     "leave it out; --log-dir writes every rank's output to files");
  }
  if (!p.event_log_handler.empty() && p.event_log_handler != "null" &&
      p.event_log_handler != "console") {
    throw InputError(
        {"--event-log-handler"}, "",
        "'" + p.event_log_handler + "': dlaunch has torchrun's built-in `null` and `console` only",
        "leave it out");
  }
  // torchrun's shutdown timeout is dlaunch's kill grace: the option, else
  // TORCH_ELASTIC_SHUTDOWN_TIMEOUT, unless --kill-grace said otherwise.
  if (p.shutdown_timeout_s >= 0) {
    if (given(app, "--kill-grace")) {
      throw InputError({"--shutdown-timeout"}, "", "--shutdown-timeout and --kill-grace both given",
                       "they are the same: give one");
    }
    o.kill_grace_s = p.shutdown_timeout_s;
  } else if (const char* env = std::getenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
             env != nullptr && *env != '\0' && !given(app, "--kill-grace")) {
    char* end = nullptr;
    const double s = std::strtod(env, &end);
    if (*end != '\0' || !(s >= 0) || s > 86400) {
      throw InputError({"TORCH_ELASTIC_SHUTDOWN_TIMEOUT"}, "",
                       std::string("'") + env + "' is not a number of seconds");
    }
    o.kill_grace_s = s;
  }
  if (!p.enabled) {
    if (pernode_only) {
      throw InputError({pernode_only_name}, "", pernode_only_name + " is for the per-node mode",
                       "leave out -H/--hostfile/-n and give --nnodes (docs/per-node.md)");
    }
    if (on_command_line(app, "--nproc-per-node")) {
      o.filter.nproc_per_node = parse_count(p.nproc, "--nproc-per-node", 1);
    }
    return;
  }
  for (auto n : kHeadOnly) {
    if (!given(app, n)) continue;
    throw InputError({std::string(n)}, "",
                     std::string(n) +
                         " is for the head-node mode and means nothing in per-node "
                         "mode (--nnodes, --node-rank, --rdzv-*, --standalone)",
                     "run one dlaunch per node without it, or drop the per-node options "
                     "(docs/per-node.md)");
  }
  try {
    check_pernode_options(app, o, pod_env);
  } catch (const InputError& e) {
    // An option the environment gave: say which variable, or it is a riddle.
    const std::string var = pod_env.from(e.pos().source);
    if (var.empty()) throw;
    throw InputError(e.pos(), e.field(), e.message() + " (" + e.pos().source + " from " + var + ")",
                     e.hint());
  }
}

namespace {

void check_pernode_options(const CLI::App& app, Options& o, EnvDefaults& env) {
  PerNodeOptions& p = o.pernode;
  for (const char* option : {"--nnodes", "--nproc-per-node", "--node-rank", "--rdzv-backend",
                             "--rdzv-endpoint", "--rdzv-id", "--rdzv-conf"}) {
    env.note_pet(app, option);
  }
  if (!p.standalone) {
    env.fill(app, "--nnodes", p.nnodes, {{"WORLD_SIZE", EnvDefaults::Scope::kOldPod}});
    if (o.max_restarts == 0) {
      env.fill_int(app, "--max-restarts", o.max_restarts, 0, INT_MAX,
                   {{"PET_MAX_RESTARTS", EnvDefaults::Scope::kAny}});
    }
    // A static rendezvous's place and this node's rank; a c10d one (an
    // endpoint, or the backend named) assigns ranks and ignores those of the
    // environment, as torchrun does.
    const bool rank_on_command_line = given(app, "--node-rank") && env.from("--node-rank").empty();
    const bool c10d = p.rdzv_backend == "c10d" ||
                      (p.rdzv_backend.empty() && !p.rdzv_endpoint.empty() && !rank_on_command_line);
    if (c10d && !env.from("--node-rank").empty()) {
      p.node_rank = -1;
      env.forget("--node-rank");
    }
    if (!c10d) {
      using S = EnvDefaults::Scope;
      env.fill_int(app, "--node-rank", p.node_rank, 0, INT_MAX, {{"RANK", S::kPod}});
      if (env.fill(app, "--master-addr", o.master_addr,
                   {{"PET_MASTER_ADDR", S::kAny}, {"MASTER_ADDR", S::kPod}})) {
        p.master_addr_given = true;
      }
      if (env.fill_int(app, "--master-port", o.master_port, 1, 65535,
                       {{"PET_MASTER_PORT", S::kAny}, {"MASTER_PORT", S::kPod}})) {
        p.master_port_given = true;
      }
    }
  }
  parse_nnodes(p);
  // JobSet (an Indexed Job of N pods): the pod's index is its node rank.
  if (!p.standalone && p.node_rank < 0 && p.max_nodes > 1 && !given(app, "--node-rank") &&
      !env.get("KUBERNETES_SERVICE_HOST").empty() &&
      (p.rdzv_backend == "static" || (p.rdzv_backend.empty() && p.rdzv_endpoint.empty()))) {
    env.fill_int(app, "--node-rank", p.node_rank, 0, INT_MAX,
                 {{"JOB_COMPLETION_INDEX", EnvDefaults::Scope::kAny}});
  }
  if (p.nproc != "gpu" && p.nproc != "cpu" && p.nproc != "auto" && p.nproc != "xpu") {
    const int n = parse_count(p.nproc, "--nproc-per-node", 1);
    if (n > limits::kMaxRanksPerNode) {
      throw InputError({"--nproc-per-node"}, "",
                       std::to_string(n) + " is over the limit of " +
                           std::to_string(limits::kMaxRanksPerNode) + " ranks per node");
    }
  }
  if (p.standalone) {
    for (const char* n : {"--rdzv-backend", "--rdzv-endpoint", "--node-rank"}) {
      if (given(app, n)) {
        throw InputError(
            {"--standalone"}, "",
            std::string("--standalone runs this node alone; ") + n + " says it meets others",
            "drop one of them");
      }
    }
    if (given(app, "--nnodes") && p.max_nodes != 1) {
      throw InputError({"--standalone"}, "", "--standalone is one node, --nnodes says " + p.nnodes);
    }
  }
  // torchrun's default: static (at --master-addr:--master-port) unless an
  // endpoint is given.
  if (p.rdzv_backend.empty()) {
    p.rdzv_backend =
        p.node_rank >= 0 || p.standalone || p.rdzv_endpoint.empty() ? "static" : "c10d";
  }
  if (p.rdzv_backend != "static" && p.rdzv_backend != "c10d") {
    throw InputError({"--rdzv-backend"}, "",
                     "'" + p.rdzv_backend + "' is not supported: dlaunch hosts its own rendezvous",
                     "use c10d (node ranks at close) or static (with --node-rank)");
  }
  if (p.rdzv_backend == "static") {
    if (p.node_rank < 0 && !p.standalone && p.max_nodes > 1) {
      throw InputError(
          {"--node-rank"}, "",
          "a static rendezvous of " + p.nnodes + " nodes needs this node's --node-rank",
          "give --node-rank K (0 <= K < --nnodes), or --rdzv-endpoint HOST:PORT for "
          "a c10d rendezvous that assigns them");
    }
    if (p.node_rank < 0) p.node_rank = 0;
    if (p.min_nodes != p.max_nodes) {
      throw InputError({"--nnodes"}, "",
                       "static rendezvous needs a fixed --nnodes, not " + p.nnodes,
                       "use --rdzv-backend c10d for MIN:MAX");
    }
    if (p.node_rank >= p.max_nodes) {
      throw InputError({"--node-rank"}, "",
                       std::to_string(p.node_rank) + " is not below --nnodes " + p.nnodes);
    }
  } else {
    if (p.rdzv_endpoint.empty()) {
      throw InputError({"--rdzv-endpoint"}, "", "c10d rendezvous needs --rdzv-endpoint HOST[:PORT]",
                       "give the address of one node (the launcher there hosts the rendezvous), "
                       "or --node-rank with --master-addr for a static one");
    }
    if (p.node_rank >= 0) {
      throw InputError(
          {"--node-rank"}, "",
          "c10d rendezvous assigns node ranks; --node-rank is for --rdzv-backend static");
    }
    for (const char* n : {"--master-addr", "--master-port"}) {
      if (given(app, n)) {
        throw InputError({n}, "",
                         std::string(n) +
                             " is for a static rendezvous; with c10d the nodes meet "
                             "at --rdzv-endpoint and node 0 chooses MASTER_PORT",
                         "leave it out, or use --node-rank for a static rendezvous");
      }
    }
  }
  // torchrun's N or LOCAL_RANK:N,... (0 none, 1 stdout, 2 stderr, 3 both).
  for (const auto& [name, text] :
       {std::pair<const char*, const std::string&>{"--redirects", p.redirects}, {"--tee", p.tee}}) {
    if (!text.empty()) (void)parse_std_spec(text, name);
  }

  if (!p.log_dir.empty()) {
    if (!o.output_dir.empty()) {
      throw InputError({"--log-dir"}, "", "--log-dir and --output-dir both given", "use one");
    }
    o.output_dir = p.log_dir;
  }
  o.auto_python = with_python(p, o.command);
}

}  // namespace

}  // namespace dlaunch
