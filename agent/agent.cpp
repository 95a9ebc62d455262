#include "agent.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>

#include "dlaunch/error.h"
#include "dlaunch/private_dir.h"
#include "dlaunch/proc_stat.h"
#include "dlaunch/process.h"
#include "dlaunch/random.h"
#include "dlaunch/tunables.h"
#include "dlaunch/version.h"
#include "guard.h"
#include "log.h"
#include "net.h"
#include "stacks.h"

namespace dlaunch::agent {

namespace asio = boost::asio;
using std::chrono::milliseconds;

Agent::Agent(AgentEnv env, int control_in, int control_out)
    : env_(env),
      grace_timer_(env.clock.make_timer()),
      orphan_deadline_(env.clock.make_timer()),
      sweep_timer_(env.clock.make_timer()),
      head_grace_timer_(env.clock.make_timer()),
      token_entry_("DLAUNCH_AGENT_TOKEN=" + random_hex(12)),
      runtime_(env.clock, env.os,
               {.send = [this](const proto::Message& m) { to_head(m); },
                .pulling = [this] { start_heartbeats(); },
                .made =
                    [this] {
                      if (check_programs() && check_image_pmix()) become_ready();
                    }}),
      output_(env.io, env.clock,
              {.send = [this](proto::Output out) { to_head(out); },
               .queued = [this] { return queued_to_head(); },
               .heard =
                   [this](int rank, proto::Stream stream, std::string_view data) {
                     for (NodeService* service : services_) service->on_output(rank, stream, data);
                   },
               .runnable =
                   [this](int rank) {
                     const auto it = workers_.find(rank);
                     return it != workers_.end() && it->second.pid > 0 &&
                            it->second.state == WorkerState::kRunning &&
                            env_.os.process_state(it->second.pid) == 'R';
                   }}),
      pmix_(env.io, env.os, *this, placement_),
      network_(
          env.io, env.clock, [this](const std::string& a) { return env_.os.route_interface(a); },
          *this),
      store_(env.io, *this),
      progress_(env.clock, *this),
      stdin_(env.io, *this),
      stacks_(env.io, env.clock, env.os, *this),
      services_{&pmix_, &network_, &store_, &progress_, &stdin_, &stacks_} {
  make_channel(control_in, control_out);
  carrier_ = env_.os.parent();
}

Agent::~Agent() = default;

void Agent::make_channel(int in, int out) {
  set_nonblocking(in, true);
  set_nonblocking(out, true);
  channel_ = std::make_unique<proto::PipeChannel>(
      env_.io, in, out,
      proto::PipeChannel::Callbacks{
          .on_message = [this](proto::Message&& m) { on_message(std::move(m)); },
          .on_close = [this](const std::string& why) { on_channel_closed(why); },
          .on_drained = [this] { output_.resume(); },
          .on_flushed = [this] { env_.io.stop(); },
      });
}

// What the head must hear again after a loss is kept as it is said (the
// ranks' Started and Exited, the fence parts not yet answered); while
// headless everything but heartbeats is held, in order, for a new head.
void Agent::to_head(const proto::Message& msg) {
  if (const auto* s = std::get_if<proto::Started>(&msg)) {
    said_started_[s->rank] = *s;
  } else if (const auto* e = std::get_if<proto::Exited>(&msg)) {
    said_exited_[e->rank] = *e;
  } else if (const auto* f = std::get_if<proto::FenceUp>(&msg)) {
    fences_up_[f->seq] = *f;
  }
  if (channel_->is_open()) {
    channel_->send(msg);
    return;
  }
  if (!headless_ || std::holds_alternative<proto::Heartbeat>(msg)) return;
  if (const auto* o = std::get_if<proto::Output>(&msg)) held_bytes_ += o->data.size();
  held_.push_back(msg);
}

// The workers' pipes are read while this is under the output's high-water
// mark. Headless, the ranks' output is held up to kHeldOutput; past it they
// block on their pipes until a new head takes it.
std::size_t Agent::queued_to_head() const {
  if (headless_) return held_bytes_ >= timing::kHeldOutput ? held_bytes_ : 0;
  return channel_->queued_bytes();
}

bool Agent::workers_running() const {
  return phase_ == Phase::kRunning && !aborting_ && channel_->is_open();
}

std::vector<NodeAccess::RunningWorker> Agent::running_workers() const {
  std::vector<RunningWorker> out;
  for (const auto& [rank, w] : workers_) {
    if (w.state != WorkerState::kRunning) continue;
    out.push_back(
        {.rank = rank, .pid = w.pid, .program = w.spec.argv.empty() ? "" : w.spec.argv[0]});
  }
  return out;
}

bool Agent::worker_running(int rank) const {
  const auto it = workers_.find(rank);
  return it != workers_.end() && it->second.state == WorkerState::kRunning;
}

bool Agent::workers_contained() const { return runtime_.contained(); }

void Agent::remove_on_death(const std::string& path) { guard_->remove_on_death(path); }

void Agent::send_to_head(proto::Message msg) { to_head(msg); }

int Agent::run() {
  asio::signal_set sigchld(env_.io, SIGCHLD);
  asio::signal_set terminate_signals(env_.io, SIGTERM, SIGINT, SIGHUP);
  std::function<void()> wait_chld = [&] {
    sigchld.async_wait([&](boost::system::error_code ec, int) {
      if (ec) return;
      on_sigchld();
      wait_chld();
    });
  };
  wait_chld();
  terminate_signals.async_wait([this](boost::system::error_code ec, int sig) {
    if (!ec) terminate(sig);
  });
  start();
  env_.io.run();
  return exit_code_;
}

void Agent::start() {
  // Before anything else: orphans of the workers must come to us, and the
  // guard must exist before the first worker does.
  env_.os.become_subreaper();
  guard_ = env_.os.start_guard(token_entry_);
  channel_->start();
  const ProcessRef parent = env_.os.parent();
  channel_->send(proto::Hello{.agent_version = kVersion,
                              .hostname = host_name(),
                              .pid = ::getpid(),
                              .boot_id = env_.os.boot_id(),
                              .start_ticks = process_start_ticks(::getpid()),
                              .parent_pid = static_cast<std::int32_t>(parent.pid),
                              .parent_start_ticks = parent.start_ticks,
                              .exe = self_exe()});
  enter(Phase::kSetup);
}

void Agent::terminate(int sig) {
  if (phase_ == Phase::kRelaying) {
    // Nothing of the job is a relay's: it only stops waiting.
    enter(Phase::kDone);
    if (guard_) guard_->disarm();
    env_.io.stop();
    return;
  }
  if (channel_->is_open()) channel_->send(proto::Fatal{"agent received " + signal_name(sig)});
  shutdown_requested_ = true;
  begin_abort("agent received " + signal_name(sig), false);
}

void Agent::on_message(proto::Message&& msg) {
  if (heartbeats_) heartbeats_->heard(0);
  if (const auto* down = std::get_if<proto::FenceDown>(&msg)) fences_up_.erase(down->seq);
  // Whether a message may come now is lifecycle.h's table, not the handlers'.
  switch (agent_verdict(phase_, proto::message_id(msg))) {
    case Verdict::kHandle:
      break;
    case Verdict::kIgnore:
      return;
    case Verdict::kFatal:
      channel_->send(proto::Fatal{std::string("unexpected message from head: ") +
                                  proto::message_name(msg) + " (the agent is in phase " +
                                  std::string(agent_phase_name(phase_)) + ")"});
      return;
  }
  for (NodeService* service : services_) {
    if (service->handle(msg)) return;
  }
  if (auto* setup = std::get_if<proto::Setup>(&msg)) {
    handle(std::move(*setup));
  } else if (auto* start = std::get_if<proto::Start>(&msg)) {
    handle(std::move(*start));
  } else if (auto* abort = std::get_if<proto::Abort>(&msg)) {
    handle(*abort);
  } else if (std::holds_alternative<proto::Shutdown>(msg)) {
    handle_shutdown();
  } else if (std::holds_alternative<proto::Heartbeat>(msg)) {
    // heard() above is all a heartbeat is for
  } else if (auto* pause = std::get_if<proto::PauseOutput>(&msg)) {
    // The head's console is behind: stop reading the workers' pipes (they
    // block when theirs fill) until it says so; the rest goes on as before.
    output_.pause(pause->pause);
  } else if (auto* sig = std::get_if<proto::SignalRanks>(&msg)) {
    handle(*sig);
  } else if (auto* reattach = std::get_if<proto::Reattach>(&msg)) {
    relay(*reattach);
  } else {
    // Accepted by the table but handled by nothing above: the two disagree.
    channel_->send(
        proto::Fatal{std::string("no handler for message from head: ") + proto::message_name(msg)});
  }
}

void Agent::handle(proto::Setup&& m) {
  setup_ = std::move(m);
  setup_at_ = env_.clock.now();
  output_.set_flush(milliseconds(setup_.flush_ms));
  ready_ = proto::Ready{};
  // --check: the working directory on its own line, and the scripts.
  if (setup_.check) check_files();
  if (auto refused = runtime_.choose(setup_.container)) {
    // (--check: the container's runtime is its PROGRAM column's, with the
    // image and the programs in it.)
    refuse("program", std::move(*refused), false);
    return;
  }
  const bool contained = runtime_.contained();
  // In a container, programs are looked for once it is made.
  if (!contained && !check_programs()) return;
  if (!setup_.check && setup_.workers.empty() && !setup_.workdir.empty() &&
      ::access(setup_.workdir.c_str(), X_OK) != 0) {
    refuse("wdir",
           "working directory '" + setup_.workdir + "' does not exist on " + host_name() +
               " (use --wdir)",
           false);
    return;
  }
  if (auto refused = placement_.plan(setup_, host_name())) {
    refuse("", std::move(*refused), false);
    return;
  }
  make_error_dir();
  // The node services' parts (service.h): the PMIx server, node 0's
  // MASTER_PORT and store.
  for (NodeService* service : services_) {
    if (auto refused = service->prepare(setup_, ready_)) {
      refuse("", std::move(*refused), false);
      return;
    }
  }
  ready_.interfaces = env_.os.interfaces();
  // A cgroup of the job's own on this node, where the system lets us make
  // one: nothing the workers start can leave it, so nothing escapes the
  // clean-up. Else the process groups, the tree and the token, as ever.
  auto cgroup =
      env_.os.make_cgroup("dlaunch-" + setup_.job_id + "-node" + std::to_string(setup_.node_rank) +
                          "-" + random_hex(4) + cgroup_owner_suffix());
  if (cgroup) {
    cgroup_ = *cgroup;
    guard_->kill_cgroup_on_death(cgroup_);
  } else {
    ready_.no_cgroup = cgroup.error();
  }
  for (const auto& ws : setup_.workers) workers_[ws.rank].spec = ws;
  if (contained) {
    // Ready once it is made, with the job's folders of this node mounted:
    // the error files, the services' (the store's socket, PMIx's folder).
    std::vector<std::string> job_dirs;
    if (!error_dir_.empty()) job_dirs.push_back(error_dir_);
    for (NodeService* service : services_) {
      for (auto& dir : service->job_dirs()) job_dirs.push_back(std::move(dir));
    }
    runtime_.make(setup_, std::move(job_dirs), error_dir_, cgroup_, *guard_);
    return;
  }
  become_ready();
}

// A problem found at Setup. A job refuses at the first (Fatal). --check notes
// each in Ready: where it can go on (`can_go_on`) it does, else the node is
// Ready at once with what it found. True: go on.
bool Agent::refuse(std::string column, std::string why, bool can_go_on) {
  if (!setup_.check) {
    channel_->send(proto::Fatal{std::move(why)});
    return false;
  }
  ready_.problems.push_back({.column = std::move(column), .message = std::move(why)});
  if (!can_go_on) become_ready();
  return can_go_on;
}

// --check: the working directory, and each script an interpreter is given
// (relative to the working directory, as the worker opens it), in the words
// of --check's table.
void Agent::check_files() {
  const std::string& dir = setup_.workdir;
  if (!dir.empty() && ::access(dir.c_str(), X_OK) != 0)
    refuse("wdir", "working directory '" + dir + "' does not exist", true);
  for (const auto& script : setup_.check_scripts) {
    const bool absolute = script.starts_with('/');
    const std::string path = absolute || dir.empty() ? script : dir + "/" + script;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) continue;
    refuse("program", "script '" + script + "' not found" + (absolute ? "" : " in '" + dir + "'"),
           true);
  }
}

