// Agent: runs one node's share of a job on behalf of the head.
//
// It speaks the control protocol on its stdin/stdout (dlaunch/proto), spawns
// the node's workers, forwards their output line by line, reports exits, and
// kills everything it started when told to, when the head goes silent past the
// heartbeat timeout, or when the channel closes. It is a child subreaper, so
// workers' orphaned children reparent to it and are swept at the end; a guard
// process covers the case where the agent itself is SIGKILLed.
//
// Phases (lifecycle.h, where they and what each accepts are tables): hello ->
// setup -> ready -> running -> done, or stopping before anything started. A
// stop: SIGTERM to every worker's process group and every descendant, SIGKILL
// after the kill grace; once no worker runs and the head asked for Shutdown
// (or is gone), leftovers are swept (SIGTERM, then SIGKILL at the grace), on a
// timer, while the loop keeps serving, and Done goes to the head.
//
// Where the workers run is the NodeRuntime's (node_runtime.h): on the host,
// or in one container of the node that it makes at Setup (before Ready: a
// missing runtime or image fails the job before any rank starts) and removes
// once the last worker is gone. Where each rank's CPUs are is the
// NodePlacement's (node_placement.h); the rest of the node's jobs are node
// services (service.h: PMIx, the network tests, the store, progress, stdin,
// stacks).
//
// Seams (AgentEnv): the operating system (os.h) and the clock are injected,
// so that the agent's unit tests drive it over a socketpair with a fake OS and
// a clock they move by hand. run() is the real thing with signals.
//
// A job that survives its head (reattach.h): with Setup.head_grace_ms, a
// running agent whose channel closes (or whose head falls silent) keeps its
// workers for the grace, holding back what it would have sent, and opens
// its door; a new head's agent that proves the job's secret there hands its
// channel over, and the agent goes on through it (Resumed first). With no
// new head by the end of the grace it stops the workers as it would have at
// once. An agent that a new head started for that (Reattach instead of
// Setup) is the relay: it hands its channel over and waits until the job's
// agent ends.
//
// Single-threaded: everything runs on one event loop.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "dlaunch/clock.h"
#include "dlaunch/proto/channel.h"
#include "dlaunch/proto/heartbeat.h"
#include "dlaunch/unique_fd.h"
#include "lifecycle.h"
#include "net.h"
#include "network_service.h"
#include "node_placement.h"
#include "node_runtime.h"
#include "os.h"
#include "output_pump.h"
#include "pmix_service.h"
#include "progress_service.h"
#include "reattach.h"
#include "service.h"
#include "stacks.h"
#include "stdin_service.h"
#include "store_service.h"
#include "worker.h"

namespace dlaunch::agent {

// What an agent runs on.
struct AgentEnv {
  boost::asio::io_context& io;
  AgentOs& os;
  Clock& clock;
};

class Agent final : private NodeAccess {
 public:
  // control_in/control_out: the channel fds (owned from here on).
  Agent(AgentEnv env, int control_in, int control_out);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs until the job on this node is over, with SIGCHLD, SIGTERM, SIGINT
  // and SIGHUP handled. Returns the process exit code.
  int run();

  // The pieces of run(), for tests. start(): become a subreaper, start the
  // guard, say Hello. on_sigchld(): what SIGCHLD does (reap, report exits).
  // terminate(): what SIGTERM/SIGINT/SIGHUP do.
  void start();
  void on_sigchld();
  void terminate(int sig);
  bool done() const { return phase_ == Phase::kDone; }
  int exit_code() const { return exit_code_; }

 private:
  using Phase = AgentPhase;  // lifecycle.h: its moves and what each phase accepts are tables
  // The only way phase_ changes: a move the table does not allow is a bug.
  void enter(Phase next) { phase_ = checked_agent_move(phase_, next); }

  // NodeAccess, for the node services (service.h).
  void send_to_head(proto::Message msg) override;
  const std::string& node_dir() const override { return error_dir_; }
  bool workers_running() const override;
  std::vector<RunningWorker> running_workers() const override;
  bool worker_running(int rank) const override;
  bool workers_contained() const override;
  void remove_on_death(const std::string& path) override;
  void make_channel(int in, int out);
  // Every message to the head: sent, or held back while headless.
  void to_head(const proto::Message& msg);
  std::size_t queued_to_head() const;
  void on_message(proto::Message&& msg);
  void on_channel_closed(const std::string& reason);
  // The head is gone for good: the workers are stopped.
  void lose_head(const std::string& reason);
  // --head-grace: true when the workers go on for a new head.
  bool go_headless(const std::string& reason);
  void on_handed(HandedChannel handed);
  void relay(const proto::Reattach& r);
  void handle(proto::Setup&& m);
  void handle(proto::Start&& m);
  void handle(const proto::Abort& m);
  void handle(const proto::SignalRanks& m);
  void handle_shutdown();
  bool check_programs();
  bool check_image_pmix();
  bool refuse(std::string column, std::string why, bool can_go_on);
  void check_files();
  void become_ready();
  void make_error_dir();

