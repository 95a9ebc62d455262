#include "controller/controller.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "controller/setup.h"
#include "dlaunch/debug.h"
#include "dlaunch/proc_stat.h"
#include "dlaunch/process.h"
#include "dlaunch/proto/interfaces.h"
#include "dlaunch/version.h"

namespace dlaunch {

namespace asio = boost::asio;
using std::chrono::milliseconds;

namespace {
// Only after the console was drained (the stats of DLAUNCH_DEBUG=stats).
void log(const std::string& msg) {
  std::string line = "dlaunch: " + msg + "\n";
  write_all(2, line);
}
// How long the console may take nothing at the end of a job before dlaunch
// stops waiting for it (drain_console()).
constexpr milliseconds kConsoleDrainStall{60'000};
// The rank's Python was not there, or lacked a module the program imports.
bool python_trouble(const RootCause& c) {
  if (c.exit.kind == proto::ExitKind::kSpawnFailed) return true;
  return std::any_of(c.stderr_tail.begin(), c.stderr_tail.end(), [](const std::string& l) {
    return l.find("ModuleNotFoundError") != std::string::npos ||
           l.find("ImportError") != std::string::npos ||
           l.find("No module named") != std::string::npos;
  });
}
}  // namespace

Controller::Controller(const JobPlan& plan, ControllerConfig cfg, OutputSink& sink,
                       ControllerEnv env)
    : plan_(plan),
      cfg_(std::move(cfg)),
      sink_(sink),
      env_(env),
      deadline_(env.clock.make_timer()),
      job_timer_(env.clock.make_timer()),
      ranks_(plan.world_size),
      heartbeats_(env.clock, cfg_.heartbeat_timeout,
                  proto::heartbeat_interval(cfg_.heartbeat_timeout), plan.nodes.size(),
                  {.send = [this] { send_all(proto::Heartbeat{}); },
                   .read_pending =
                       [this](std::size_t i) {
                         if (nodes_[i].link && nodes_[i].link->is_open())
                           nodes_[i].link->read_pending();
                       },
                   .silent = [this](std::size_t i) { on_silent(i); }}),
      console_(sink.console(), cfg_.progress),
      // --check stops at Ready: no rank reads anything.
      stdin_relay_(*this, env.io, cfg_.probe_only ? kStdinNone : cfg_.stdin_rank, cfg_.stdin_fd),
      mpi_fences_(*this, env.fences),
      hang_(*this, env.clock, sink,
            {.stack_timeout = cfg_.stack_timeout,
             .stall_timeout = cfg_.stall_timeout,
             .stall_abort = cfg_.stall_abort}),
      signals_(*this, env.clock,
               {.warn_signal = cfg_.warn_signal,
                .warn_before = cfg_.warn_before,
                .timeout = cfg_.timeout,
                .kill_grace = cfg_.kill_grace,
                .forward_signals = cfg_.forward_signals}),
      reach_(*this, env.clock, [this] { on_reach_tested(); }),
      bandwidth_(*this, env.clock, cfg_.bandwidth_round, [this] { end_probe_only(); }),
      features_{&stdin_relay_, &mpi_fences_, &hang_, &signals_, &reach_, &bandwidth_} {
  for (const auto& np : plan_.nodes) {
    Node n;
    n.plan = &np;
    nodes_.push_back(std::move(n));
  }
  observers_.add(&console_);
  for (JobObserver* o : env_.observers) observers_.add(o);
  // Ranks no node of this plan runs belong to other launchers (per-node mode:
  // one node of the job, global ranks): they stay elsewhere, and nothing here
  // waits for them.
  for (std::size_t i = 0; i < plan_.nodes.size(); ++i) {
    for (const auto& r : plan_.nodes[i].ranks) ranks_.place(r.rank, i, r.local_rank);
  }
}

Controller::~Controller() { sink_.console().detach(); }

void Controller::enter(Phase next) {
  const Phase was = phase_;
  phase_ = checked_job_phase_move(phase_, next);
  if (phase_ == was) return;
  for (JobFeature* f : features_) f->on_phase(phase_);
}

bool Controller::node_reachable(std::size_t node) const {
  const Node& n = nodes_[node];
  return n.link && n.link->is_open() && !n.life.link_gone() && !n.life.done();
}

// A line of dlaunch's own on stderr, through the console like the ranks'
// output: in order with it, and never blocking the loop on a stalled reader.
void Controller::say(const std::string& msg) { observers_.on_text("dlaunch: " + msg + "\n"); }

void Controller::write_console(const std::string& text) { observers_.on_text(text); }

void Controller::event(std::string_view type, const std::vector<EventField>& fields) {
  observers_.on_event(type, fields);
}

std::string Controller::node_label(std::size_t i) const {
  const auto& h = nodes_[i].plan->host;
  if (h.name == h.host) return fmt::format("node {} ({})", i, h.name);
  return fmt::format("node {} ({}, {})", i, h.name, h.host);
}

int Controller::run() {
  // --nohup: SIGHUP is left ignored (main() ignores it), not handled here.
  asio::signal_set signals(env_.io, SIGINT, SIGTERM);
  if (!cfg_.nohup) signals.add(SIGHUP);
  for (int forwarded : {SIGUSR1, SIGUSR2, SIGCONT, SIGTSTP}) signals.add(forwarded);
  for (int forwarded : cfg_.forward_signals) signals.add(forwarded);
  asio::signal_set sigchld(env_.io, SIGCHLD);
  asio::signal_set sigquit(env_.io, SIGQUIT);  // every rank's stack (controller/hang_watch.h)
  std::function<void()> wait_signal = [&] {
    signals.async_wait([&](boost::system::error_code ec, int sig) {
      if (ec) return;
      on_signal(sig);
      wait_signal();
    });
  };
  std::function<void()> wait_chld = [&] {
    sigchld.async_wait([&](boost::system::error_code ec, int) {
      if (ec) return;
      reap_children();
      maybe_finish();
      wait_chld();
    });
  };
  std::function<void()> wait_quit = [&] {
    sigquit.async_wait([&](boost::system::error_code ec, int) {
      if (ec) return;
      report_stacks_now();
      wait_quit();
    });
  };
  wait_signal();
  wait_chld();
  wait_quit();
  start();
  if (!finished()) env_.io.run();
  stdin_relay_.stop();
  observers_.on_progress({});
  // Close every link and let pending handlers and coroutines see it, so that
  // nothing waits on a socket once the loop is gone.
  for (auto& n : nodes_) {
    if (n.link) n.link->close();
  }
  signals.cancel();
  sigchld.cancel();
  sigquit.cancel();
  hang_.end();  // what came of stacks being collected before the job ended
  env_.io.restart();
  env_.io.poll();

  // Where no cgroup held the job together, the clean-up found what stayed in
  // a process group, the process tree or the environment token; say so when
  // the job failed (a failed job is where strays are looked for).
  // One note per reason, with its nodes as ranges: a thousand nodes without
  // cgroup delegation are one line, not a thousand.
  if (cause_.kind != CauseKind::kNone) {
    std::map<std::string, std::vector<std::size_t>> no_cgroup;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].life.said_ready() && !nodes_[i].no_cgroup.empty()) {
        no_cgroup[nodes_[i].no_cgroup].push_back(i);
      }
    }
    for (const auto& [why, which] : no_cgroup) {
      const std::string who = which.size() == 1
                                  ? node_label(which.front())
                                  : fmt::format("nodes {} ({} of {})", index_ranges(which),
                                                which.size(), nodes_.size());
      cause_.notes.push_back(who + " had no cgroup for the job (" + why +
                             "): a process that left its process group and cleared its "
                             "environment could have escaped the clean-up there");
    }
  }
  if (cause_.kind == CauseKind::kWorker && !cfg_.python_hint.empty() && python_trouble(cause_)) {
    cause_.notes.push_back(cfg_.python_hint);
  }
  if (cause_.kind != CauseKind::kNone) {
    for (auto& note : hang_.notes()) cause_.notes.push_back(std::move(note));
  }
  if (cause_.kind != CauseKind::kNone && env_.agreed_cause) {
    if (auto agreed = env_.agreed_cause()) {
      // This node's failure came after another's: a consequence of it. Every
      // launcher reports the one failure, and this node's rank goes in a note.
      std::string mine = format_report("", cause_, 0);
      if (const auto nl = mine.find('\n'); nl != std::string::npos) mine.resize(nl);
      if (const auto at = mine.find("failed: "); at != std::string::npos) mine.erase(0, at + 8);
      agreed->notes.push_back("on this node, after it: " + mine);
      cause_ = std::move(*agreed);
    }
  }
  std::string report = format_report(plan_.job_id, cause_, ranks_stopped_);
  // After the workers' last lines, through the console (never blocking).
  if (!report.empty()) observers_.on_report(report);
  drain_console(signals);
  if (debug_enabled("stats")) print_stats();
  return exit_status();
}