void Agent::become_ready() {
  if (setup_.check) {
    auto node = env_.os.node_facts(setup_.workdir, setup_.count_gpus, setup_.gpu_test_mb);
    ready_.facts = std::move(node.facts);
    // The node's clock (time_ns) read again here, with nothing slow between
    // it and the Ready, and how long after the Setup came: the head brackets
    // the reading between the Setup's send plus that and the Ready's read.
    const auto since_setup = env_.clock.now() - setup_at_;
    const long long wall = wall_clock_ns();
    for (auto& [key, value] : ready_.facts) {
      if (key == "time_ns") value = std::to_string(wall);
    }
    ready_.facts.emplace_back(
        "since_setup_ns",
        std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(since_setup).count()));
    ready_.topology = std::move(node.topology);
    ready_.gpus = node.gpus;
  }
  channel_->send(ready_);
  enter(Phase::kReady);
  if (!heartbeats_) start_heartbeats();  // they began with a pull
}

void Agent::handle(proto::Start&& m) {
  enter(Phase::kRunning);
  // The network tests end; node 0's reserved port is released: rank 0 binds
  // it now.
  for (NodeService* service : services_) service->on_start(m);
  // The interface toward the job's address, for the workers' gloo, NCCL and
  // Open MPI (node 0: the one that owns it).
  if (!m.net_address.empty()) net_interface_ = env_.os.route_interface(m.net_address);
  for (auto& [rank, w] : workers_) spawn_worker(w, m.env);
  for (NodeService* service : services_) service->on_running();
  maybe_finish();
}

