#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dlaunch/placement/topology.h"
#include "dlaunch/private_dir.h"
#include "dlaunch/proc_stat.h"
#include "dlaunch/process.h"
#include "dlaunch/unique_fd.h"
#include "guard.h"
#include "health/node_health.h"
#include "net.h"
#include "os.h"
#include "owner_token.h"
#include "runtime/command.h"

namespace dlaunch::agent {

void PosixOs::become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

std::unique_ptr<GuardLink> PosixOs::start_guard(const std::string& token_entry) {
  return std::make_unique<Guard>(token_entry);
}

SpawnResult PosixOs::spawn(const SpawnOptions& opts) { return dlaunch::spawn(opts); }

void PosixOs::signal_group(pid_t pgid, int sig) { ::kill(-pgid, sig); }

void PosixOs::signal(pid_t pid, int sig) { ::kill(pid, sig); }

void PosixOs::signal_main_thread(pid_t pid, int sig) { ::syscall(SYS_tgkill, pid, pid, sig); }

std::vector<pid_t> PosixOs::descendants() { return descendants_of(::getpid()); }

pid_t PosixOs::process_group(pid_t pid) { return ::getpgid(pid); }

std::vector<std::pair<pid_t, int>> PosixOs::reap() {
  std::vector<std::pair<pid_t, int>> out;
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) out.emplace_back(pid, status);
  return out;
}

char PosixOs::process_state(pid_t pid) { return dlaunch::process_state(pid); }

std::string PosixOs::make_private_dir(const std::string& prefix) {
  return dlaunch::make_private_dir(runtime_base_dir(), prefix);
}

void PosixOs::remove_dir(const std::string& dir) {
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace dlaunch::agent

namespace dlaunch::agent {

std::string own_cgroup_dir() {
  std::string path;
  {
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("0::", 0) == 0) path = line.substr(3);
    }
  }
  if (path.empty()) return {};
  // mountinfo: id parent major:minor root mountpoint options ... - fstype source super
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, dev, root, mount;
    fields >> id >> parent >> dev >> root >> mount;
    if (root != "/") continue;  // a bind mount of a subtree: not where our path starts
    return mount + (path == "/" ? "" : path);
  }
  return {};
}

std::string cgroup_owner_suffix() {
  return "-a" + owner_token(::getpid(), process_start_ticks(::getpid()));
}

int sweep_orphan_cgroups(const std::string& parent) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    const auto at = name.rfind("-a");
    if (name.rfind("dlaunch-", 0) != 0 || at == std::string::npos) continue;
    const auto owner = parse_owner_token(name.substr(at + 2));
    if (!owner) continue;
    // Its agent runs (a zombie does not: an agent killed, not yet reaped).
    if (process_start_ticks(owner->pid) == owner->start_ticks &&
        dlaunch::process_state(static_cast<pid_t>(owner->pid)) != 'Z')
      continue;
    if (!std::filesystem::is_directory(entry.path(), ec)) continue;
    if (::rmdir(entry.path().c_str()) == 0) ++removed;
  }
  return removed;
}