void Controller::start() {
  milestones_.begin = env_.clock.now();
  sink_.console().attach(env_.io, [this](bool high) { pause_output(high); });
  // `dlaunch ... | head`: the reader of stdout went away for good. A stage of
  // a pipeline ends then (as mpirun does after its SIGPIPEs), exit 141;
  // under --nohup the job goes on without its stdout. A paused reader is no
  // such thing: it only holds the output back (on_pressure).
  sink_.console().set_on_stdout_gone([this] {
    if (cfg_.nohup || phase_ == Phase::kFinished || cause_.kind != CauseKind::kNone) return;
    say("stdout's reader went away (a pipeline's end): stopping the job");
    fail({.kind = CauseKind::kInterrupted, .signal = SIGPIPE});
  });
  // Each node is watched from its agent's Ready (on_ready): before it runs,
  // an agent can send nothing, however slow the node's login (a shell's rc
  // file under SSH, a busy machine), and until Ready it says nothing while
  // it sets the node up (a container's start); the agent heartbeats from
  // Ready on, or from the start of its image's pull (on_image_pull), which
  // takes minutes. The start's deadline below bounds that time (a pull's
  // excepted), not the heartbeat timeout; a link that closes meanwhile is
  // seen at once.
  heartbeats_.start(/*watch_all=*/false);
  arm_job_timeout();  // from dlaunch's start: a start that hangs counts too
  signals_.start();
  start_agents();
  if (phase_ == Phase::kStarting) {
    start_deadline_armed_ = env_.clock.now();
    arm_deadline(cfg_.start_timeout, "every agent to become ready");
  }
}

void Controller::print_stats() const {
  const auto since = [&](SteadyTime t) {
    if (t == SteadyTime{}) return std::string("-");
    return fmt::format("{:.4f}", std::chrono::duration<double>(t - milestones_.begin).count());
  };
  log(fmt::format("stats: nodes={} ranks={} connected_s={} ready_s={} running_s={} end_s={} {}",
                  nodes_.size(), ranks_.size(), since(milestones_.connected),
                  since(milestones_.ready), since(milestones_.running), since(env_.clock.now()),
                  self_usage()));
}

// Reaps exactly the children that exited: with a thousand local agents,
// polling every link on each SIGCHLD made the shutdown quadratic.
void Controller::reap_children() {
  for (;;) {
    siginfo_t si{};
    if (::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0) return;
    auto it = agent_pids_.find(si.si_pid);
    if (it == agent_pids_.end()) {
      // A link may start another process later (the OpenSSH transport's
      // copy of the agent, and the agent after it): ask the links, rarely.
      for (std::size_t i = 0; i < nodes_.size(); ++i) {
        if (nodes_[i].link && nodes_[i].link->agent_pid() == si.si_pid) {
          it = agent_pids_.emplace(si.si_pid, i).first;
          break;
        }
      }
    }
    if (it == agent_pids_.end() || !nodes_[it->second].link) {
      int status;  // nobody's: a ProxyCommand (its owner copes with that)
      ::waitpid(si.si_pid, &status, WNOHANG);
      continue;
    }
    AgentLink& link = *nodes_[it->second].link;
    link.reap();
    if (!link.agent_gone()) return;  // not reapable after all: wait for the next SIGCHLD
    agent_pids_.erase(it);
  }
}