// Refuses here, before any node starts a worker, what would fail on every
// rank: every working directory and program once (MPMD apps may each have
// their own), as the worker will see them (runtime_: on the host, or in the
// node's container).
bool Agent::check_programs() {
  std::set<std::pair<std::string, std::string>> checked;
  const auto base = runtime_.base_environment();
  for (const auto& w : setup_.workers) {
    const std::string& dir = w.workdir.empty() ? setup_.workdir : w.workdir;
    const std::string prog = w.argv.empty() ? std::string() : w.argv.front();
    if (!checked.emplace(dir, prog).second) continue;
    const auto env = worker_environment(base, w.env, {}, token_entry_);
    // --check on the host: the program alone, in its table's words (the
    // working directory has a line of its own).
    if (setup_.check && !runtime_.contained()) {
      if (!prog.empty() && find_program(prog, env, dir).empty())
        refuse("program", "program '" + prog + "' not found on PATH", true);
      continue;
    }
    if (auto why = runtime_.runtime()->check_program(prog, env, dir); !why.empty()) {
      if (!refuse("program", std::move(why), true)) return false;
    }
  }
  return true;
}

// --mpi in a container: the ranks are clients of this node's PMIx server
// through the image's own PMIx (pmix/pmix_version.h). One too old to be
// served fails the node before any rank starts; another version is said,
// with the store the two can share.
bool Agent::check_image_pmix() {
  if (!setup_.mpi || !runtime_.contained()) return true;
  const auto server = pmix_.server_version();
  if (!server) return true;  // a library that does not say which it is
  std::optional<PmixVersion> found;
  std::string where;
  for (const auto& path : image_pmix_candidates()) {
    const int fd = runtime_.runtime()->open_in_image(path);
    if (fd < 0) continue;
    found = pmix_version_in_file(fd);
    where = path;
    if (found) break;
  }
  const PmixJudgement j = judge_image_pmix(*server, found, where, setup_.container.image);
  if (!j.refusal.empty())
    return refuse("program", "node " + std::to_string(setup_.node_rank) + ": " + j.refusal, false);
  if (!j.note.empty()) log("node " + std::to_string(setup_.node_rank) + ": " + j.note);
  if (j.gds_hash) pmix_.use_gds_hash();
  return true;
}

