#include "node_runtime.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "dlaunch/proc_stat.h"
#include "dlaunch/process.h"
#include "dlaunch/tunables.h"
#include "log.h"
#include "runtime/command.h"
#include "runtime/keepalive_image.h"

namespace dlaunch::agent {

NodeRuntime::NodeRuntime(Clock& clock, AgentOs& os, Hooks hooks)
    : clock_(clock), os_(os), hooks_(std::move(hooks)) {}

NodeRuntime::~NodeRuntime() = default;

std::optional<std::string> NodeRuntime::choose(const proto::ContainerSpec& spec) {
  auto runtime = make_runtime(spec, current_environment(), host_name());
  if (!runtime) return runtime.error();
  runtime_ = std::move(*runtime);
  image_ = spec.image;
  return std::nullopt;
}

bool NodeRuntime::contained() const { return runtime_ && runtime_->kind() != RuntimeKind::kNative; }

std::vector<std::string> NodeRuntime::base_environment() const {
  return runtime_ ? runtime_->base_environment(current_environment()) : current_environment();
}

void NodeRuntime::fatal(std::string message) { hooks_.send(proto::Fatal{std::move(message)}); }

void NodeRuntime::make(const proto::Setup& setup, std::vector<std::string> job_dirs,
                       const std::string& private_dir, const std::string& cgroup,
                       GuardLink& guard) {
  RuntimeNode& node = node_;
  node = RuntimeNode{.job_id = setup.job_id,
                     .node_rank = setup.node_rank,
                     .hostname = host_name(),
                     .workdir = setup.workdir,
                     .job_dirs = std::move(job_dirs),
                     .agent_pid = ::getpid(),
                     .agent_start_ticks = process_start_ticks(::getpid()),
                     .uid = ::getuid(),
                     .gid = ::getgid(),
                     .env = current_environment()};
  const char* root = std::getenv("DLAUNCH_HEALTH_ROOT");  // tests: the node's /dev and /etc
  node.gpus = find_node_gpus(root != nullptr ? root : "");
  if (node.workdir.empty()) node.workdir = std::filesystem::current_path().string();
  if (const char* home = std::getenv("HOME"); home != nullptr) node.home = home;
  if (const std::string self = self_exe(); !self.empty())
    node.keepalive = std::filesystem::path(self).parent_path() / "dlaunch-keepalive";
  // An agent copied to the node alone (docs/portable-agent.md) has none
  // beside it: its own copy, in the job's private folder.
  if ((node.keepalive.empty() || ::access(node.keepalive.c_str(), X_OK) != 0) &&
      !private_dir.empty() && dlaunch_keepalive_image_size > 0) {
    const std::string path = private_dir + "/keepalive";
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0700));
    if (fd &&
        write_all(fd.get(), std::string_view(reinterpret_cast<const char*>(dlaunch_keepalive_image),
                                             dlaunch_keepalive_image_size))) {
      node.keepalive = path;
    }
  }
  if (auto rm = runtime_->removal_command(node); !rm.empty()) guard.run_on_death(rm);
  auto pull = runtime_->pull_command(node);
  if (!pull) {
    fatal(pull.error());
    return;
  }
  if (pull->empty()) {
    finish();
    return;
  }
  start_pull(std::move(*pull), cgroup, guard);
}

void NodeRuntime::start_pull(std::vector<std::string> argv, const std::string& cgroup,
                             GuardLink& guard) {
  pull_output_ = UniqueFd(::memfd_create("dlaunch-pull", MFD_CLOEXEC));
  if (!pull_output_) {
    fatal("cannot pull image " + image_ + " on " + node_.hostname +
          ": memfd_create: " + std::strerror(errno));
    return;
  }
  SpawnOptions opts;
  opts.argv = argv;
  opts.env = node_.env;
  opts.stdout_fd = pull_output_.get();
  opts.stderr_fd = pull_output_.get();
  opts.parent_death_signal = SIGKILL;
  // In the job's cgroup and watched by the guard: nothing of it outlives the agent.
  auto pid = os_.spawn_in(opts, cgroup);
  if (!pid) {
    fatal("cannot pull image " + image_ + " on " + node_.hostname + ": `" + argv.front() +
          " pull` did not start: " + pid.error());
    return;
  }
  pull_pid_ = *pid;
  pull_argv_ = std::move(argv);
  guard.watch_process_group(pull_pid_);
  hooks_.send(proto::ImagePull{.image = image_});
  hooks_.pulling();
  if (!pull_timer_) pull_timer_ = clock_.make_timer();
  clock_.after(*pull_timer_, kImagePullLimit, [this] {
    if (pull_pid_ <= 0) return;
    pull_timed_out_ = true;
    os_.signal_group(pull_pid_, SIGKILL);
  });
}

bool NodeRuntime::child_exited(pid_t pid, int status, bool wanted) {
  if (pid <= 0 || pid != pull_pid_) return false;
  pull_pid_ = 0;
  if (pull_timer_) pull_timer_->cancel();
  CommandResult r{.status = status, .timed_out = pull_timed_out_};
  // Its last words (what a failed pull says is at the end).
  if (pull_output_) {
    struct stat st {};
    const off_t size = ::fstat(pull_output_.get(), &st) == 0 ? st.st_size : 0;
    const off_t from = std::max<off_t>(0, size - static_cast<off_t>(kMaxCommandOutput));
    r.output.resize(static_cast<std::size_t>(size - from));
    const ssize_t n = ::pread(pull_output_.get(), r.output.data(), r.output.size(), from);
    r.output.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    pull_output_.reset();
  }
  if (!wanted) return true;  // the job is being stopped
  if (!r.ok()) {
    fatal("cannot pull image " + image_ + " on " + node_.hostname + ": " +
          describe_failure(pull_argv_, r));
    return true;
  }
  hooks_.send(proto::ImagePull{.image = image_, .done = true});
  finish();
  return true;
}

void NodeRuntime::finish() {
  auto made = runtime_->prepare(node_);
  if (!made) {
    fatal(made.error());
    return;
  }
  hooks_.made();
}

void NodeRuntime::teardown() {
  if (!runtime_) return;
  if (auto why = runtime_->teardown(timing::kContainerRemoval); !why.empty())
    log("could not remove the node's container: " + why);
}

void NodeRuntime::cancel() {
  if (pull_timer_) pull_timer_->cancel();
}

}  // namespace dlaunch::agent