void Controller::start_agents() {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const auto& host = nodes_[i].plan->host;
    const std::string agent = !host.agent.empty() ? host.agent : cfg_.agent_path;
    LinkCallbacks cb{.on_message = [this, i](proto::Message&& m) { on_message(i, std::move(m)); },
                     .on_close = [this, i](const std::string& why) { on_link_closed(i, why); }};
    try {
      nodes_[i].link = env_.links.start(*nodes_[i].plan, agent, node_label(i), std::move(cb));
      if (const pid_t pid = nodes_[i].link->agent_pid(); pid > 0) agent_pids_.emplace(pid, i);
    } catch (const std::exception& e) {
      if (cfg_.probe_only) {
        nodes_[i].check.failed = e.what();
        if (dynamic_cast<const AgentNotFound*>(&e) != nullptr)
          nodes_[i].check.start.failed_stage = "agent";
      }
      nodes_[i].life.to(NodeState::kDone);  // nothing started: no loss to report
      nodes_[i].life.close();
      heartbeats_.forget(i);
      fail({.kind = CauseKind::kLaunch, .message = node_label(i) + ": " + e.what()});
      if (phase_ != Phase::kStarting) return;  // everything else is being stopped
    }
  }
}

proto::Setup Controller::make_setup(std::size_t i) const { return make_node_setup(plan_, cfg_, i); }

// --report-bindings: one line per rank, as the agent placed it (Started).
void Controller::report_binding(std::size_t i, const proto::Started& s) {
  std::string line =
      fmt::format("dlaunch: binding: host {} rank {}: ", plan_.nodes[i].host.host, s.rank);
  if (!s.cpus.empty()) {
    line += "cpus " + s.cpus + " " + s.cpu_picture;
    if (!s.binding_note.empty()) line += " (" + s.binding_note + ")";
  } else if (s.binding_note.empty()) {
    line += "not bound (--bind-to none)";
  } else {
    line += s.binding_note.rfind("not bound", 0) == 0 ? s.binding_note
                                                      : "not bound (" + s.binding_note + ")";
  }
  observers_.on_text(line + "\n");
}

void Controller::on_message(std::size_t i, proto::Message&& msg) {
  Node& node = nodes_[i];
  // Which message an agent may send in which state is core/node_state.h's
  // table; the handlers below only handle.
  if (!node.life.accepts(msg)) {
    if (node.life.link_gone()) return;  // a link the head has cut has nothing more to say
    fail({.kind = CauseKind::kNode,
          .node_index = static_cast<int>(i),
          .message = fmt::format("{}: unexpected message {} (its agent is {})", node_label(i),
                                 proto::message_name(msg), node_state_name(node.life.state()))});
    return;
  }
  heartbeats_.heard(i);
  if (auto* hello = std::get_if<proto::Hello>(&msg)) {
    on_hello(i, *hello);
  } else if (auto* ready = std::get_if<proto::Ready>(&msg)) {
    on_ready(i, *ready);
  } else if (auto* resumed = std::get_if<proto::Resumed>(&msg)) {
    on_resumed(i, *resumed);
  } else if (auto* pull = std::get_if<proto::ImagePull>(&msg)) {
    on_image_pull(i, *pull);
  } else if (auto* started = std::get_if<proto::Started>(&msg)) {
    on_started(i, *started);
  } else if (auto* out = std::get_if<proto::Output>(&msg)) {
    observers_.on_progress({});  // the ranks' lines go where the status line was
    hang_.on_activity();
    sink_.write(out->rank, out->stream, out->data, out->partial);
  } else if (auto* ex = std::get_if<proto::Exited>(&msg)) {
    on_exited(i, *ex);
  } else if (auto* fatal = std::get_if<proto::Fatal>(&msg)) {
    node.failed = true;
    node.check.refused = fatal->message;
    fail({.kind = CauseKind::kNode,
          .node_index = static_cast<int>(i),
          .message = node_label(i) + ": " + fatal->message});
  } else if (std::holds_alternative<proto::Done>(msg)) {
    node.life.to(NodeState::kDone);
    heartbeats_.forget(i);
    for (JobFeature* f : features_) f->on_node_gone(i);
    maybe_finish();
  } else if (std::holds_alternative<proto::Heartbeat>(msg)) {
    // heard() above is all a heartbeat is for
  } else if (auto* up = std::get_if<proto::FenceUp>(&msg)) {
    mpi_fences_.on_fence_up(i, std::move(*up));
  } else if (auto* ab = std::get_if<proto::WorkerAbort>(&msg)) {
    on_worker_abort(i, *ab);
  } else if (auto* pr = std::get_if<proto::ProbeResult>(&msg)) {
    reach_.on_result(i, std::move(*pr));
  } else if (auto* nl = std::get_if<proto::NetListening>(&msg)) {
    bandwidth_.on_listening(i, *nl);
  } else if (auto* ns = std::get_if<proto::NetSent>(&msg)) {
    bandwidth_.on_sent(i, std::move(*ns));
  } else if (auto* st = std::get_if<proto::Stacks>(&msg)) {
    hang_.on_stacks(i, std::move(*st));
  } else if (auto* ack = std::get_if<proto::StdinAck>(&msg)) {
    stdin_relay_.on_ack(i, *ack);
  } else if (std::holds_alternative<proto::Progress>(msg)) {
    hang_.on_activity();  // the node's ranks completed comm calls: not stalled
  } else if (auto* damaged = std::get_if<proto::ProgressDamaged>(&msg)) {
    hang_.on_progress_damaged(i, *damaged);
  } else {
    // Accepted by the table but handled by nothing above: the two disagree.
    fail({.kind = CauseKind::kNode,
          .node_index = static_cast<int>(i),
          .message = node_label(i) + ": no handler for message " + proto::message_name(msg)});
  }
}