// A private folder for the workers' TORCHELASTIC_ERROR_FILEs. Without it
// workers run without one (PyTorch then only logs its error).
void Agent::make_error_dir() {
  // Fresh and private (mkdtemp, 0700, checked): a predictable name in a
  // shared /tmp could be planted by another user.
  try {
    error_dir_ = env_.os.make_private_dir("dlaunch-" + setup_.job_id + "-node" +
                                          std::to_string(setup_.node_rank) + "-");
  } catch (const PrivateDirError& e) {
    log("no folder for error files: " + std::string(e.what()));
    return;
  }
  guard_->remove_on_death(error_dir_);
}

void Agent::spawn_worker(Worker& w, const proto::Env& start_env) {
  proto::Env job_env = start_env;
  // In a container, the image's variables where they win (runtime/runtime.h).
  const std::vector<std::string> base = runtime_.base_environment();
  for (auto& kv : network_interface_env(net_interface_, setup_.mpi, base, w.spec.env)) {
    job_env.push_back(std::move(kv));
  }
  SpawnOptions opts;
  proto::Started started{.rank = w.spec.rank};
  placement_.place(w.spec.rank, w.spec.env, base, opts, job_env, started);
  // What the node services give it (its PMIx client's variables, its
  // progress counter, its stdin, ...), or why it must not start.
  UniqueFd in_r;  // its stdin's read end, closed here once it is spawned
  std::size_t asked = 0;
  std::string refused;
  for (NodeService* service : services_) {
    NodeService::WorkerGift gift;
    service->before_spawn(w.spec.rank, gift);
    ++asked;
    if (!gift.refused.empty()) {
      refused = std::move(gift.refused);
      break;
    }
    for (auto& kv : gift.env) job_env.push_back(std::move(kv));
    if (gift.keep_fd >= 0) opts.keep_fd = gift.keep_fd;
    if (gift.stdin_read) in_r = std::move(gift.stdin_read);
  }
  if (!refused.empty()) {
    for (std::size_t i = 0; i < asked; ++i) services_[i]->after_spawn(w.spec.rank, false);
    w.state = WorkerState::kFailed;
    to_head(proto::Exited{.rank = w.spec.rank,
                          .kind = proto::ExitKind::kSpawnFailed,
                          .code = 127,
                          .message = std::move(refused)});
    return;
  }
  auto [out_r, out_w] = make_pipe();
  auto [err_r, err_w] = make_pipe();
  opts.stdin_fd = in_r.get();  // -1: /dev/null
  opts.argv = w.spec.argv;
  opts.env = worker_environment(base, w.spec.env, job_env, token_entry_);
  w.error_file = ensure_error_file(opts.env, error_dir_, w.spec.rank);
  opts.workdir = w.spec.workdir.empty() ? setup_.workdir : w.spec.workdir;
  opts.parent_death_signal = SIGKILL;
  opts.stdout_fd = out_w.get();
  opts.stderr_fd = err_w.get();
  if (runtime_.runtime() != nullptr) runtime_.runtime()->adapt(opts);
  w.started = env_.clock.now();
  w.started_wall = std::chrono::system_clock::now();
  SpawnResult r = env_.os.spawn_in(opts, cgroup_);
  in_r.reset();  // the worker's end: EOF reaches it once the service closes its own
  for (NodeService* service : services_) service->after_spawn(w.spec.rank, r.ok());
  if (!r) {
    w.state = WorkerState::kFailed;
    to_head(proto::Exited{.rank = w.spec.rank,
                          .kind = proto::ExitKind::kSpawnFailed,
                          .code = 127,
                          .message = r.error()});
    return;
  }
  w.pid = *r;
  w.state = WorkerState::kRunning;
  guard_->watch_process_group(w.pid);
  rank_of_pid_[w.pid] = w.spec.rank;
  set_nonblocking(out_r.get(), true);
  set_nonblocking(err_r.get(), true);
  started.pid = w.pid;
  to_head(started);
  output_.watch(w.spec.rank, out_r.release(), err_r.release());
}

