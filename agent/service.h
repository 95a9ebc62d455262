// A node service: one of the agent's jobs on its node beside running the
// workers (the PMIx server, the network tests, the store, the ranks'
// progress, the stdin feed, the stacks), with one interface through which
// the agent tells it the node's moments. The agent's lifecycle (lifecycle.h) stays the agent's; a
// service keeps its own state and timers, and reaches the head through the
// NodeAccess it is given. The head's side has the same shape
// (launcher/controller/feature.h).
//
// Thread safety: none; the agent's event loop only.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlaunch/proto/protocol.h"
#include "dlaunch/unique_fd.h"

namespace dlaunch::agent {

// What a service may ask of its agent.
class NodeAccess {
 public:
  // To the head, while the control channel is open (dropped after).
  virtual void send_to_head(proto::Message msg) = 0;
  // A worker that runs now: its rank, its process, its program (argv[0]).
  struct RunningWorker {
    int rank = 0;
    pid_t pid = -1;
    std::string program;
  };
  // The workers that run now, in rank order.
  virtual std::vector<RunningWorker> running_workers() const = 0;
  virtual bool worker_running(int rank) const = 0;
  // The workers run in the node's container (runtime/runtime.h), not on the
  // host.
  virtual bool workers_contained() const = 0;
  // The workers run and no stop has begun (the phase is running and no
  // Abort came): what a service that reports on them waits for.
  virtual bool workers_running() const = 0;
  // The job's private folder on this node (mkdtemp, 0700, removed at the
  // end and by the guard if the agent dies): made before the services'
  // Setup. Empty when none could be made.
  virtual const std::string& node_dir() const = 0;
  // A path of the service's (a folder, a socket) that the guard removes
  // should the agent die before its stop().
  virtual void remove_on_death(const std::string& path) = 0;

 protected:
  ~NodeAccess() = default;
};

class NodeService {
 public:
  virtual ~NodeService() = default;
  // Setup: the service sets up what it needs for the job and adds its part
  // of the node's Ready; a message that fails the node (its Fatal) if it
  // cannot. Called in the agent's order, before the node is Ready.
  virtual std::optional<std::string> prepare(const proto::Setup& /*setup*/,
                                             proto::Ready& /*ready*/) {
    return std::nullopt;
  }
  // A message of the head's that the lifecycle's table let through: true
  // when it was the service's (handled), false when it is another's.
  virtual bool handle(const proto::Message& /*msg*/) { return false; }
  // The folders of the service's that the workers must see: the node's
  // container mounts them. Asked after prepare().
  virtual std::vector<std::string> job_dirs() const { return {}; }
  // Start: the workers are about to be spawned.
  virtual void on_start(const proto::Start& /*start*/) {}
  // What the service gives a worker it spawns: variables of its environment,
  // a descriptor it keeps across exec (at most one per worker, of all the
  // services: SpawnOptions::keep_fd), its stdin (at most one service's; none:
  // /dev/null), closed here once it is spawned; or why it must not be
  // spawned (refused: it fails as a spawn that failed, and the services
  // after this one are not asked).
  struct WorkerGift {
    proto::Env env;
    int keep_fd = -1;
    UniqueFd stdin_read;
    std::string refused;
  };
  virtual void before_spawn(int /*rank*/, WorkerGift& /*gift*/) {}
  // The worker was spawned, or its spawn failed or was refused (reported as
  // its exit, and on_worker_exit does not follow): what before_spawn set up
  // is kept or dropped. Only the services whose before_spawn ran are told.
  virtual void after_spawn(int /*rank*/, bool /*spawned*/) {}
  // A worker's output as it is read, before it goes to the head.
  virtual void on_output(int /*rank*/, proto::Stream /*stream*/, std::string_view /*data*/) {}
  // A spawned worker exited (reaped; what was left in its pipes is read).
  virtual void on_worker_exit(int /*rank*/) {}
  // The workers were spawned (Start): what runs while they do begins.
  virtual void on_running() {}
  // The job on this node is over (Done): whatever the service holds goes.
  virtual void stop() {}

 protected:
  NodeService() = default;
  NodeService(const NodeService&) = default;
  NodeService& operator=(const NodeService&) = default;
};

}  // namespace dlaunch::agent