void Controller::on_hello(std::size_t i, const proto::Hello& hello) {
  if (cfg_.probe_only) nodes_[i].check.hello = hello;
  nodes_[i].failed = hello.version != proto::kProtocolVersion || hello.agent_version != kVersion;
  if (hello.version != proto::kProtocolVersion) {
    fail({.kind = CauseKind::kLaunch,
          .message = fmt::format("{}: dlaunch-agent {} speaks protocol {}, dlaunch {} speaks {}",
                                 node_label(i), hello.agent_version, hello.version, kVersion,
                                 proto::kProtocolVersion)});
    return;
  }
  if (hello.agent_version != kVersion) {
    fail({.kind = CauseKind::kLaunch,
          .message = fmt::format("{}: dlaunch-agent is version {}, dlaunch is {}", node_label(i),
                                 hello.agent_version, kVersion)});
    return;
  }
  // An agent on this boot of this machine: its silence is excused while it,
  // or the process relaying for it (sshd, a step), waits for a CPU.
  static const std::string own_boot = boot_id();
  if (!hello.boot_id.empty() && hello.boot_id == own_boot) {
    auto& watch = heartbeats_.starvation();
    watch.watch(i, {.pid = hello.pid, .start_ticks = hello.start_ticks});
    if (hello.parent_pid != ::getpid()) {
      watch.watch(i, {.pid = hello.parent_pid, .start_ticks = hello.parent_start_ticks});
    }
  }
  ++hellos_;
  nodes_[i].life.to(NodeState::kHello);
  if (hellos_ == static_cast<int>(nodes_.size())) milestones_.connected = env_.clock.now();
  show_progress();
  if (phase_ == Phase::kStarting && cfg_.recover) {
    // A new head: this agent hands its channel to the job's agent of the
    // node, which answers Resumed (on_resumed).
    static const std::string head_boot = boot_id();
    static const ProcessRef head = this_process();
    nodes_[i].link->send(proto::Reattach{.job_id = plan_.job_id,
                                         .node_rank = nodes_[i].plan->node_rank,
                                         .secret = cfg_.store_secret,
                                         .head_boot_id = head_boot,
                                         .head_pid = static_cast<std::int32_t>(head.pid),
                                         .head_start_ticks = head.start_ticks});
    return;
  }
  if (phase_ == Phase::kStarting) {
    if (cfg_.probe_only) nodes_[i].check.setup_sent_ns = wall_clock_ns();
    nodes_[i].link->send(make_setup(i));
  }
  if (output_paused_) nodes_[i].link->send(proto::PauseOutput{true});
}

// The console is behind (past its high-water mark) or caught up again: the
// agents stop or resume reading their workers' output. Everything else
// (heartbeats, exits, signals, timers) goes on meanwhile.
void Controller::pause_output(bool pause) {
  output_paused_ = pause;
  for (auto& n : nodes_) {
    if (n.link && n.link->is_open() && n.life.set_up()) {
      n.link->send(proto::PauseOutput{pause});
    }
  }
}

// The job is over; what the console has not taken yet is written before
// dlaunch exits. It waits as long as the reader keeps reading: until all is
// written, the reader goes away (EPIPE), dlaunch gets SIGINT, SIGTERM or
// SIGHUP, or the console has taken nothing for kConsoleDrainStall (a reader
// that is stopped, or paused and forgotten, would otherwise hold dlaunch for
// good). What is dropped then is said on stderr. No agent waits on this: they
// are all gone.
void Controller::drain_console(asio::signal_set& signals) {
  Console& console = sink_.console();
  console.flush_some();
  if (console.queued() == 0) return;
  env_.io.restart();
  bool interrupted = false;
  // SIGINT, SIGTERM, SIGHUP give up on the console; the signals that are
  // forwarded to ranks have no one to go to now and are let pass.
  std::function<void()> wait_interrupt = [&] {
    signals.async_wait([&](boost::system::error_code ec, int sig) {
      if (ec) return;
      if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP) return wait_interrupt();
      interrupted = true;
      env_.io.stop();
    });
  };
  wait_interrupt();
  console.set_on_empty([this] { env_.io.stop(); });
  asio::steady_timer stall(env_.io);
  std::size_t seen = console.written();
  std::function<void()> watch = [&] {
    stall.expires_after(kConsoleDrainStall);
    stall.async_wait([&](boost::system::error_code ec) {
      if (ec) return;
      if (console.written() == seen) {
        env_.io.stop();
        return;
      }
      seen = console.written();
      watch();
    });
  };
  watch();
  env_.io.run();
  console.set_on_empty({});
  stall.cancel();
  signals.cancel();
  env_.io.restart();
  env_.io.poll();
  if (console.queued() > 0) {
    const std::string why =
        interrupted ? "interrupted" : "nothing was taken for " + seconds_text(kConsoleDrainStall);
    // Not through log(): stderr may be the stream that is stuck.
    const std::size_t dropped = console.queued();
    console.detach();
    console.write(true, fmt::format("dlaunch: dropped {} bytes of output the console did not "
                                    "take ({})\n",
                                    dropped, why));
    console.flush_some();
  }
}

void Controller::on_ready(std::size_t i, const proto::Ready& ready) {
  nodes_[i].life.to(NodeState::kReady);
  if (cfg_.probe_only) {
    nodes_[i].check.ready_read_ns = wall_clock_ns();
    nodes_[i].check.ready = ready;
    nodes_[i].check.start = nodes_[i].link->start_info();
  }
  heartbeats_.watch(i);  // its heartbeats begin now (start())
  nodes_[i].no_cgroup = ready.no_cgroup;
  // A thousand nodes' lists would be kept for one comparison each.
  nodes_[i].head_interfaces = proto::same_interfaces(ready.interfaces, own_interfaces());
  // (--check's network test needs every node's: the address it is reached at.)
  if (i == 0 || cfg_.bandwidth_round.count() > 0) nodes_[i].interfaces = ready.interfaces;
  ++readies_;
  event("node_ready", {{"node", static_cast<long long>(i)},
                       {"host", nodes_[i].plan->host.name},
                       {"address", nodes_[i].plan->host.host}});
  show_progress();
  if (i == 0) {
    master_port_ = ready.master_port != 0 ? ready.master_port : cfg_.master_port;
    store_port_ = ready.store_port;
    store_path_ = ready.store_path;
  }
  if (!every_node_ready()) return;
  // --check: a node that found problems is said with them; the network is
  // tested only when every node passed.
  if (cfg_.probe_only && std::any_of(nodes_.begin(), nodes_.end(), [](const Node& n) {
        return n.check.ready && !n.check.ready->problems.empty();
      })) {
    reach_untested_ = "a node found problems";
    end_probe_only();
    return;
  }
  if (begin_network_choice()) return;  // Start waits for the other nodes' tests
  send_start();
}

