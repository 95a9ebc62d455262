// Where this node's workers run (runtime/runtime.h): on the host, or in the
// node's container (podman, docker) or its preparation (apptainer, enroot),
// which it makes at Setup with the job's folders of this node mounted, and
// removes at the end. The guard is told how to remove the container before
// it exists, should the agent die while it starts. An image that must be
// pulled first is pulled by a child of the agent's loop: the node heartbeats
// meanwhile, and the head does not count the pull against its start's
// deadline (proto::ImagePull), which it bounds by a limit of its own.
//
// Thread safety: none; the agent's event loop only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlaunch/clock.h"
#include "dlaunch/proto/protocol.h"
#include "dlaunch/unique_fd.h"
#include "guard.h"
#include "os.h"
#include "runtime/runtime.h"

namespace dlaunch::agent {

// The pull of the node's container image: a registry that stalls is given up
// on after this.
inline constexpr std::chrono::minutes kImagePullLimit{30};

class NodeRuntime {
 public:
  struct Hooks {
    std::function<void(proto::Message)> send;  // to the head
    std::function<void()> pulling;             // a pull began: the node must heartbeat
    std::function<void()> made;                // the container is made: the node can be Ready
  };
  NodeRuntime(Clock& clock, AgentOs& os, Hooks hooks);
  ~NodeRuntime();
  NodeRuntime(const NodeRuntime&) = delete;
  NodeRuntime& operator=(const NodeRuntime&) = delete;

  // Setup: the runtime for the job's container spec on this node; why not
  // (the named runtime is not here) fails the node.
  std::optional<std::string> choose(const proto::ContainerSpec& spec);
  // The workers run in a container, not on the host (after choose()).
  bool contained() const;
  // A contained node's container: made, pulling the image first where it
  // must (in cgroup, watched by guard), with job_dirs mounted; private_dir
  // (the job's, on this node) holds the keep-alive of an agent copied alone.
  // Ends with hooks.made, or a Fatal to the head.
  void make(const proto::Setup& setup, std::vector<std::string> job_dirs,
            const std::string& private_dir, const std::string& cgroup, GuardLink& guard);
  // A child exited: true when it was the pull (then handled). wanted: the
  // node still waits for its container (no stop has begun).
  bool child_exited(pid_t pid, int status, bool wanted);
  // The runtime chosen; none before choose().
  Runtime* runtime() const { return runtime_.get(); }
  // The workers' environment before dlaunch's variables: the agent's, with
  // the image's where they win.
  std::vector<std::string> base_environment() const;
  // Removes the container, if any (what went wrong goes to the agent's log).
  void teardown();
  // The job is over: the pull's limit goes.
  void cancel();

 private:
  void start_pull(std::vector<std::string> argv, const std::string& cgroup, GuardLink& guard);
  void finish();
  void fatal(std::string message);

  Clock& clock_;
  AgentOs& os_;
  Hooks hooks_;
  std::unique_ptr<Runtime> runtime_;
  std::string image_;
  RuntimeNode node_;  // this node, as the runtime sees it
  // The image's pull: the child, its command, its output (a memfd: whatever
  // the pull leaves behind cannot hold it open), its limit.
  pid_t pull_pid_ = 0;
  std::vector<std::string> pull_argv_;
  UniqueFd pull_output_;
  std::unique_ptr<Timer> pull_timer_;
  bool pull_timed_out_ = false;
};

}  // namespace dlaunch::agent