void Agent::on_sigchld() {
  for (const auto& [pid, status] : env_.os.reap()) {
    if (runtime_.child_exited(pid, status, phase_ == Phase::kSetup && !aborting_)) continue;
    auto it = rank_of_pid_.find(pid);
    if (it != rank_of_pid_.end()) on_worker_exit(workers_.at(it->second), status);
    // anything else is an orphan that reparented to us (we are a subreaper)
  }
  maybe_finish();
}

void Agent::on_worker_exit(Worker& w, int status) {
  w.state = WorkerState::kExited;
  output_.drain(w.spec.rank);
  for (NodeService* service : services_) service->on_worker_exit(w.spec.rank);
  proto::Exited ex{.rank = w.spec.rank, .pid = w.pid};
  if (WIFSIGNALED(status)) {
    ex.kind = proto::ExitKind::kSignaled;
    ex.signal = WTERMSIG(status);
  } else {
    ex.code = WEXITSTATUS(status);
  }
  // A worker that failed on its own (not stopped by us) may have left
  // PyTorch's account of why; the head puts it in the report.
  if ((ex.kind != proto::ExitKind::kExited || ex.code != 0) && !aborting_ &&
      !w.error_file.empty()) {
    ex.error_file_data = read_error_file(w.error_file, w.started_wall, proto::kMaxErrorFileBytes);
    if (!ex.error_file_data.empty()) ex.error_file = w.error_file;
  }
  ex.runtime_ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<milliseconds>(env_.clock.now() - w.started).count());
  to_head(ex);
}

std::size_t Agent::live_workers() const {
  std::size_t n = 0;
  for (const auto& [rank, w] : workers_) n += w.state == WorkerState::kRunning ? 1 : 0;
  return n;
}

void Agent::begin_abort(const std::string& reason, bool immediate) {
  (void)reason;
  if (!aborting_) {
    aborting_ = true;
    // Never start workers now.
    if (phase_ == Phase::kSetup || phase_ == Phase::kReady) enter(Phase::kStopping);
    signal_everything(immediate ? SIGKILL : SIGTERM);
    // Ranks stopped by a forwarded SIGTSTP would act on SIGTERM only once
    // continued (and use none of the grace): continue them now.
    if (!immediate && ranks_stopped_) {
      ranks_stopped_ = false;
      signal_everything(SIGCONT);
    }
    if (!immediate) {
      env_.clock.after(*grace_timer_, milliseconds(setup_.kill_grace_ms), [this] {
        killed_hard_ = true;
        signal_everything(SIGKILL);
      });
    } else {
      killed_hard_ = true;
    }
  } else if (immediate && !killed_hard_) {
    grace_timer_->cancel();
    killed_hard_ = true;
    signal_everything(SIGKILL);
  }
  maybe_finish();
}

// Every running worker's process group, then every other descendant
// (orphans that reparented to us, children that left their group, members of
// an exited worker's group). Never the guard. Not the group of a worker that
// was reaped: once its group is empty, its id may belong to someone else.
//
// A process gets the signal once: members of a group just signalled are not
// signalled again one by one (a second SIGTERM makes many programs, PyTorch's
// elastic agent among them, skip their clean shutdown).
void Agent::signal_everything(int sig) {
  std::vector<pid_t> groups;
  for (const auto& [rank, w] : workers_) {
    if (w.pid > 0 && w.state == WorkerState::kRunning) {
      env_.os.signal_group(w.pid, sig);
      groups.push_back(w.pid);
    }
  }
  for (pid_t p : leftovers()) {
    if (std::find(groups.begin(), groups.end(), env_.os.process_group(p)) == groups.end())
      env_.os.signal(p, sig);
  }
}