  void spawn_worker(Worker& w, const proto::Env& start_env);
  void on_worker_exit(Worker& w, int status);

  void begin_abort(const std::string& reason, bool immediate);
  void signal_everything(int sig);
  std::vector<pid_t> leftovers();
  void maybe_finish();
  void finish();
  void sweep();
  void complete();
  bool cgroup_removed();
  void start_heartbeats();
  std::size_t live_workers() const;

  AgentEnv env_;
  std::unique_ptr<proto::PipeChannel> channel_;
  std::unique_ptr<Timer> grace_timer_;
  std::unique_ptr<Timer> orphan_deadline_;   // armed when the head is gone
  std::unique_ptr<Timer> sweep_timer_;       // leftovers signalled, waiting for them to go
  std::unique_ptr<Timer> head_grace_timer_;  // headless: the end of --head-grace
  std::unique_ptr<proto::HeartbeatMonitor> heartbeats_;  // from Setup on

  std::string token_entry_;
  std::unique_ptr<GuardLink> guard_;
  NodeRuntime runtime_;  // where the workers run: the host or the node's container
  OutputRelay output_;   // the workers' pipes, read and sent to the head
  proto::Ready ready_;   // made by Setup, sent once the node is set up
  proto::Setup setup_;
  SteadyTime setup_at_{};          // when Setup came (--check: how long ago the facts were read)
  std::map<int, Worker> workers_;  // by rank
  std::map<pid_t, int> rank_of_pid_;
  std::string net_interface_;  // toward Start.net_address; empty: none known
  std::string error_dir_;      // workers' TORCHELASTIC_ERROR_FILEs; removed at the end
  std::string cgroup_;         // the job's cgroup on this node; empty: none could be made
  NodePlacement placement_;    // where each rank runs, from Setup
  Phase phase_ = Phase::kHello;
  bool aborting_ = false;
  bool shutdown_requested_ = false;
  bool channel_lost_ = false;
  bool killed_hard_ = false;
  bool sweeping_ = false;
  bool ranks_stopped_ = false;  // SIGTSTP/SIGSTOP forwarded, no SIGCONT since
  // A job that survives its head (reattach.h). What a new head is told
  // first: every rank's Started and each Exited and fence part said before
  // the head went (what it did not hear, or heard and is gone with it), then
  // what was held since, in order.
  bool headless_ = false;
  SteadyTime headless_since_{};
  std::string head_lost_because_;
  std::unique_ptr<ReattachDoor> door_;
  std::deque<proto::Message> held_;
  std::size_t held_bytes_ = 0;  // the ranks' output in held_
  std::map<int, proto::Started> said_started_;
  std::map<int, proto::Exited> said_exited_;
  std::map<std::uint32_t, proto::FenceUp> fences_up_;  // no FenceDown yet
  std::vector<int> exited_at_loss_;
  std::vector<std::uint32_t> fences_at_loss_;
  ProcessRef carrier_;  // who carries the channel: the parent, or a new head's relay
  // The relay: its connection to the job's agent, read until that agent ends.
  std::unique_ptr<boost::asio::posix::stream_descriptor> relayed_;
  SteadyTime sweep_deadline_{};
  std::uint32_t leftovers_killed_ = 0;
  int exit_code_ = 0;
  // The node services (service.h), told of the node's moments in this order.
  PmixService pmix_;          // --mpi: the node's PMIx server
  NetworkService network_;    // MASTER_PORT, the reach probes, --check's network test
  StoreService store_;        // node 0: the job's rendezvous store
  ProgressService progress_;  // --stall-timeout: the ranks' comm progress
  StdinService stdin_;        // --stdin: the head's stdin into the workers that read it
  StacksService stacks_;      // CollectStacks: a stack of every running rank
  std::vector<NodeService*> services_;
};

}  // namespace dlaunch::agent
