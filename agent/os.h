// AgentOs: what the agent asks of the operating system, behind one interface
// (leveldb's Env, for the agent). PosixOs does it for real; the agent's unit
// tests give it a fake that records what was asked (spawns, signals) and
// plays what happens (a worker exits, a leftover lingers), so that the
// agent's state machine runs without a single process.
//
// Thread safety: none; the agent's event loop only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dlaunch/proc_stat.h"
#include "dlaunch/process.h"
#include "dlaunch/proto/protocol.h"

namespace dlaunch::agent {

// The guard (guard.h): a process that takes the workers down if the agent
// dies without cleaning up (SIGKILL, OOM killer).
class GuardLink {
 public:
  virtual ~GuardLink() = default;
  virtual void watch_process_group(pid_t pgid) = 0;
  // A folder of the agent's to remove if the agent dies.
  virtual void remove_on_death(const std::string& dir) = 0;
  // The job's cgroup (AgentOs::make_cgroup): killed whole and removed if the
  // agent dies.
  virtual void kill_cgroup_on_death(const std::string& cgroup) = 0;
  // A command to run if the agent dies, once its processes are killed: a
  // container runtime's removal of the node's container (agent/runtime/).
  virtual void run_on_death(const std::vector<std::string>& argv) = 0;
  // The agent cleaned up itself: the guard exits without killing anything.
  virtual void disarm() = 0;
  virtual pid_t pid() const = 0;
};

class AgentOs {
 public:
  virtual ~AgentOs() = default;
  // Orphans of the workers reparent to this process (PR_SET_CHILD_SUBREAPER).
  virtual void become_subreaper() = 0;
  // token_entry: "NAME=VALUE" as set in the workers' environment.
  virtual std::unique_ptr<GuardLink> start_guard(const std::string& token_entry) = 0;
  virtual SpawnResult spawn(const SpawnOptions& opts) = 0;
  // kill(2) of a process group (each worker leads its own), and of a process.
  virtual void signal_group(pid_t pgid, int sig) = 0;
  virtual void signal(pid_t pid, int sig) = 0;
  // tgkill(2) of a process's main thread (its tid is its pid): the signal is
  // that thread's to handle, not whichever thread the kernel picks (for a
  // stopped process, the first to wake up when it is continued).
  virtual void signal_main_thread(pid_t pid, int sig) = 0;
  // Every process descended from this one (orphans that reparented here,
  // children that left their group), the guard included.
  virtual std::vector<pid_t> descendants() = 0;
  // getpgid(2): the process group of `pid`, or -1 when it is gone.
  virtual pid_t process_group(pid_t pid) = 0;
  // Reaps every child that has exited: (pid, wait status) pairs.
  virtual std::vector<std::pair<pid_t, int>> reap() = 0;
  // The state letter of the process ('R' runnable, 'S' sleeping, ...), or
  // '\0' when there is none (dlaunch/process.h process_state).
  virtual char process_state(pid_t pid) = 0;
  // A fresh directory private to this user (dlaunch/private_dir.h) in the
  // runtime base; throws PrivateDirError.
  virtual std::string make_private_dir(const std::string& prefix) = 0;
  // Removes a directory of ours and what is in it; errors ignored.
  virtual void remove_dir(const std::string& dir) = 0;

  // A cgroup (v2) of this node's share of the job, `name` under the agent's
  // own: its path, or why there is none (no cgroup v2, no right to make one
  // there, no cgroup.kill, processes cannot be moved into it). Workers
  // spawned with SpawnOptions::cgroup (PosixOs) join it, and so does all they
  // start, whatever process group, session or environment it takes.
  virtual Result<std::string> make_cgroup(const std::string& name) = 0;
  // The processes in it.
  virtual std::vector<pid_t> cgroup_members(const std::string& cgroup) = 0;
  // cgroup.kill: SIGKILL to every process in it, at once.
  virtual void kill_cgroup(const std::string& cgroup) = 0;
  // rmdir; false while processes are still in it.
  virtual bool remove_cgroup(const std::string& cgroup) = 0;
  // spawn() into a cgroup from make_cgroup (empty: none).
  virtual Result<pid_t> spawn_in(const SpawnOptions& opts, const std::string& cgroup) = 0;

