// Controller: runs one job from the head. A state machine per node
// (starting -> hello -> ready -> running -> done | lost) and per rank
// (planned -> running -> exited), on one Asio event loop with the agents'
// control links, signals and timers.
//
// Fail fast, report once: the first rank that fails (or node that is lost, or
// a signal to dlaunch) is the root cause; every node is told to Abort; when all
// ranks are accounted for, every agent gets Shutdown, and run() returns once
// every agent is gone. Nothing is left running on any node when run() returns.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "controller/progress.h"
#include "controller/report.h"
#include "output/output_sink.h"
#include "plan/plan.h"
#include "transport/ssh/ssh_transport.h"
#include "transport/transport.h"

namespace dlaunch {

struct ControllerConfig {
  std::string agent_path;
  std::string workdir;
  std::uint16_t master_port = 0;  // 0: node 0 reserves one
  std::chrono::milliseconds kill_grace{5000};
  std::chrono::milliseconds heartbeat_timeout{30000};  // 0: off
  std::chrono::milliseconds start_timeout{30000};
  std::chrono::milliseconds flush{100};
  std::chrono::milliseconds timeout{0};  // whole job, from the workers' start; 0: none
  bool master_addr_explicit = false;     // --master-addr given: never replace it
  ssh::TransportOptions ssh;
  bool progress = false;         // one-line status on stderr while starting
  bool mpi = false;              // agents serve PMIx; fences cross nodes through us
  std::string store_secret;      // the job's comm store secret (node 0 hosts it)
  std::uint16_t store_port = 0;  // 0: any free port
};

class Controller {
 public:
  Controller(const JobPlan& plan, ControllerConfig cfg, OutputSink& sink);
  ~Controller();
  // Runs the job; returns dlaunch's exit status. Prints the report on failure.
  int run();
  const RootCause& cause() const { return cause_; }

 private:
  enum class Phase { kStarting, kRunning, kAborting, kShuttingDown, kFinished };
  struct RankState {
    int node = 0;
    int local_rank = 0;
    bool started = false;
    bool exited = false;
    int pid = 0;
    std::chrono::steady_clock::time_point started_at;
    proto::Exited exit;
  };
  struct Node {
    const NodePlan* plan = nullptr;
    std::unique_ptr<AgentLink> link;
    bool hello = false;
    bool ready = false;
    bool done = false;
    bool closed = false;
    std::chrono::steady_clock::time_point last_heard;
  };

  void start_agents();
  void on_message(std::size_t node, proto::Message&& msg);
  void on_link_closed(std::size_t node, const std::string& reason);
  void on_exited(std::size_t node, const proto::Exited& ex);
  void on_fence(std::size_t node, proto::FenceUp&& up);
  void fail(RootCause cause);
  void abort_all(const std::string& reason, bool immediate);
  void maybe_shutdown();
  void maybe_finish();
  void on_signal(int sig);
  void arm_heartbeat();
  void arm_job_timeout();
  void arm_deadline(std::chrono::milliseconds after, const std::string& what);
  std::string node_label(std::size_t node) const;
  std::string master_addr() const;
  void show_progress();
  proto::Setup make_setup(std::size_t node) const;

  const JobPlan& plan_;
  ControllerConfig cfg_;
  OutputSink& sink_;
  boost::asio::io_context io_;
  boost::asio::signal_set signals_;
  boost::asio::signal_set sigchld_;
  boost::asio::steady_timer deadline_;
  boost::asio::steady_timer heartbeat_;
  std::chrono::steady_clock::time_point heartbeat_sent_{};  // last Heartbeat to the agents
  boost::asio::steady_timer job_timer_;                     // --timeout
  std::unique_ptr<ssh::Transport> ssh_;                     // before nodes_: links go first
  std::vector<Node> nodes_;
  std::vector<RankState> ranks_;
  Phase phase_ = Phase::kStarting;
  bool start_sent_ = false;
  int interrupts_ = 0;
  int ranks_stopped_ = 0;
  std::uint16_t master_port_ = 0;
  std::uint16_t store_port_ = 0;
  RootCause cause_;
  Progress progress_;
  int hellos_ = 0;
  int readies_ = 0;
  int running_ = 0;
  // Start-up milestones for DLAUNCH_DEBUG=stats (zero: not reached).
  struct Milestones {
    std::chrono::steady_clock::time_point begin, connected, ready, running;
  } milestones_;
  void print_stats() const;
  void reap_children();
  std::unordered_map<pid_t, std::size_t> agent_pids_;  // local agents not yet reaped -> node
  std::size_t gone_scan_ = 0;                          // see maybe_finish()
  // MPI fences in flight: seq -> each node's blob (empty optional: not yet).
  std::map<std::uint32_t, std::vector<std::optional<std::string>>> fences_;
};

}  // namespace dlaunch
