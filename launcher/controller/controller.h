// Controller: runs one job from the head. A state per node (the job core's
// NodeLifecycle, core/node_state.h: starting -> hello -> ready -> done ->
// ended | lost, and which message each state accepts) and per rank (the
// core's RankTable, core/rank_table.h: waiting -> running -> exited | gone),
// driven by the agents' control links,
// signals and timers on one event loop.
//
// Fail fast, report once: the first rank that fails (or node that is lost, or
// a signal to dlaunch) is the root cause; every node is told to Abort; when all
// ranks are accounted for, every agent gets Shutdown, and the job is over once
// every agent is gone. Nothing is left running on any node when run() returns.
//
// Deadlines: starting (--start-timeout), stopping (kill grace plus
// timing::kReportMargin), exiting (the same): when one passes, whatever has
// not answered is killed outright.
//
// Seams (ControllerEnv): the controller gets its links from a LinkFactory and
// its time from a Clock, so that its unit tests drive it with links that are
// no processes and a clock they move by hand (start(), interrupt(), then
// finished()/exit_status()); run() is the real thing with signals.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "controller/bandwidth_test.h"
#include "controller/console_observer.h"
#include "controller/feature.h"
#include "controller/hang_watch.h"
#include "controller/mpi_fences.h"
#include "controller/reach_test.h"
#include "controller/signal_relay.h"
#include "controller/stdin_relay.h"
#include "core/job_phase.h"
#include "core/node_state.h"
#include "core/rank_table.h"
#include "dlaunch/clock.h"
#include "dlaunch/proto/container.h"
#include "dlaunch/proto/heartbeat.h"
#include "dlaunch/tunables.h"
#include "jobs/events.h"
#include "jobs/job_observer.h"
#include "jobs/report.h"
#include "net/master_address.h"
#include "net/stream.h"
#include "output/output_sink.h"
#include "plan/plan.h"
#include "transport/link_factory.h"
#include "transport/transport.h"