// Descendants other than the guard, and whatever is in the job's cgroup
// (there, also what left the tree: a double fork whose parent exited, setsid).
std::vector<pid_t> Agent::leftovers() {
  std::vector<pid_t> out = env_.os.descendants();
  if (!cgroup_.empty()) {
    for (pid_t p : env_.os.cgroup_members(cgroup_)) {
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    }
  }
  if (guard_) std::erase(out, guard_->pid());
  // A container's own processes go with the container (finish()).
  if (runtime_.runtime() != nullptr) {
    for (pid_t p : runtime_.runtime()->own_processes()) std::erase(out, p);
  }
  return out;
}

void Agent::maybe_finish() {
  if (phase_ == Phase::kDone || phase_ == Phase::kRelaying || live_workers() > 0) return;
  if (!shutdown_requested_ && !channel_lost_) return;
  finish();
}

// All workers are gone. Sweep what they left behind (daemonized children):
// SIGTERM, then SIGKILL after the grace period, looking every
// timing::kLeftoverPoll whether they went; the loop keeps serving meanwhile
// (node 0's store, the channel). Then report and exit.
void Agent::finish() {
  if (phase_ == Phase::kDone || sweeping_) return;
  // The node's container first: what it leaves (its monitor on its way out)
  // is then swept as any leftover.
  runtime_.teardown();
  const auto first = leftovers();
  if (first.empty() && cgroup_removed()) {
    complete();
    return;
  }
  sweeping_ = true;
  leftovers_killed_ = static_cast<std::uint32_t>(first.size());
  for (pid_t p : first) env_.os.signal(p, killed_hard_ ? SIGKILL : SIGTERM);
  sweep_deadline_ = env_.clock.now() + milliseconds(setup_.kill_grace_ms);
  env_.clock.after(*sweep_timer_, timing::kLeftoverPoll, [this] { sweep(); });
}

void Agent::sweep() {
  env_.os.reap();  // leftovers that exited are our zombies now
  const auto left = leftovers();
  if (!left.empty() && env_.clock.now() < sweep_deadline_) {
    env_.clock.after(*sweep_timer_, timing::kLeftoverPoll, [this] { sweep(); });
    return;
  }
  for (pid_t p : left) env_.os.signal(p, SIGKILL);
  if (!cgroup_removed()) {
    // What is left in the cgroup goes now, whatever it is; once it is gone
    // (cgroup.kill is not synchronous) the cgroup can be removed.
    env_.os.kill_cgroup(cgroup_);
    if (env_.clock.now() < sweep_deadline_ + timing::kReportMargin) {
      env_.clock.after(*sweep_timer_, timing::kLeftoverPoll, [this] { sweep(); });
      return;
    }
  }
  complete();
}

// Removes the job's cgroup once it is empty; true when there is none (left).
bool Agent::cgroup_removed() {
  if (cgroup_.empty()) return true;
  if (!env_.os.remove_cgroup(cgroup_)) return false;
  cgroup_.clear();
  return true;
}

void Agent::complete() {
  enter(Phase::kDone);
  sweeping_ = false;
  if (!error_dir_.empty()) env_.os.remove_dir(error_dir_);
  if (!cgroup_removed()) log("the job's cgroup " + cgroup_ + " is still in use; left behind");
  for (NodeService* service : services_) service->stop();
  grace_timer_->cancel();
  orphan_deadline_->cancel();
  sweep_timer_->cancel();
  head_grace_timer_->cancel();
  if (door_) door_->close();
  runtime_.cancel();
  if (heartbeats_) heartbeats_->stop();
  if (guard_) guard_->disarm();
  if (channel_->is_open()) {
    channel_->send(proto::Done{.leftovers_killed = leftovers_killed_});
    channel_->close_after_flush();
  } else {
    env_.io.stop();
  }
}

void Agent::handle(const proto::Abort& m) { begin_abort(m.reason, m.immediate); }

// A signal for every running rank, the job going on (--signal, or one that
// dlaunch forwards): to each worker's process group, as a stop signals it
// (the worker and the children it did not move out), once. Ranks that a
// SIGTSTP stopped are not dead: nothing here reaps a stopped worker (no
// WUNTRACED), and the agent's heartbeats do not depend on its workers.
void Agent::handle(const proto::SignalRanks& m) {
  bool any = false;
  for (const auto& [rank, w] : workers_) {
    if (w.pid > 0 && w.state == WorkerState::kRunning) {
      env_.os.signal_group(w.pid, m.signal);
      any = true;
    }
  }
  if (any && (m.signal == SIGTSTP || m.signal == SIGSTOP)) ranks_stopped_ = true;
  if (m.signal == SIGCONT) ranks_stopped_ = false;
}

void Agent::handle_shutdown() {
  shutdown_requested_ = true;
  if (live_workers() > 0) begin_abort("shutdown", false);
  maybe_finish();
}

