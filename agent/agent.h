// Agent: runs one node's share of a job on behalf of the head.
//
// It speaks the control protocol on its stdin/stdout (see protocol.h), spawns
// the node's workers, forwards their output line by line, reports exits, and
// kills everything it started when told to, when the head goes silent past the
// heartbeat timeout, or when the channel closes. It is a child subreaper, so
// workers' orphaned children reparent to it and are swept at the end; a Guard
// process covers the case where the agent itself is SIGKILLed.
//
// Single-threaded: everything runs on one io_context.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "comm/store.h"
#include "dlaunch/proto/channel.h"
#include "dlaunch/unique_fd.h"
#include "guard.h"
#include "pmix/pmix_host.h"
#include "worker.h"

namespace dlaunch::agent {

class Agent {
 public:
  // control_in/control_out: the channel fds (owned from here on).
  Agent(int control_in, int control_out);
  ~Agent();
  // Runs until the job on this node is over. Returns the process exit code.
  int run();

 private:
  enum class Phase { kHello, kSetup, kRunning, kStopping, kDone };

  void on_message(proto::Message&& msg);
  void on_channel_closed(const std::string& reason);
  void handle(proto::Setup&& m);
  void handle(proto::Start&& m);
  void handle(const proto::Abort& m);
  void handle_shutdown();
  bool start_pmix();
  void make_error_dir();

  void spawn_worker(Worker& w, const proto::Env& start_env);
  void read_stream(Worker& w, OutputStream& s);
  void forward(Worker& w, OutputStream& s, std::string_view data);
  void arm_flush(Worker& w, OutputStream& s);
  void flush_partial(Worker& w, OutputStream& s);
  void drain_now(Worker& w, OutputStream& s);
  void resume_parked();
  void on_sigchld();
  void on_worker_exit(Worker& w, int status);

  void begin_abort(const std::string& reason, bool immediate);
  void signal_everything(int sig);
  void maybe_finish();
  void finish();
  void arm_heartbeat();
  std::size_t live_workers() const;

  boost::asio::io_context io_;
  std::unique_ptr<proto::PipeChannel> channel_;
  boost::asio::signal_set sigchld_;
  boost::asio::signal_set terminate_;
  boost::asio::steady_timer grace_timer_;
  boost::asio::steady_timer heartbeat_timer_;
  boost::asio::steady_timer orphan_deadline_;  // armed when the head is gone
  std::chrono::steady_clock::time_point last_heard_;
  std::chrono::steady_clock::time_point heartbeat_sent_{};  // last Heartbeat to the head

  std::string token_entry_;
  std::unique_ptr<Guard> guard_;
  std::unique_ptr<PmixHost> pmix_;            // MPI mode only
  std::unique_ptr<comm::StoreServer> store_;  // node 0: the job's rendezvous store
  proto::Setup setup_;
  std::map<int, Worker> workers_;  // by rank
  std::map<pid_t, int> rank_of_pid_;
  UniqueFd reserved_port_;
  std::string error_dir_;  // workers' TORCHELASTIC_ERROR_FILEs; removed at the end
  Phase phase_ = Phase::kHello;
  bool aborting_ = false;
  bool shutdown_requested_ = false;
  bool channel_lost_ = false;
  bool killed_hard_ = false;
  std::uint32_t leftovers_killed_ = 0;
  int exit_code_ = 0;
};

}  // namespace dlaunch::agent