namespace dlaunch {

struct ControllerConfig {
  std::string agent_path;
  std::string workdir;
  std::uint16_t master_port = 0;  // 0: node 0 reserves one
  // Node 0's agent reserves master_port (or a free one). Off for a per-node
  // launcher that is not node 0 (launcher/pernode/): node 0's launcher, on
  // another machine, reserved master_port; this node's agent must not bind it.
  bool reserve_master_port = true;
  std::chrono::milliseconds kill_grace = default_ms(tunables::kKillGrace);
  std::chrono::milliseconds heartbeat_timeout = default_ms(tunables::kHeartbeatTimeout);  // 0: off
  std::chrono::milliseconds start_timeout = default_ms(tunables::kStartTimeout);
  std::chrono::milliseconds flush = timing::kFlushPartialLine;
  std::chrono::milliseconds timeout = default_ms(tunables::kTimeout);  // from the workers' start
  // --head-grace (docs/events.md, "A job that survives its head"): once its
  // ranks run, an agent whose head is gone keeps them this long for a new
  // head (recover). 0: they stop with their head.
  std::chrono::milliseconds head_grace{0};
  // This controller is a new head that takes over a running job whose head
  // was lost (dlaunch attach --recover): each agent it starts gets Reattach
  // instead of Setup and hands its channel to the job's agent of its node,
  // which says Resumed and what its ranks did; no Start is sent. The job's
  // secret is store_secret.
  bool recover = false;
  // --signal SIG@SECONDS (controller/signal_relay.h): SIG goes to every rank
  // this long before --timeout, and on SIGTERM a kill grace before the stop.
  // 0: none.
  int warn_signal = 0;
  std::chrono::milliseconds warn_before{0};
  bool nohup = false;  // --nohup: SIGHUP is not handled (dlaunch ignores it)
  // Hangs (controller/hang_watch.h): how long the agents have to send stacks (0:
  // none are collected); --stall-timeout (0: off) and what a stall does.
  std::chrono::milliseconds stack_timeout = default_ms(tunables::kStackTimeout);
  std::chrono::milliseconds stall_timeout = default_ms(tunables::kStallTimeout);
  bool stall_abort = false;           // --stall-action abort (else report)
  std::string output_dir;             // --output-dir: stacks go to DIR/<job-id>/stacks.txt
  bool master_addr_explicit = false;  // --master-addr given: never replace it
  // Per-node mode: the other launchers' nodes may be on other machines
  // (MASTER_ADDR is not a loopback address), though this plan's one node is
  // local: the agent then gives the ranks the interface toward MASTER_ADDR.
  bool spans_machines = false;
  bool progress = false;  // one-line status on stderr while starting
  bool mpi = false;       // agents serve PMIx; fences cross nodes through us
  // Per-node mode under --mpi: this controller's plan is one node of a job
  // whose other nodes other launchers run. The agents' PMIx servers are told
  // the whole job (each node's name and rank count, node order), and fences
  // are completed through ControllerEnv::fences. Empty: the plan is the job.
  std::vector<std::string> mpi_node_names;
  std::vector<std::int32_t> mpi_ranks_per_node;
  std::string store_secret;      // the job's comm store secret (node 0 hosts it)
  std::uint16_t store_port = 0;  // 0: any free port
  // Placement (docs/placement.md): --bind-to, --map-by as given (empty: the
  // agents' defaults), --oversubscribe; --report-bindings prints one line per
  // rank as the agents report them (Started).
  std::string bind_to;
  std::string map_by;
  bool oversubscribe = false;
  bool report_bindings = false;
  // --container-* (docs/containers.md): every node's ranks in one container
  // of this image; no image: on the host.
  proto::ContainerSpec container;
  // A note for the report when the failing rank's Python could not run or
  // import something: which interpreter dlaunch put before the .py and how
  // to choose another (empty: the command was the user's own).
  std::string python_hint;
  // --signals-to-handle's signals that dlaunch has no meaning of its own for
  // (SIGALRM, SIGPWR, ...): forwarded to every running rank, as SIGUSR1 is.
  std::vector<int> forward_signals;
  // --check (check/preflight.h): the job stopped at Ready. No rank starts.
  // Each agent gets the workers described as for the job (Setup.check): it
  // looks for their programs, on the host or in the node's container (which
  // it starts, pulling the image as the job would), and the scripts their
  // interpreters are given, and says every problem and the node's facts in
  // Ready (checks()). When every node is Ready without a problem, the other
  // nodes test which of node 0's addresses they reach (network()); then
  // every agent is shut down.
  bool probe_only = false;
  // With probe_only, once the reach test chose an address: the network test
  // between nodes (issue 33), each round this long. A ring (each node streams
  // to the next at once), then, from three nodes, the ring the other way;
  // network().streams has the figures. 0: no test.
  std::chrono::milliseconds bandwidth_round{0};
  // With probe_only: each node's GPU test (Setup.gpu_test_mb), MiB per GPU;
  // 0: none.
  std::uint32_t gpu_test_mb = 0;
  // --stdin: the rank that reads dlaunch's stdin, kStdinAll or kStdinNone;
  // stdin_fd is where it is read from (dlaunch's 0).
  int stdin_rank = kStdinNone;
  int stdin_fd = 0;
  // This machine's interfaces, to tell which agents run on it (they list the
  // same); unset: the system's (dlaunch/proto/interfaces.h). For tests.
  std::optional<std::vector<proto::Interface>> head_interfaces;
};

// What a controller runs on.
struct ControllerEnv {
  boost::asio::io_context& io;  // run() runs it; signals wait on it
  LinkFactory& links;
  Clock& clock;
  FenceRelay* fences = nullptr;  // per-node mode under --mpi; else the plan's nodes are all
  // Called once when the job has ended on this node, before the report: the
  // job's root cause when it is not the one this controller recorded first
  // (per-node mode: another launcher's failure got to the rendezvous first,
  // and every launcher reports that one).
  std::function<std::optional<RootCause>()> agreed_cause;
  // Who else watches the job (jobs/job_observer.h), after the console (which
  // the controller tells first, through its sink): the job's record
  // (EventLog), per-node mode's bridge to the other launchers, --check's
  // notices. Null entries are skipped.
  std::vector<JobObserver*> observers;
};

// The job's core on the head; its features (controller/feature.h) reach it
// through JobAccess.
class Controller final : private JobAccess {
 public:
  Controller(const JobPlan& plan, ControllerConfig cfg, OutputSink& sink, ControllerEnv env);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Runs the job with SIGINT/SIGTERM/SIGHUP handled, SIGUSR1/SIGUSR2/SIGCONT/
  // SIGTSTP forwarded to the ranks and SIGCHLD reaping the local agents;
  // returns dlaunch's exit status. Prints the report on failure.
  int run();

