#include "oci_runtime.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "command.h"
#include "dlaunch/proc_stat.h"
#include "owner_token.h"

namespace dlaunch::agent {

namespace {

using std::chrono::seconds;

// The image is here (the agent pulled it first): the run is the container's
// start, which a slow storage driver (vfs copies the whole image) can make
// long; the head's --start-timeout bounds the node's start anyway.
constexpr auto kRunLimit = seconds(600);
constexpr auto kCommandLimit = seconds(30);
// Where dlaunch-keepalive is inside the container (mounted read-only).
constexpr const char* kKeepaliveTarget = "/.dlaunch/keepalive";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// NAME=VALUE entries of /proc/PID/environ.
std::vector<std::string> environ_of(pid_t pid) {
  const std::string all = read_proc_file("/proc/" + std::to_string(pid) + "/environ");
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < all.size()) {
    auto end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    if (end > start) out.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

ino_t inode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

}  // namespace

std::vector<std::string> oci_run_args(RuntimeKind kind, const std::string& program,
                                      const proto::ContainerSpec& spec, const RuntimeNode& node) {
  std::vector<std::string> a = {
      program,     "run",
      "-d",        "--rm",
      "--name",    container_name(node.job_id, node.node_rank),
      "--label",   "dlaunch.job=" + node.job_id,
      "--label",   "dlaunch.node=" + std::to_string(node.node_rank),
      "--label",   "dlaunch.agent=" + owner_token(node.agent_pid, node.agent_start_ticks),
      "--network", "host"};
  // /dev/shm: the host's, with its IPC namespace, unless a size was asked
  // for: then a private one of that size (NCCL's shared memory between the
  // node's ranks lives there; a runtime's default of 64 MB is too small).
  if (spec.shm_size.empty()) {
    a.insert(a.end(), {"--ipc", "host"});
  } else {
    a.insert(a.end(), {"--ipc", "private", "--shm-size", spec.shm_size});
  }
  a.insert(a.end(), {"--pid", "host", "--pull", "never"});
  if (node.uid != 0) {
    // The user's own ids inside, so that what the ranks write in mounted
    // folders is theirs.
    if (kind == RuntimeKind::kPodman) {
      a.insert(a.end(), {"--userns", "keep-id"});
    } else {
      a.insert(a.end(), {"--user", std::to_string(node.uid) + ":" + std::to_string(node.gid)});
    }
  }
  if (node.gpus.present) {
    if (kind == RuntimeKind::kDocker) {
      a.insert(a.end(), {"--gpus", "all"});
    } else if (!node.gpus.cdi_spec.empty()) {
      a.insert(a.end(), {"--device", "nvidia.com/gpu=all"});
    } else {
      // No CDI spec: NVIDIA's OCI hook, where installed, acts on these.
      std::vector<std::string> hook;
      add_nvidia_hook_env(hook);
      for (const auto& e : hook) a.insert(a.end(), {"-e", e});
    }
  }
  a.insert(a.end(), {"--entrypoint", kKeepaliveTarget, "-v",
                     node.keepalive + ":" + kKeepaliveTarget + ":ro"});
  for (const auto& m : container_mounts(spec, node)) {
    a.insert(a.end(), {"-v", m.source + ":" + m.target + (m.read_only ? ":ro" : "")});
  }
  a.push_back(spec.image);
  a.push_back(std::to_string(node.agent_pid));
  return a;
}

std::vector<std::string> oci_remove_args(RuntimeKind kind, const std::string& program,
                                         const std::string& name) {
  // Nothing in it has a clean shutdown to wait for: the ranks are gone.
  if (kind == RuntimeKind::kPodman) return {program, "rm", "-f", "--ignore", "-t", "0", name};
  return {program, "rm", "-f", name};
}

pid_t running_agent_of_label(const std::string& label) {
  const auto owner = parse_owner_token(label);
  if (!owner) return 0;
  if (owner->pid == ::getpid()) return 0;  // this agent's own: a leftover of ours
  return process_start_ticks(owner->pid) == owner->start_ticks ? static_cast<pid_t>(owner->pid) : 0;
}

std::vector<std::string> oci_image_present_args(RuntimeKind kind, const std::string& program,
                                                const std::string& image) {
  if (kind == RuntimeKind::kPodman) return {program, "image", "exists", image};
  return {program, "image", "inspect", "--format", "{{.Id}}", image};
}

std::vector<std::string> oci_pull_args(const std::string& program, const std::string& image) {
  return {program, "pull", "-q", image};
}

OciRuntime::OciRuntime(RuntimeKind kind, std::string program, proto::ContainerSpec spec)
    : kind_(kind), program_(std::move(program)), spec_(std::move(spec)) {}

OciRuntime::~OciRuntime() = default;

std::vector<std::string> OciRuntime::removal_command(const RuntimeNode& node) const {
  // podman: by this agent's label, never by the name, which a container of
  // another job with the same id may hold (start() refuses to take it).
  if (kind_ == RuntimeKind::kPodman) {
    return {program_,
            "rm",
            "-f",
            "-t",
            "0",
            "--filter",
            "label=dlaunch.agent=" + owner_token(node.agent_pid, node.agent_start_ticks)};
  }
  return oci_remove_args(kind_, program_, container_name(node.job_id, node.node_rank));
}

std::string OciRuntime::refusal(const RuntimeNode& node) const {
  if (kind_ == RuntimeKind::kDocker && node.uid != 0) {
    return "the ranks enter the container's namespaces, which docker allows to root only "
           "(use --container-runtime podman, which runs rootless)";
  }
  if (node.keepalive.empty() || ::access(node.keepalive.c_str(), X_OK) != 0) {
    return "dlaunch-keepalive is not installed next to dlaunch-agent (" +
           (node.keepalive.empty() ? std::string("?") : node.keepalive) + ")";
  }
  return {};
}

Result<std::vector<std::string>> OciRuntime::pull_command(const RuntimeNode& node) {
  using R = Result<std::vector<std::string>>;
  if (auto why = refusal(node); !why.empty()) {
    return R::failure("cannot start the " + runtime_name(kind_) + " container of image " +
                      spec_.image + " on " + node.hostname + ": " + why);
  }
  if (spec_.pull == "never") return std::vector<std::string>{};
  if (spec_.pull != "always") {
    // missing: a pull only when the image is not here. Whatever else the
    // check says (a storage that cannot be read), the pull says it better.
    const auto present =
        run_command(oci_image_present_args(kind_, program_, spec_.image), node.env, kCommandLimit);
    if (present.ok()) return std::vector<std::string>{};
  }
  return oci_pull_args(program_, spec_.image);
}

Result<std::string> OciRuntime::prepare(const RuntimeNode& node) {
  auto r = start(node);
  if (!r) {
    return Result<std::string>::failure("cannot start the " + runtime_name(kind_) +
                                        " container of image " + spec_.image + " on " +
                                        node.hostname + ": " + r.error());
  }
  return r;
}

Result<std::string> OciRuntime::start(const RuntimeNode& node) {
  using R = Result<std::string>;
  if (auto why = refusal(node); !why.empty()) return R::failure(why);
  env_ = node.env;
  name_ = container_name(node.job_id, node.node_rank);
  hostname_ = node.hostname;
  const auto run = oci_run_args(kind_, program_, spec_, node);
  started_ = true;  // from here on teardown removes it, whatever happened
  auto started = run_command(run, env_, kRunLimit);
  if (!started.ok() && started.output.find("already in use") != std::string::npos) {
    // A leftover of this job and node (an agent before this one, killed
    // with its guard, whose keep-alive has not noticed yet) holds the name:
    // removed. Not the container of a running agent: another job of the
    // same id on this machine, whose ranks it holds.
    const std::vector<std::string> label = {program_, "inspect", "--format",
                                            "{{index .Config.Labels \"dlaunch.agent\"}}", name_};
    auto owner = run_command(label, env_, kCommandLimit);
    if (owner.ok()) {
      if (const pid_t other = running_agent_of_label(owner.output); other > 0) {
        started_ = false;  // not ours to remove
        return R::failure("a container named " + name_ +
                          " is held by a running dlaunch-agent (pid " + std::to_string(other) +
                          ") of another job with the same id on this machine; give each job its "
                          "own --job-id (or --rdzv-id)");
      }
    }
    (void)run_command(oci_remove_args(kind_, program_, name_), env_, kCommandLimit);
    started = run_command(run, env_, kRunLimit);
  }
  if (!started.ok()) return R::failure(describe_failure(run, started));

  const std::string format =
      kind_ == RuntimeKind::kPodman ? "{{.State.Pid}} {{.State.ConmonPid}}" : "{{.State.Pid}}";
  const std::vector<std::string> inspect = {program_, "inspect", "--format", format, name_};
  auto state = run_command(inspect, env_, kCommandLimit);
  std::istringstream pids(state.output);
  pids >> main_pid_ >> monitor_pid_;
  if (!state.ok() || main_pid_ <= 0) {
    main_pid_ = 0;
    return R::failure("it ended as soon as it started (" + describe_failure(inspect, state) +
                      "); is the image for this machine's architecture?");
  }
  const std::string proc = "/proc/" + std::to_string(main_pid_);
  mntns_ = UniqueFd(::open((proc + "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
  root_ = UniqueFd(::open((proc + "/root").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!mntns_ || !root_) {
    return R::failure("cannot open " + proc + "/ns/mnt or /root: " + std::strerror(errno));
  }
  // Rootless podman: the container has a user namespace of its own.
  if (inode_of(proc + "/ns/user") != inode_of("/proc/self/ns/user")) {
    userns_ = UniqueFd(::open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
    if (!userns_) return R::failure("cannot open " + proc + "/ns/user: " + std::strerror(errno));
  }
  image_env_ = environ_of(main_pid_);
  if (spec_.entrypoint) {
    const std::vector<std::string> ep = {program_,
                                         "image",
                                         "inspect",
                                         "--format",
                                         "{{range .Config.Entrypoint}}{{println .}}{{end}}",
                                         spec_.image};
    auto got = run_command(ep, env_, kCommandLimit);
    if (!got.ok()) return R::failure(describe_failure(ep, got));
    entrypoint_ = lines_of(got.output);
  }
  return "container " + name_ + " (" + runtime_name(kind_) + ", image " + spec_.image + ")";
}

std::string OciRuntime::check_program(const std::string& prog, const std::vector<std::string>& env,
                                      const std::string& workdir) {
  const std::string dir = spec_.workdir.empty() ? workdir : spec_.workdir;
  const std::string program = entrypoint_.empty() ? prog : entrypoint_.front();
  const auto candidates =
      program.empty() ? std::vector<std::string>{} : program_candidates(program, env, dir);
  const int userns = userns_.get();
  const int mntns = mntns_.get();
  const int root = root_.get();
  // Looked at from inside: a child that enters the container as a worker would.
  const pid_t pid = ::fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    if ((userns >= 0 && ::setns(userns, CLONE_NEWUSER) != 0) || ::setns(mntns, CLONE_NEWNS) != 0 ||
        ::fchdir(root) != 0 || ::chroot(".") != 0) {
      ::_exit(5);
    }
    if (!dir.empty() && ::access(dir.c_str(), X_OK) != 0) ::_exit(3);
    if (program.empty()) ::_exit(0);
    for (const auto& c : candidates) {
      struct stat st {};
      if (::stat(c.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(c.c_str(), X_OK) == 0)
        ::_exit(0);
    }
    ::_exit(4);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::string where = "in the container (image " + spec_.image + ") on " + hostname_;
  switch (code) {
    case 0:
      return {};
    case 3:
      return "working directory '" + dir + "' does not exist " + where +
             (spec_.workdir.empty() ? " (mount it with --container-mounts)" : "");
    case 4:
      return "program '" + program + "' not found " + where +
             " (not on its PATH, or not executable, in " + dir + ")";
    default:
      return "cannot enter the container " + name_ + " to look for '" + program + "'";
  }
}

int OciRuntime::open_in_image(const std::string& path) const {
  if (!root_) return -1;
  const std::string relative = path.substr(path.find_first_not_of('/'));
  // Within the container's root: its absolute links are the image's, never
  // the host's (Linux 5.6's RESOLVE_IN_ROOT).
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  const long fd = ::syscall(SYS_openat2, root_.get(), relative.c_str(), &how, sizeof how);
  return fd >= 0 ? static_cast<int>(fd) : -1;
}

std::vector<std::string> OciRuntime::base_environment(std::vector<std::string> agent_env) const {
  std::vector<std::string> keep = spec_.env;
  if (spec_.mount_home) keep.emplace_back("HOME");
  return layered_environment(agent_env, image_env_, keep);
}

void OciRuntime::adapt(SpawnOptions& opts) const {
  if (!spec_.workdir.empty()) opts.workdir = spec_.workdir;
  if (!entrypoint_.empty())
    opts.argv.insert(opts.argv.begin(), entrypoint_.begin(), entrypoint_.end());
  opts.enter_userns_fd = userns_.get();
  opts.enter_mntns_fd = mntns_.get();
  opts.enter_root_fd = root_.get();
}

std::vector<pid_t> OciRuntime::own_processes() const {
  std::vector<pid_t> out;
  for (pid_t p : {main_pid_, monitor_pid_}) {
    if (p > 0) out.push_back(p);
  }
  return out;
}

std::string OciRuntime::teardown(std::chrono::milliseconds limit) {
  if (!started_) return {};
  started_ = false;
  userns_.reset();
  mntns_.reset();
  root_.reset();
  const auto rm = oci_remove_args(kind_, program_, name_);
  auto r = run_command(rm, env_, limit);
  main_pid_ = 0;
  monitor_pid_ = 0;
  // Gone already (its main process ended and --rm removed it): done too.
  if (r.ok() || r.output.find("No such container") != std::string::npos ||
      r.output.find("no such container") != std::string::npos)
    return {};
  return describe_failure(rm, r);
}

}  // namespace dlaunch::agent