// A new head (recover): the job's agent of node i took the channel over and
// stands where its Ready did; its ranks' Started and Exited follow. Once every
// node has resumed the job runs again, with no Start: its ranks never
// stopped.
void Controller::on_resumed(std::size_t i, const proto::Resumed& r) {
  if (!cfg_.recover) {
    fail({.kind = CauseKind::kNode,
          .node_index = static_cast<int>(i),
          .message = node_label(i) + ": said Resumed to a head that asked for no take-over"});
    return;
  }
  Node& node = nodes_[i];
  node.life.to(NodeState::kReady);
  heartbeats_.watch(i);
  static const std::string own_boot = boot_id();
  if (!r.boot_id.empty() && r.boot_id == own_boot) {
    heartbeats_.starvation().watch(i, {.pid = r.pid, .start_ticks = r.start_ticks});
  }
  node.no_cgroup = r.ready.no_cgroup;
  node.head_interfaces = proto::same_interfaces(r.ready.interfaces, own_interfaces());
  if (i == 0) node.interfaces = r.ready.interfaces;
  ++readies_;
  const double headless_s = static_cast<double>(r.headless_ms) / 1000.0;
  event("node_resumed", {{"node", static_cast<long long>(i)},
                         {"host", node.plan->host.name},
                         {"headless_s", headless_s},
                         {"held_bytes", static_cast<long long>(r.held_bytes)}});
  say(fmt::format("{} taken over: its ranks ran {:.1f} s without a head", node_label(i),
                  headless_s));
  show_progress();
  if (i == 0) {
    master_port_ = r.ready.master_port;
    store_port_ = r.ready.store_port;
    store_path_ = r.ready.store_path;
  }
  if (!every_node_ready()) return;
  enter(Phase::kRunning);
  start_sent_ = true;
  maybe_shutdown();
}

// A node said Ready (a new head: Resumed): true once every node has and the
// start may go on (its deadline is over). A node that failed meanwhile
// stops them all once the others have said how they are.
bool Controller::every_node_ready() {
  if (phase_ != Phase::kStarting) return false;
  if (cause_.kind != CauseKind::kNone) {
    if (start_settled()) abort_all("job failed", false);
    return false;
  }
  for (const auto& n : nodes_) {
    if (!n.life.said_ready()) return false;
  }
  milestones_.ready = env_.clock.now();
  deadline_->cancel();
  return true;
}

void Controller::send_start() {
  enter(Phase::kRunning);
  start_sent_ = true;
  deadline_->cancel();
  proto::Start start;
  const std::string addr = master_addr();
  start.env = {{"MASTER_ADDR", addr}, {"MASTER_PORT", std::to_string(master_port_)}};
  if (store_port_ != 0) {
    start.env.insert(start.env.end(), {{"DLAUNCH_STORE_ADDR", addr},
                                       {"DLAUNCH_STORE_PORT", std::to_string(store_port_)},
                                       {"DLAUNCH_STORE_SECRET", cfg_.store_secret}});
  }
  // Each agent finds its interface toward it, for gloo, NCCL and Open MPI;
  // a job on this machine alone keeps to loopback and sets none.
  if (!on_this_machine_ && net::is_ip_address(addr)) start.net_address = addr;
  // Nodes on node 0's machine (node 0, and every local node when it is
  // local) reach the store through its Unix socket too.
  const bool node0_local = nodes_.front().plan->host.on_head_machine();
  for (std::size_t k = 0; k < nodes_.size(); ++k) {
    const bool with_node0 = k == 0 || (node0_local && nodes_[k].plan->host.on_head_machine());
    if (store_port_ != 0 && !store_path_.empty() && with_node0) {
      proto::Start local = start;
      local.env.emplace_back("DLAUNCH_STORE_PATH", store_path_);
      nodes_[k].link->send(local);
    } else {
      nodes_[k].link->send(start);
    }
  }
}

// A rank's Started: the rank table takes it in, or the node said something
// that does not fit (a rank it does not run, one that started already).
void Controller::on_started(std::size_t i, const proto::Started& started) {
  if (const std::string why = ranks_.start(i, started.rank, started.pid, env_.clock.now());
      !why.empty()) {
    fail({.kind = CauseKind::kNode,
          .node_index = static_cast<int>(i),
          .message = fmt::format("{}: {}", node_label(i), why)});
    return;
  }
  if (ranks_.started() == ranks_.size()) milestones_.running = env_.clock.now();
  event("rank_started", {{"rank", static_cast<long long>(started.rank)},
                         {"node", static_cast<long long>(i)},
                         {"pid", static_cast<long long>(started.pid)}});
  if (cfg_.report_bindings) report_binding(i, started);
  show_progress();
}

// A rank called MPI_Abort: it is the root cause, unless one came first.
void Controller::on_worker_abort(std::size_t i, const proto::WorkerAbort& ab) {
  if (!ranks_.runs_on(ab.rank, i) || cause_.kind != CauseKind::kNone) return;
  const auto& r = ranks_.at(ab.rank);
  const auto ran = std::chrono::duration_cast<milliseconds>(env_.clock.now() - r.started_at);
  proto::Exited aborted{.rank = ab.rank,
                        .pid = r.pid,
                        .kind = proto::ExitKind::kAborted,
                        .code = ab.status,
                        .runtime_ms = static_cast<std::uint64_t>(ran.count()),
                        .message = ab.message == "N/A" ? "" : ab.message};
  fail({.kind = CauseKind::kWorker,
        .exit = aborted,
        .node = nodes_[r.node].plan->host.name,
        .local_rank = r.local_rank,
        .stderr_tail = sink_.stderr_tail(ab.rank),
        .output_file = sink_.rank_log(ab.rank)});
}

void Controller::on_exited(std::size_t i, const proto::Exited& ex) {
  if (const std::string why = ranks_.exit(i, ex); !why.empty()) {
    fail({.kind = CauseKind::kNode,
          .node_index = static_cast<int>(i),
          .message = fmt::format("{}: {}", node_label(i), why)});
    return;
  }
  const auto& r = ranks_.at(ex.rank);
  event("rank_exited",
        {{"rank", static_cast<long long>(ex.rank)},
         {"node", static_cast<long long>(i)},
         {"how", std::string(ex.kind == proto::ExitKind::kExited     ? "exited"
                             : ex.kind == proto::ExitKind::kSignaled ? "signaled"
                             : ex.kind == proto::ExitKind::kAborted  ? "aborted"
                                                                     : "spawn_failed")},
         {"code", static_cast<long long>(ex.code)},
         {"signal", static_cast<long long>(ex.signal)},
         {"runtime_s", static_cast<double>(ex.runtime_ms) / 1000.0}});
  for (JobFeature* f : features_) f->on_rank_exited(ex.rank);
  const bool failed = ex.kind != proto::ExitKind::kExited || ex.code != 0;
  if (failed && cause_.kind == CauseKind::kNone) {
    // The error file the report quotes, kept in the job's record: the
    // node's copy goes with the job's private folder when the job ends.
    std::vector<std::string> notes;
    if (!ex.error_file_data.empty()) {
      const std::string name =
          fmt::format("error-file-{}-rank-{}.json", plan_.restart_count, ex.rank);
      if (sink_.write_record_file(name, ex.error_file_data)) {
        notes.push_back(fmt::format("rank {}'s error file is kept in the job's record: {}", ex.rank,
                                    sink_.record_path(name)));
      }
    }
    fail({.kind = CauseKind::kWorker,
          .exit = ex,
          .node = nodes_[i].plan->host.name,
          .local_rank = r.local_rank,
          .stderr_tail = sink_.stderr_tail(ex.rank),
          .output_file = sink_.rank_log(ex.rank),
          .notes = std::move(notes)});
  }
  maybe_shutdown();
}