void Agent::on_channel_closed(const std::string& reason) {
  if (phase_ == Phase::kDone) {
    // Done was sent, or could not be: a head that stopped reading (it gave
    // up waiting, or was killed) fails the write, and the channel then ends
    // when its read side does. Nothing is left to do: without this stop the
    // loop, kept alive by its signal waits, ran on forever (agents found
    // idle an hour after their SSH jobs, issue 31's SSH tests).
    env_.io.stop();
    return;
  }
  if (phase_ == Phase::kRelaying) return;  // its channel was handed over
  if (heartbeats_) heartbeats_->stop();
  if (go_headless(reason)) return;
  lose_head(reason);
}

void Agent::lose_head(const std::string& reason) {
  channel_lost_ = true;
  exit_code_ = 1;
  if (heartbeats_) heartbeats_->stop();
  if (phase_ == Phase::kRunning || live_workers() > 0) {
    log("control channel lost (" + reason + "); stopping workers");
  }
  begin_abort(reason, false);
  maybe_finish();
  if (phase_ == Phase::kDone) return;
  // Without the head nothing else can end this agent: whatever still counts
  // as running after the grace period and a margin (a worker whose exit we
  // never saw), end it anyway, so that no process of the job outlives it.
  env_.clock.after(*orphan_deadline_, milliseconds(setup_.kill_grace_ms) + timing::kOrphanMargin,
                   [this] {
                     if (phase_ == Phase::kDone) return;
                     std::string ranks;
                     for (auto& [rank, w] : workers_) {
                       if (w.state != WorkerState::kRunning) continue;
                       ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank) + " (pid " +
                                std::to_string(w.pid) + ")";
                       if (w.pid > 0) env_.os.signal_group(w.pid, SIGKILL);
                       w.state = WorkerState::kExited;
                     }
                     log("head gone and rank(s) " + ranks +
                         " still counted running after the grace period; exiting");
                     killed_hard_ = true;
                     finish();
                   });
}

namespace {
// "2.5 s", "300 s".
std::string head_grace_text(std::uint64_t ms) {
  std::string s = std::to_string(ms / 1000);
  if (ms % 1000 != 0) s += "." + std::to_string(ms % 1000 / 100);
  return s + " s";
}
}  // namespace

// --head-grace: the ranks run on without a head, for a new one to take the
// job over at the node's door (reattach.h). Not before they run (nothing
// would be lost by stopping), not while stopping, and not without the
// node's private folder, where the door is.
bool Agent::go_headless(const std::string& reason) {
  if (setup_.head_grace_ms == 0 || phase_ != Phase::kRunning || aborting_ || shutdown_requested_ ||
      error_dir_.empty() || setup_.reattach_secret.empty()) {
    return false;
  }
  door_ = std::make_unique<ReattachDoor>(
      env_.io,
      ReattachDoor::Config{.path = error_dir_ + "/" + kDoorName,
                           .job_id = setup_.job_id,
                           .node_rank = setup_.node_rank,
                           .secret = setup_.reattach_secret},
      [this](HandedChannel handed) { on_handed(std::move(handed)); },
      [](const std::string& line) { log(line); });
  if (const std::string why = door_->open(); !why.empty()) {
    log("no door for a new head (" + why + "); the ranks stop with their head");
    door_.reset();
    return false;
  }
  // The head's stdin (--stdin) ended with it: what the ranks hold is theirs.
  (void)stdin_.handle(proto::StdinEof{});
  headless_ = true;
  headless_since_ = env_.clock.now();
  head_lost_because_ = reason;
  held_.clear();
  held_bytes_ = 0;
  exited_at_loss_.clear();
  for (const auto& [rank, ex] : said_exited_) exited_at_loss_.push_back(rank);
  fences_at_loss_.clear();
  for (const auto& [seq, up] : fences_up_) fences_at_loss_.push_back(seq);
  const std::string grace = head_grace_text(setup_.head_grace_ms);
  log("control channel lost (" + reason + "); the ranks run on for up to " + grace +
      " for a new head (dlaunch attach --recover " + setup_.job_id + ")");
  env_.clock.after(*head_grace_timer_, milliseconds(setup_.head_grace_ms), [this, grace] {
    if (!headless_) return;
    headless_ = false;
    door_->close();
    held_.clear();
    held_bytes_ = 0;
    lose_head(head_lost_because_ + "; no new head within --head-grace " + grace);
  });
  return true;
}