  // The pieces of run(), for tests. start(): starts every agent and arms the
  // start deadline and the heartbeats. interrupt(): what SIGINT/SIGTERM does.
  void start();
  void interrupt(int sig);
  // What a signal to dlaunch does (docs/troubleshooting.md, "Signals"):
  // forwarded, the --signal warning then a stop, or interrupt().
  void on_signal(int sig);
  // What SIGQUIT does: collect every rank's stack and print the grouped
  // report, without stopping anything (controller/hang_watch.h).
  void report_stacks_now() { hang_.report_now(); }
  // Per-node mode (launcher/pernode/): another launcher of the job failed or
  // is lost. Stops this node's ranks as any failure does; the first cause
  // still wins.
  void peer_failed(RootCause cause) { fail(std::move(cause)); }
  bool finished() const { return phase_ == Phase::kFinished; }
  int exit_status() const { return dlaunch::exit_status(cause_); }
  const RootCause& cause() const override { return cause_; }
  int ranks_stopped() const { return ranks_stopped_; }
  // Nodes that said Ready (Resumed, for a new head taking a job over).
  int nodes_ready() const { return readies_; }

  // The job's network: MASTER_ADDR and the comm store's address. Chosen at
  // start from node 0's addresses (net/master_address.h) when not given and
  // the job spans machines; the other nodes test their reach first.
  struct Network {
    std::string given;                       // --master-addr or node 0's address:, if given
    std::uint16_t port = 0;                  // where node 0 was tested (its reserved port)
    std::vector<net::Candidate> candidates;  // node 0's addresses, in the order tried
    std::vector<net::NodeReach> reach;       // what each other node found (when tested)
    std::string chosen;                      // empty: none (yet), or not chosen here
    std::vector<std::string> problems;       // why none could be chosen
    std::string untested;                    // why the addresses were not tested, if not
    // --check's network test (ControllerConfig::bandwidth_round): every
    // stream of every round, and why the test did not run or finish, if so.
    std::vector<net::Stream> streams;
    std::string bandwidth_untested;
  };
  Network network() const;
  // Per node, in plan order, under probe_only: its Hello and Ready (empty
  // where it sent none), the head's wall clock when its Setup was sent and
  // its Ready read (ns since the epoch; 0: not yet), between which the node
  // read its clock, and why it did not get that far.
  struct NodeCheck {
    std::optional<proto::Hello> hello;  // what its agent said first, if it did
    std::optional<proto::Ready> ready;
    long long setup_sent_ns = 0;
    long long ready_read_ns = 0;
    // Why its agent could not be started, or was lost, before its Ready (the
    // link's words), and how its link started it (transport.h).
    std::string failed;
    LinkStart start;
    std::string refused;  // what its agent refused at Setup (its Fatal), if it did
  };
  std::vector<NodeCheck> checks() const;

 private:
  using Phase = JobPhase;  // core/job_phase.h: its moves are a table there
  // The only way phase_ changes: a move the table does not allow is a bug.
  // Each feature hears of the move.
  void enter(Phase next);
  // JobAccess, for the features.
  JobPhase phase() const override { return phase_; }
  const JobPlan& plan() const override { return plan_; }
  bool node_reachable(std::size_t node) const override;
  bool rank_exited(int rank) const override { return ranks_.settled(rank); }
  bool rank_running(int rank) const override { return ranks_.running(rank); }
  void stop(const std::string& reason) override { abort_all(reason, false); }
  bool interrupted() const override { return interrupts_ > 0; }
  void begin_interrupt(int sig) override;
  void attach_stacks(std::string section) override { cause_.stacks = std::move(section); }
  void write_console(const std::string& text) override;
  void send(std::size_t node, const proto::Message& msg) override { nodes_[node].link->send(msg); }
  struct Node {
    const NodePlan* plan = nullptr;
    std::unique_ptr<AgentLink> link;
    NodeLifecycle life;     // starting, hello, ready, done, ended | lost (core/node_state.h)
    bool failed = false;    // said Fatal, or Hello of another version: settled, starts nothing
    NodeCheck check;        // how it started, its Fatal; probe_only: all of NodeCheck
    std::string no_cgroup;  // why its agent has no cgroup for the job (Ready)
    // Its agent's machine's interfaces (Ready): node 0's are kept (MASTER_ADDR
    // is chosen among them); of the others, only whether they are the head's.
    std::vector<proto::Interface> interfaces;
    bool head_interfaces = false;
    // Its container image's pull (ImagePull): not counted against the
    // start's deadline.
    bool pulling = false;
    SteadyTime pull_began{};
    std::chrono::milliseconds pulled{0};  // pulls that ended
    // Its local agent's CPU time when the head last looked (agent_working).
    unsigned long long work_seen = 0;
  };