  // This machine's interface addresses (dlaunch/proto/interfaces.h).
  virtual std::vector<proto::Interface> interfaces() = 0;
  // The interface its traffic to `address` takes (net.h interface_toward);
  // empty when unknown.
  virtual std::string route_interface(const std::string& address) = 0;

  // What tells a starved head from a gone one (proto::StarvationWatch):
  // this machine's boot (dlaunch/proc_stat.h), the process that started the
  // agent (the sshd session, Slurm step or head that relays for it), and how
  // long a process has waited for a CPU.
  virtual std::string boot_id() = 0;
  virtual ProcessRef parent() = 0;
  virtual std::optional<std::int64_t> run_delay_ns(const ProcessRef& p) = 0;

  // What `dlaunch --check` shows of this node (Setup.check): its health
  // facts (health/node_health.h; DLAUNCH_HEALTH_ROOT stands for / as in
  // `dlaunch-agent --health`), its topology in one line (or why it could not
  // be read), and with count_gpus the GPUs `nvidia-smi -L` lists (-1: not
  // counted). With gpu_test_mb, on a node whose NVML sees GPUs, the facts
  // of the GPU test too (health/gpu_test.h), run in a child with a deadline.
  struct NodeFacts {
    std::vector<std::pair<std::string, std::string>> facts;
    std::string topology;
    int gpus = -1;
  };
  virtual NodeFacts node_facts(const std::string& workdir, bool count_gpus,
                               std::uint32_t gpu_test_mb) = 0;
};

// The real one.
class PosixOs final : public AgentOs {
 public:
  void become_subreaper() override;
  std::unique_ptr<GuardLink> start_guard(const std::string& token_entry) override;
  SpawnResult spawn(const SpawnOptions& opts) override;
  void signal_group(pid_t pgid, int sig) override;
  void signal(pid_t pid, int sig) override;
  void signal_main_thread(pid_t pid, int sig) override;
  std::vector<pid_t> descendants() override;
  pid_t process_group(pid_t pid) override;
  std::vector<std::pair<pid_t, int>> reap() override;
  char process_state(pid_t pid) override;
  std::string make_private_dir(const std::string& prefix) override;
  void remove_dir(const std::string& dir) override;
  Result<std::string> make_cgroup(const std::string& name) override;
  std::vector<pid_t> cgroup_members(const std::string& cgroup) override;
  void kill_cgroup(const std::string& cgroup) override;
  bool remove_cgroup(const std::string& cgroup) override;
  Result<pid_t> spawn_in(const SpawnOptions& opts, const std::string& cgroup) override;
  std::vector<proto::Interface> interfaces() override;
  std::string route_interface(const std::string& address) override;
  std::string boot_id() override;
  ProcessRef parent() override;
  std::optional<std::int64_t> run_delay_ns(const ProcessRef& p) override;
  NodeFacts node_facts(const std::string& workdir, bool count_gpus,
                       std::uint32_t gpu_test_mb) override;
};

// Where this process's cgroup (v2) is in the file system: the cgroup2 mount
// (from /proc/self/mountinfo) joined with its path (the "0::" line of
// /proc/self/cgroup); empty when there is no cgroup2 hierarchy.
std::string own_cgroup_dir();

// The end of the names of this agent's job cgroups, "-aPID.TICKS" (its pid
// and /proc start time): whose they are, for sweep_orphan_cgroups.
std::string cgroup_owner_suffix();

// Removes the job cgroups under `parent` (directories named "dlaunch-...",
// ending in an owner suffix) whose agent is no longer running and that hold
// nothing (rmdir fails on a cgroup with a process or a child in it; a live
// agent's is never touched). An agent and its guard both killed (SIGKILL,
// the OOM killer) leave their job's empty cgroup behind; the next agent to
// make one there removes it. Returns how many went.
int sweep_orphan_cgroups(const std::string& parent);

}  // namespace dlaunch::agent