// To every agent still connected.
void Controller::send_all(const proto::Message& msg) {
  for (auto& n : nodes_) {
    if (n.link && n.link->is_open() && !n.life.done()) n.link->send(msg);
  }
}

void Controller::on_link_closed(std::size_t i, const std::string& reason) {
  Node& node = nodes_[i];
  if (cfg_.probe_only && !node.check.ready) {
    node.check.failed = reason;
    if (node.link) node.check.start = node.link->start_info();
  }
  node.life.close();
  heartbeats_.forget(i);
  if (!node.life.done() && phase_ != Phase::kFinished) {
    event("node_lost", {{"node", static_cast<long long>(i)},
                        {"host", node.plan->host.name},
                        {"started", node.life.said_hello()},
                        {"reason", reason}});
    // Its ranks are beyond reach; the agent kills them itself on EOF.
    ranks_.node_gone(i);
    for (JobFeature* f : features_) f->on_node_gone(i);
    if (node.life.said_hello()) {
      fail(
          {.kind = CauseKind::kNode,
           .node_index = static_cast<int>(i),
           .message = fmt::format("lost contact with the agent on {}: {}", node_label(i), reason)});
    } else {
      fail({.kind = CauseKind::kLaunch,
            .node_index = static_cast<int>(i),
            .message = fmt::format("could not start the agent on {}: {}", node_label(i), reason)});
    }
  }
  maybe_shutdown();
  maybe_finish();
}

// The first cause wins; everything after it is a consequence. While the job
// is still starting, every host's problem is kept so the report names them all.
//
// While starting, a node's problem (its agent could not start, a missing
// program or directory there) does not stop the others at once: every node
// first finishes its own checks, so that the report names every host's
// problem, not just the first one's. No worker runs yet, and the start
// deadline bounds the wait.
void Controller::fail(RootCause cause) {
  const bool node_problem = cause.kind == CauseKind::kLaunch || cause.kind == CauseKind::kNode;
  record_cause(std::move(cause));
  if (phase_ == Phase::kStarting && node_problem && !start_deadline_passed_ && !start_settled()) {
    return;
  }
  abort_all(cause_.kind == CauseKind::kInterrupted ? "interrupted" : "job failed", false);
}

// The first cause wins (fail() without stopping anything).
void Controller::record_cause(RootCause cause) {
  if (cause_.kind == CauseKind::kNone) {
    cause_ = std::move(cause);
    observers_.on_cause(cause_);
    const bool running_cause = cause_.kind == CauseKind::kWorker && cause_.exit.rank >= 0 &&
                               cause_.exit.rank < ranks_.size() && ranks_.running(cause_.exit.rank);
    ranks_stopped_ += ranks_.running_now() - (running_cause ? 1 : 0);
  } else if (!start_sent_ && (cause.kind == CauseKind::kLaunch || cause.kind == CauseKind::kNode)) {
    cause_.also.push_back(cause.message);
  }
}

std::vector<Controller::NodeCheck> Controller::checks() const {
  std::vector<NodeCheck> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.check);
  return out;
}

bool Controller::has_containers() const {
  if (!cfg_.container.image.empty()) return true;
  return std::any_of(plan_.nodes.begin(), plan_.nodes.end(),
                     [](const NodePlan& n) { return !n.host.container.empty(); });
}

bool Controller::start_settled() const {
  for (const auto& n : nodes_) {
    if (!n.life.said_ready() && !n.failed && !n.life.link_gone()) return false;
  }
  return true;
}

void Controller::abort_all(const std::string& reason, bool immediate) {
  // "Kill at once": the agents SIGKILL everything when they read the Abort,
  // but what they say next can wait behind megabytes of output still crossing
  // a slow link. Wait briefly for it, then cut the channels: an agent whose
  // channel closes stops everything itself (and a local one is killed, its
  // guard taking the workers down).
  const auto at_once = [this] {
    if (deadline_->expiry() > env_.clock.now() + timing::kAfterKill) {
      arm_deadline(timing::kAfterKill,
                   phase_ == Phase::kShuttingDown ? "every agent to exit after SIGKILL"
                                                  : "every rank to stop after SIGKILL",
                   /*patient=*/false);
    }
  };
  if (phase_ == Phase::kFinished || phase_ == Phase::kShuttingDown) {
    if (immediate) {
      for (auto& n : nodes_) {
        if (n.link && n.link->is_open()) n.link->send(proto::Abort{reason, true});
      }
      if (phase_ == Phase::kShuttingDown) at_once();
    }
    return;
  }
  const bool first = phase_ != Phase::kAborting;
  enter(Phase::kAborting);
  // A node whose agent has not said Hello yet (an SSH login in progress, a
  // host that accepts TCP and never answers) is dropped now: its connection
  // attempt is cancelled rather than waited out, and no agent of it has
  // started anything.
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    if (!n.link || !n.link->is_open() || n.life.said_hello()) continue;
    n.link->kill_agent();
    n.link->close();
    n.life.close();
    heartbeats_.forget(i);
  }
  for (auto& n : nodes_) {
    if (n.link && n.link->is_open()) n.link->send(proto::Abort{reason, immediate});
  }
  // Agents report every rank within the grace period; allow for slow links.
  // Not patient: an agent whose ranks cannot be killed (a D state) works on.
  if (first) {
    arm_deadline(cfg_.kill_grace + timing::kReportMargin, "every rank to stop",
                 /*patient=*/false);
  }
  if (immediate) at_once();
  maybe_shutdown();
}