// A new head's relay proved the job's secret and handed its channel over:
// the job goes on through it. The new head hears Resumed, every rank's
// Started, the Exited and fence parts said before the loss, then what was
// held since, in order.
void Agent::on_handed(HandedChannel handed) {
  if (!headless_) return;
  headless_ = false;
  head_grace_timer_->cancel();
  // Our own lines go where the new head's session shows them.
  if (handed.err) ::dup2(handed.err.get(), 2);
  make_channel(handed.in.release(), handed.out.release());
  channel_->prefeed(handed.unread);
  channel_->start();
  const auto headless = env_.clock.now() - headless_since_;
  const ProcessRef self = this_process();
  proto::Resumed resumed{.pid = static_cast<std::int32_t>(self.pid),
                         .start_ticks = self.start_ticks,
                         .boot_id = env_.os.boot_id(),
                         .headless_ms = static_cast<std::uint64_t>(
                             std::chrono::duration_cast<milliseconds>(headless).count()),
                         .held_bytes = held_bytes_,
                         .ready = ready_};
  // What --check's Ready carried is not the running job's.
  resumed.ready.facts.clear();
  resumed.ready.topology.clear();
  channel_->send(resumed);
  for (const auto& [rank, started] : said_started_) channel_->send(started);
  for (const int rank : exited_at_loss_) channel_->send(said_exited_.at(rank));
  for (const std::uint32_t seq : fences_at_loss_) {
    if (const auto it = fences_up_.find(seq); it != fences_up_.end()) channel_->send(it->second);
  }
  for (const auto& msg : held_) channel_->send(msg);
  log("a new head took the job over after " +
      head_grace_text(static_cast<std::uint64_t>(resumed.headless_ms)) + " without one (" +
      std::to_string(held_bytes_) + " bytes of the ranks' output held for it)");
  held_.clear();
  held_bytes_ = 0;
  // The new head as the process whose heartbeats this agent waits for.
  setup_.head_boot_id = handed.reattach.head_boot_id;
  setup_.head_pid = handed.reattach.head_pid;
  setup_.head_start_ticks = handed.reattach.head_start_ticks;
  carrier_ = {.pid = handed.relay_pid,
              .start_ticks = handed.relay_pid > 0 ? process_start_ticks(handed.relay_pid) : 0};
  start_heartbeats();
  output_.resume();
}

// This agent was started by a new head for a running job: it finds the
// job's agent of its node, hands its channel over, and waits for that agent
// to end, so that what carries the channel (the SSH session, the local
// head's child) lasts as long. Nothing of the job is this agent's.
void Agent::relay(const proto::Reattach& r) {
  auto released = channel_->release();
  if (released.read_fd < 0) {
    channel_->send(proto::Fatal{"cannot hand the channel over: it is busy"});
    return;
  }
  UniqueFd in(released.read_fd);
  UniqueFd out(released.write_fd);
  auto outcome = reattach_to_job(runtime_base_dir(), r, in.get(), out.get(), released.unread);
  if (!outcome.connection) {
    // The channel is still ours: say why, and end with it (a new channel
    // object, made once the one handling this message is left).
    std::string why =
        "cannot take job " + r.job_id + " over on " + host_name() + ": " + outcome.error;
    boost::asio::post(env_.io, [this, in = in.release(), out = out.release(), why] {
      make_channel(in, out);
      channel_->start();
      channel_->send(proto::Fatal{why});
      enter(Phase::kStopping);
      shutdown_requested_ = true;
      maybe_finish();
    });
    return;
  }
  enter(Phase::kRelaying);
  // The job's agent has its own copies now: ours would keep the stream
  // open after it ends.
  in.reset();
  out.reset();
  relayed_ = std::make_unique<boost::asio::posix::stream_descriptor>(env_.io,
                                                                     outcome.connection.release());
  relayed_->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                       [this](boost::system::error_code) {
                         enter(Phase::kDone);
                         if (guard_) guard_->disarm();
                         env_.io.stop();
                       });
}

// The head's heartbeats, from Setup on (which carries the timeout): one peer,
// the head.
void Agent::start_heartbeats() {
  heartbeats_ = std::make_unique<proto::HeartbeatMonitor>(
      env_.clock, milliseconds(setup_.heartbeat_timeout_ms),
      milliseconds(setup_.heartbeat_interval_ms), 1,
      proto::HeartbeatMonitor::Callbacks{
          .send =
              [this] {
                if (channel_->is_open()) channel_->send(proto::Heartbeat{});
              },
          .read_pending = [this](std::size_t) { channel_->read_pending(); },
          .silent =
              [this](std::size_t) {
                if (phase_ == Phase::kDone || !channel_->is_open()) return;
                channel_->close();
                on_channel_closed("no heartbeat from the head for " +
                                  std::to_string(setup_.heartbeat_timeout_ms) + " ms");
              }});
  // Late is not gone: the head's heartbeats are carried by the process that
  // started this agent (sshd, a Slurm step, the head itself) and, when the
  // head runs on this boot of this machine, by the head.
  auto& watch = heartbeats_->starvation();
  watch.set_reader([this](const ProcessRef& p) { return env_.os.run_delay_ns(p); });
  watch.watch(0, carrier_);
  if (!setup_.head_boot_id.empty() && setup_.head_boot_id == env_.os.boot_id()) {
    watch.watch(0, {.pid = setup_.head_pid, .start_ticks = setup_.head_start_ticks});
  }
  heartbeats_->start();
}

}  // namespace dlaunch::agent