  void start_agents();
  void on_message(std::size_t node, proto::Message&& msg);
  void report_binding(std::size_t node, const proto::Started& s);
  void on_hello(std::size_t node, const proto::Hello& hello);
  void on_ready(std::size_t node, const proto::Ready& ready);
  void on_resumed(std::size_t node, const proto::Resumed& resumed);
  bool every_node_ready();
  void on_image_pull(std::size_t node, const proto::ImagePull& pull);
  // The start's deadline passed: re-armed while a node that is not ready is
  // still within it once its pulls are not counted; true then.
  bool start_deadline_moved();
  // Whether any node's ranks run in a container (--container-image, or the
  // hostfile's container:).
  bool has_containers() const;
  SteadyTime node_start_deadline(std::size_t node) const;
  void on_link_closed(std::size_t node, const std::string& reason);
  void on_exited(std::size_t node, const proto::Exited& ex);
  void on_started(std::size_t node, const proto::Started& started);
  void on_worker_abort(std::size_t node, const proto::WorkerAbort& ab);
  bool on_this_machine_only() const;
  const std::vector<proto::Interface>& own_interfaces();
  bool begin_network_choice();
  void on_reach_tested();
  void end_probe_only();
  void send_start();
  void fail(RootCause cause) override;
  void record_cause(RootCause cause) override;
  bool start_settled() const;
  void abort_all(const std::string& reason, bool immediate);
  void maybe_shutdown();
  void maybe_finish();
  void send_all(const proto::Message& msg) override;
  void on_silent(std::size_t node);
  void arm_job_timeout();
  // `patient`: the deadline waits longer for local agents that are still
  // working (timing::kSaturatedLook): the start's and the agents' exit, not
  // the ranks' stop (the agent's descendants are its ranks then) nor a kill
  // at once's.
  void arm_deadline(std::chrono::milliseconds after, const std::string& what, bool patient = true);
  void on_deadline(std::chrono::milliseconds after, const std::string& what);
  // The deadline passed, yet every node it waits for has a local agent
  // still working: looked at again shortly (true), within kSaturatedWaits
  // times the deadline's length.
  bool wait_for_working_agents(std::chrono::milliseconds after, const std::string& what);
  bool deadline_waits_for(std::size_t node) const;
  bool agent_working(Node& n);
  // One line of dlaunch's own on stderr, through the console (never blocks).
  void say(const std::string& msg) override;
  std::string node_label(std::size_t node) const override;
  void event(std::string_view type, const std::vector<EventField>& fields);
  std::string master_addr() const;
  void show_progress();
  proto::Setup make_setup(std::size_t node) const;
  void print_stats() const;

  void reap_children();
  void pause_output(bool pause);
  void drain_console(boost::asio::signal_set& signals);
  const JobPlan& plan_;
  ControllerConfig cfg_;
  OutputSink& sink_;
  ControllerEnv env_;
  std::unique_ptr<Timer> deadline_;
  std::unique_ptr<Timer> job_timer_;  // --timeout
  std::vector<Node> nodes_;
  RankTable ranks_;
  proto::HeartbeatMonitor heartbeats_;
  Phase phase_ = Phase::kStarting;
  bool start_sent_ = false;
  bool output_paused_ = false;  // the console is behind: agents were sent PauseOutput
  bool start_deadline_passed_ = false;
  SteadyTime start_deadline_armed_{};
  SteadyTime deadline_armed_{};   // arm_deadline()'s last
  bool deadline_patient_ = true;  // arm_deadline()'s last
  bool saturation_said_ = false;  // wait_for_working_agents() said why it waits
  int interrupts_ = 0;
  int ranks_stopped_ = 0;
  std::uint16_t master_port_ = 0;
  std::uint16_t store_port_ = 0;
  std::string store_path_;        // node 0's store's Unix socket
  std::string given_addr_;        // --master-addr or node 0's address:, if given
  std::string reach_untested_;    // why node 0's addresses were not tested, if not
  bool on_this_machine_ = false;  // every agent runs on the head's machine
  std::optional<std::vector<proto::Interface>> own_interfaces_;  // the head's, once asked
  RootCause cause_;
  ConsoleObserver console_;  // the first of observers_
  ObserverList observers_;   // everything the job says goes to them
  int hellos_ = 0;
  int readies_ = 0;
  int pulling_ = 0;  // nodes pulling their image now
  // Start-up milestones for DLAUNCH_DEBUG=stats (zero: not reached).
  struct Milestones {
    SteadyTime begin, connected, ready, running;
  } milestones_;
  std::unordered_map<pid_t, std::size_t> agent_pids_;  // local agents not yet reaped -> node
  std::size_t gone_scan_ = 0;                          // see maybe_finish()
  // The features (controller/feature.h), told of the job's moments in this
  // order.
  StdinRelay stdin_relay_;
  MpiFences mpi_fences_;
  HangWatch hang_;
  SignalRelay signals_;
  ReachTest reach_;          // which of node 0's addresses every node reaches
  BandwidthTest bandwidth_;  // --check's network test (bandwidth_round)
  std::vector<JobFeature*> features_;
};

}  // namespace dlaunch