void Controller::maybe_shutdown() {
  if (phase_ == Phase::kShuttingDown || phase_ == Phase::kFinished) return;
  if (!start_sent_ && phase_ != Phase::kAborting) return;
  for (const auto& r : ranks_.ranks()) {
    const bool waiting = r.state == RankState::kWaiting || r.state == RankState::kRunning;
    if (start_sent_ && waiting && !nodes_[r.node].life.link_gone()) return;
  }
  enter(Phase::kShuttingDown);
  for (auto& n : nodes_) {
    if (n.link && n.link->is_open()) n.link->send(proto::Shutdown{});
  }
  // An agent removes its node's container before it says Done.
  arm_deadline(cfg_.kill_grace + timing::kReportMargin +
                   (has_containers() ? timing::kContainerRemoval : milliseconds(0)),
               "every agent to exit");
  maybe_finish();
}

void Controller::maybe_finish() {
  if (phase_ != Phase::kShuttingDown) return;
  // Nodes before gone_scan_ are known gone (for good): resume after them.
  for (; gone_scan_ < nodes_.size(); ++gone_scan_) {
    auto& n = nodes_[gone_scan_];
    if (!n.link) continue;
    n.link->reap();
    if (!n.link->agent_gone()) return;
  }
  enter(Phase::kFinished);
  job_timer_->cancel();
  deadline_->cancel();
  heartbeats_.stop();
  env_.io.stop();
}

// MASTER_ADDR: --master-addr, or node 0's `address`, or the address chosen
// at start (every node reached it); without one (an agent that reported no
// interfaces), the address the head actually reached node 0 at over SSH (a
// jump host's, through one), and for a local node 0 in a job with SSH nodes,
// the head's own address on the route to them (never 127.0.0.1).
std::string Controller::master_addr() const {
  const auto& node0 = nodes_.front();
  if (cfg_.master_addr_explicit || !node0.plan->host.address.empty()) return plan_.master_addr;
  if (!reach_.chosen().empty()) return reach_.chosen();
  if (node0.link && !node0.link->peer_address().empty()) return node0.link->peer_address();
  for (const auto& n : nodes_) {
    if (n.link && !n.link->local_address().empty()) return n.link->local_address();
  }
  return plan_.master_addr;
}

void Controller::show_progress() {
  const int n = static_cast<int>(nodes_.size());
  if (ranks_.started() >= plan_.world_size ||
      (phase_ != Phase::kStarting && phase_ != Phase::kRunning)) {
    observers_.on_progress({});
    return;
  }
  observers_.on_progress(fmt::format(
      "dlaunch: {}/{} hosts connected, {}/{} agents ready{}, {}/{} ranks running", hellos_, n,
      readies_, n, pulling_ > 0 ? fmt::format(" ({} pulling the image)", pulling_) : "",
      ranks_.started(), plan_.world_size));
}

void Controller::on_signal(int sig) {
  if (!signals_.on_signal(sig)) interrupt(sig);
}

// SIGTERM under --signal (controller/signal_relay.h): the cause, the ranks it
// stops, and a second SIGINT/SIGTERM kills at once, as ever.
void Controller::begin_interrupt(int sig) {
  ++interrupts_;
  cause_ = {.kind = CauseKind::kInterrupted, .signal = sig};
  ranks_stopped_ += ranks_.running_now();
}

void Controller::interrupt(int sig) {
  observers_.on_progress({});
  ++interrupts_;
  event("signal", {{"signal", std::string(signal_name(sig))},
                   {"action", std::string(interrupts_ == 1 ? "stop" : "kill")}});
  if (interrupts_ == 1) {
    say(fmt::format("{}: stopping the job (again to kill at once)", signal_name(sig)));
    fail({.kind = CauseKind::kInterrupted, .signal = sig});
  } else {
    say(fmt::format("{}: killing the job now", signal_name(sig)));
    abort_all("interrupted twice", true);
  }
}

// --timeout: the job has this long from the workers' start; then it is
// stopped like any failure, and the report names the ranks still running.
void Controller::arm_job_timeout() {
  if (cfg_.timeout.count() <= 0) return;
  env_.clock.after(*job_timer_, cfg_.timeout, [this] {
    if (phase_ == Phase::kStarting) {
      std::string late;
      for (std::size_t i = 0; i < nodes_.size(); ++i) {
        if (!nodes_[i].life.said_ready()) late += (late.empty() ? "" : ", ") + node_label(i);
      }
      fail({.kind = CauseKind::kTimeout,
            .message = fmt::format("--timeout of {} expired while the job was starting; not "
                                   "ready: {}",
                                   seconds_text(cfg_.timeout), late)});
      return;
    }
    if (phase_ != Phase::kRunning) return;
    std::string running;
    int n = 0;
    for (int k = 0; k < ranks_.size(); ++k) {
      if (!ranks_.running(k)) continue;
      if (n++ < 32) {
        running += fmt::format("{}{} ({})", running.empty() ? "" : ", ", k,
                               nodes_[ranks_.at(k).node].plan->host.name);
      }
    }
    if (n > 32) running += fmt::format(" and {} more", n - 32);
    // Where each rank is stuck, before anything is stopped.
    hang_.stop_at_timeout(
        {.kind = CauseKind::kTimeout,
         .message = fmt::format("--timeout of {} expired; {} rank(s) still running: {}",
                                seconds_text(cfg_.timeout), n, running)});
  });
}

// The heartbeat monitor found node i silent past the timeout.
void Controller::on_silent(std::size_t i) {
  Node& n = nodes_[i];
  if (!n.link || !n.link->is_open() || n.life.done() || phase_ == Phase::kFinished) return;
  n.link->close();
  on_link_closed(i, "no heartbeat for " + seconds_text(cfg_.heartbeat_timeout));
}

// One deadline at a time: starting, then stopping, then exiting. When it
// expires, whatever has not answered is killed outright.
void Controller::arm_deadline(milliseconds after, const std::string& what, bool patient) {
  deadline_armed_ = env_.clock.now();
  deadline_patient_ = patient;
  env_.clock.after(*deadline_, after, [this, after, what] { on_deadline(after, what); });
}