Result<std::string> PosixOs::make_cgroup(const std::string& name) {
  const std::string own = own_cgroup_dir();
  if (own.empty()) return Result<std::string>::failure("no cgroup v2 hierarchy is mounted");
  sweep_orphan_cgroups(own);
  const std::string dir = own + "/" + name;
  if (::mkdir(dir.c_str(), 0755) != 0) {
    return Result<std::string>::failure("cannot create " + dir + ": " + std::strerror(errno));
  }
  const auto give_up = [&](const std::string& why) {
    ::rmdir(dir.c_str());
    return Result<std::string>::failure(why);
  };
  if (::access((dir + "/cgroup.kill").c_str(), W_OK) != 0) {
    return give_up("the kernel has no cgroup.kill (Linux 5.14 or later) at " + dir);
  }
  // Moving a process needs write access up to the common ancestor: try it
  // with a child that exits at once.
  UniqueFd procs(::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  if (!procs) return give_up("cannot open " + dir + "/cgroup.procs: " + std::strerror(errno));
  const pid_t probe = ::fork();
  if (probe == 0) ::_exit(::write(procs.get(), "0", 1) == 1 ? 0 : 1);
  int status = 0;
  ::waitpid(probe, &status, 0);
  if (probe < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return give_up("processes cannot be moved into " + dir);
  }
  return dir;
}

std::vector<pid_t> PosixOs::cgroup_members(const std::string& cgroup) {
  std::vector<pid_t> out;
  std::ifstream in(cgroup + "/cgroup.procs");
  pid_t pid = 0;
  while (in >> pid) out.push_back(pid);
  return out;
}

void PosixOs::kill_cgroup(const std::string& cgroup) {
  UniqueFd kill(::open((cgroup + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC));
  if (kill) (void)!::write(kill.get(), "1", 1);
}

bool PosixOs::remove_cgroup(const std::string& cgroup) {
  return ::rmdir(cgroup.c_str()) == 0 || errno == ENOENT;
}

Result<pid_t> PosixOs::spawn_in(const SpawnOptions& opts, const std::string& cgroup) {
  if (cgroup.empty()) return dlaunch::spawn(opts);
  UniqueFd procs(::open((cgroup + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  if (!procs) {
    return Result<pid_t>::failure("cannot open " + cgroup +
                                  "/cgroup.procs: " + std::strerror(errno));
  }
  SpawnOptions with = opts;
  with.cgroup_procs_fd = procs.get();
  return dlaunch::spawn(with);
}

std::vector<proto::Interface> PosixOs::interfaces() { return proto::list_interfaces(); }

std::string PosixOs::route_interface(const std::string& address) {
  return interface_toward(address, proto::list_interfaces());
}

std::string PosixOs::boot_id() { return dlaunch::boot_id(); }

ProcessRef PosixOs::parent() { return parent_process(); }

std::optional<std::int64_t> PosixOs::run_delay_ns(const ProcessRef& p) {
  return dlaunch::run_delay_ns(p);
}

namespace {

// The GPUs `nvidia-smi -L` lists (its "GPU N: ..." lines); 0 where there is
// no nvidia-smi or it fails, or does not answer within 30 s.
int nvidia_smi_gpus() {
  const CommandResult r =
      run_command({"nvidia-smi", "-L"}, current_environment(), std::chrono::seconds(30));
  int gpus = 0;
  std::istringstream in(r.output);
  std::string line;
  while (std::getline(in, line)) gpus += line.rfind("GPU", 0) == 0 ? 1 : 0;
  return gpus;
}

// A GPU test longer than this is a finding: a kernel or the driver hangs.
// (A healthy node's takes well under a second per GPU, plus cuInit's few
// seconds; the limit stays under the head's 30 s --start-timeout, so that the
// node says why rather than the head that it never got ready.)
// DLAUNCH_GPU_TEST_LIMIT_S changes it (docs/health.md).
constexpr std::chrono::seconds kGpuTestLimit{20};

std::chrono::seconds gpu_test_limit() {
  const char* v = std::getenv("DLAUNCH_GPU_TEST_LIMIT_S");
  char* end = nullptr;
  const long s = v != nullptr ? std::strtol(v, &end, 10) : 0;
  return v != nullptr && end != v && *end == '\0' && s > 0 ? std::chrono::seconds(s)
                                                           : kGpuTestLimit;
}

// The GPU test (health/gpu_test.h) in a child, `dlaunch-agent --gpu-test
// MB`, with CUDA's devices in PCI bus order as NVML numbers them; its facts,
// or "cuda" saying why there are none.
void add_gpu_test(std::vector<std::pair<std::string, std::string>>& facts, std::uint32_t mb) {
  std::vector<std::string> env;
  for (auto& kv : current_environment()) {
    if (!kv.starts_with("CUDA_DEVICE_ORDER=")) env.push_back(std::move(kv));
  }
  env.emplace_back("CUDA_DEVICE_ORDER=PCI_BUS_ID");
  const std::vector<std::string> argv = {self_exe(), "--gpu-test", std::to_string(mb)};
  const auto limit = gpu_test_limit();
  const CommandResult r = run_command(argv, env, limit);
  if (!r.ok()) {
    facts.emplace_back(
        "cuda", r.timed_out ? "error: the GPU test did not finish within " +
                                  std::to_string(limit.count()) + " s (a GPU or its driver hangs)"
                            : "error: the GPU test failed: " + describe_failure(argv, r));
    return;
  }
  std::istringstream in(r.output);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (!line.starts_with("health.") || eq == std::string::npos) continue;
    facts.emplace_back(line.substr(7, eq - 7), line.substr(eq + 1));
  }
}

bool nvml_sees_gpus(const std::vector<std::pair<std::string, std::string>>& facts) {
  bool loaded = false;
  bool some = false;
  for (const auto& [k, v] : facts) {
    if (k == "nvml") loaded = v == "loaded";
    if (k == "gpu_count")
      some = !v.empty() && v != "0" && v.find_first_not_of("0123456789") == std::string::npos;
  }
  return loaded && some;
}

}  // namespace

AgentOs::NodeFacts PosixOs::node_facts(const std::string& workdir, bool count_gpus,
                                       std::uint32_t gpu_test_mb) {
  NodeFacts out;
  if (auto topo = placement::load_topology()) {
    out.topology = placement::summary(*topo);
  } else {
    out.topology = "not read: " + topo.error();
  }
  if (count_gpus) out.gpus = nvidia_smi_gpus();
  const char* root = std::getenv("DLAUNCH_HEALTH_ROOT");
  out.facts = health::collect({.workdir = workdir, .root = root != nullptr ? root : ""});
  if (gpu_test_mb > 0 && nvml_sees_gpus(out.facts)) add_gpu_test(out.facts, gpu_test_mb);
  return out;
}

}  // namespace dlaunch::agent