void Controller::on_deadline(milliseconds after, const std::string& what) {
  if (phase_ == Phase::kFinished) return;
  const std::string msg = "gave up waiting " + seconds_text(after) + " for " + what;
  if (phase_ == Phase::kStarting) {
    if (start_deadline_moved()) return;
    if (wait_for_working_agents(after, what)) return;
    start_deadline_passed_ = true;
    // The nodes past their share; a node whose pull, or whose turn to
    // connect, moved its share is named apart (it was not late yet).
    std::string late;
    std::string pulled;
    std::string later;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const Node& n = nodes_[i];
      if (n.life.said_ready()) continue;
      std::string& list = node_start_deadline(i) <= env_.clock.now() ? late
                          : n.pulling || n.pulled.count() > 0        ? pulled
                                                                     : later;
      list += (list.empty() ? "" : ", ") + node_label(i);
    }
    fail({.kind = CauseKind::kLaunch,
          .message =
              msg + "; not ready: " + late +
              (pulled.empty() ? ""
                              : " (still in its time after pulling its image: " + pulled + ")") +
              (later.empty() ? ""
                             : " (still in its time from its turn to connect: " + later + ")")});
    return;
  }
  if (wait_for_working_agents(after, what)) return;
  say(msg + "; killing the agents");
  for (auto& n : nodes_) {
    if (n.link) {
      n.link->kill_agent();  // first: an SSH link is then dropped, not closed politely
      n.link->close();
    }
    n.life.close();
  }
  ranks_.all_gone();
  enter(Phase::kShuttingDown);
  maybe_finish();
}

// Whom the deadline waits for: the nodes not ready yet (the start), the
// agents not gone (the end). A stop's deadlines are not patient.
bool Controller::deadline_waits_for(std::size_t i) const {
  const Node& n = nodes_[i];
  if (!n.link || n.life.link_gone()) return false;
  if (phase_ == Phase::kStarting) return !n.life.said_ready() && !n.failed;
  return phase_ == Phase::kShuttingDown && !n.link->agent_gone();
}

// Runnable now, or it used CPU since the head last looked (or since it
// started): slow, not stuck.
bool Controller::agent_working(Node& n) {
  const auto w = n.link ? n.link->agent_work() : std::nullopt;
  if (!w) return false;
  const bool used_cpu = w->cpu_ticks > n.work_seen;
  n.work_seen = w->cpu_ticks;
  return w->runnable || used_cpu;
}

// On a saturated machine (a thousand launchers on two cores, each with its
// local agent) an agent's start or exit takes longer than any deadline meant
// for a stuck one, and killing it then fails a job that was only slow. The
// deadline waits on while every node it waits for has a local agent that is
// still working; an agent that sleeps without using CPU, a remote one (its
// ssh or srun process says nothing of it), or the limit ends the wait.
bool Controller::wait_for_working_agents(milliseconds after, const std::string& what) {
  if (!deadline_patient_) return false;
  const SteadyTime now = env_.clock.now();
  if (now >= deadline_armed_ + after * timing::kSaturatedWaits) return false;
  std::size_t waiting = 0;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (!deadline_waits_for(i)) continue;
    if (!agent_working(nodes_[i])) return false;
    ++waiting;
  }
  if (waiting == 0) return false;
  if (!saturation_said_) {
    saturation_said_ = true;
    say(fmt::format(
        "waited {} for {}; {} still working on a saturated machine: waiting on, at "
        "most {} more",
        seconds_text(after), what,
        fmt::format("{} agent{} {}", waiting, waiting == 1 ? "" : "s", waiting == 1 ? "is" : "are"),
        seconds_text(std::chrono::duration_cast<milliseconds>(
            deadline_armed_ + after * timing::kSaturatedWaits - now))));
  }
  env_.clock.after(*deadline_, timing::kSaturatedLook,
                   [this, after, what] { on_deadline(after, what); });
  return true;
}

// A node pulls its container image (docs/containers.md): said on the
// progress line (or, without one, on a line of its own per node, as pyxis
// does), watched by its heartbeats from now on, and not counted against the
// start's deadline.
void Controller::on_image_pull(std::size_t i, const proto::ImagePull& pull) {
  Node& n = nodes_[i];
  const SteadyTime now = env_.clock.now();
  if (!pull.done && !n.pulling) {
    n.pulling = true;
    n.pull_began = now;
    ++pulling_;
    heartbeats_.watch(i);  // the agent heartbeats while it pulls
    const std::string line = fmt::format("{}: pulling image {}", node_label(i), pull.image);
    if (!cfg_.progress) say(line);
    observers_.on_notice(line);
  } else if (pull.done && n.pulling) {
    n.pulling = false;
    const auto took = std::chrono::duration_cast<milliseconds>(now - n.pull_began);
    n.pulled += took;
    --pulling_;
    const std::string line = fmt::format("{}: pulled image {} in {:.1f} s", node_label(i),
                                         pull.image, std::chrono::duration<double>(took).count());
    if (!cfg_.progress) say(line);
    observers_.on_notice(line);
  }
  event("image_pull", {{"node", static_cast<long long>(i)},
                       {"host", n.plan->host.name},
                       {"image", pull.image},
                       {"done", pull.done}});
  show_progress();
}

// Each node has --start-timeout from its own start plus the time it spent
// pulling its image (a pull going on counts up to now). Its start is the
// deadline's, or later when its link waited for its turn to connect (the SSH
// concurrency limit): a head that reaches thousands of nodes, or a slow
// sshd, holds the last ones back for longer than --start-timeout, and they
// are not late for it. A node still waiting its turn has no deadline yet
// (SteadyTime::max()).
SteadyTime Controller::node_start_deadline(std::size_t i) const {
  const Node& n = nodes_[i];
  SteadyTime from = start_deadline_armed_;
  if (n.link) {
    const LinkStart s = n.link->start_info();
    if (s.queued) return SteadyTime::max();
    from = std::max(from, s.began);
  }
  auto pulled = n.pulled;
  if (n.pulling)
    pulled += std::chrono::duration_cast<milliseconds>(env_.clock.now() - n.pull_began);
  return from + cfg_.start_timeout + pulled;
}

// When every node not ready yet is within its own share of the deadline, it
// waits for the first of them to pass (a pull still going on moves it again
// then); with only nodes waiting their turn to connect, a timeout later.
bool Controller::start_deadline_moved() {
  const SteadyTime now = env_.clock.now();
  std::optional<SteadyTime> first;
  bool queued = false;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.life.said_ready() || n.life.link_gone()) continue;
    const SteadyTime own = node_start_deadline(i);
    if (own == SteadyTime::max()) {
      queued = true;
      continue;
    }
    if (own <= now) return false;
    if (!first || own < *first) first = own;
  }
  if (!first && !queued) return false;
  if (!first) first = now + cfg_.start_timeout;
  env_.clock.after(*deadline_,
                   std::chrono::duration_cast<milliseconds>(*first - now) + milliseconds(1),
                   [this] { on_deadline(cfg_.start_timeout, "every agent to become ready"); });
  return true;
}

}  // namespace dlaunch
