// Locating hangs: every rank's stack, grouped (controller/stacks.h).
//
// Three occasions: --timeout (the cause is recorded at once, and Abort goes
// out once the stacks are in, or after --stack-timeout), SIGQUIT (a report
// on stderr, the job goes on) and --stall-timeout (no rank wrote a line, and
// none completed a comm call, for that long: a report, once per stall, or
// with --stall-action abort the job is stopped like at --timeout, exit
// kStallExitStatus). The agents send Progress when their ranks' comm
// counters moved (agent/progress_board.h).
//
// Why SIGQUIT: it is the thread-dump signal of the JVM (Ctrl-\ in a
// terminal), and nothing else of dlaunch's uses it. SIGUSR1/SIGUSR2 are
// forwarded to the ranks (mpirun's convention; --signal USR1@S warns them
// before a time limit), so they cannot mean "show me the stacks" here.
//
// Python tracebacks cost the rank its life (faulthandler prints them on
// SIGABRT), so they are taken only when the job is being stopped anyway;
// SIGQUIT and a stall report show the interpreter's native frames.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "controller/controller.h"
#include "controller/stacks.h"
#include "dlaunch/private_dir.h"
#include "dlaunch/process.h"
#include "dlaunch/text.h"

namespace dlaunch {

using std::chrono::milliseconds;

namespace {

std::string seconds_text(milliseconds d) {
  return fmt::format("{:.1f} s", static_cast<double>(d.count()) / 1000.0);
}

}  // namespace

// The cause is the job's from now on (what fails meanwhile is a
// consequence), but nothing is stopped until every rank's stack is in.
void Controller::stop_with_stacks(RootCause cause, StackReason reason) {
  if (cause_.kind != CauseKind::kNone || !collect_stacks(reason)) {
    fail(std::move(cause));
    return;
  }
  record_cause(std::move(cause));
  abort_after_stacks_ = true;
}

void Controller::report_stacks_now() {
  progress_.clear();
  // Each answer is also a file in the job's record, for `dlaunch stacks`
  // (drivers/job_commands.cpp), which sent the SIGQUIT and waits for it.
  const auto refuse = [&](const std::string& why) {
    say("SIGQUIT: " + why);
    record_stacks_answer("dlaunch: job " + plan_.job_id + ": " + why + "\n");
  };
  if (phase_ != Phase::kRunning) {
    refuse("no job running to take stacks of");
    return;
  }
  if (collecting_) {
    say("SIGQUIT: stacks are being collected already");  // that one answers
    return;
  }
  if (cfg_.stack_timeout.count() <= 0) {
    refuse("no stacks are collected with --stack-timeout 0");
    return;
  }
  say("SIGQUIT: collecting every rank's stack (the job goes on)");
  if (!collect_stacks(StackReason::kOnDemand)) refuse("no rank is running");
}

void Controller::record_stacks_answer(const std::string& text) {
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  (void)sink_.write_record_file(fmt::format("stacks-{}-{}.txt", now, ++stacks_answers_), text);
}

bool Controller::collect_stacks(StackReason reason) {
  if (cfg_.stack_timeout.count() <= 0 || phase_ != Phase::kRunning) return false;
  const bool stopping = reason == StackReason::kTimeout || reason == StackReason::kStallAbort;
  // One at a time; one that stops the job replaces a report in progress
  // (the agents answer the old one at once with what they have).
  if (collecting_ && !stopping) return false;
  StackCollection c;
  c.id = ++stack_requests_;
  c.reason = reason;
  c.asked.assign(nodes_.size(), false);
  c.answered.assign(nodes_.size(), false);
  const proto::CollectStacks req{
      .request_id = c.id, .timeout_ms = proto::ms(cfg_.stack_timeout), .python_abort = stopping};
  bool any = false;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    if (!n.link || !n.link->is_open() || !n.life.said_hello() || n.life.done()) continue;
    const bool running = std::any_of(n.plan->ranks.begin(), n.plan->ranks.end(), [&](auto& r) {
      const auto& s = ranks_[static_cast<std::size_t>(r.rank)];
      return s.started && !s.exited;
    });
    if (!running) continue;
    n.link->send(req);
    c.asked[i] = true;
    any = true;
  }
  if (!any) return false;
  collecting_ = std::move(c);
  // The agents answer within the time given; allow for the link.
  env_.clock.after(*stacks_timer_, cfg_.stack_timeout + milliseconds(1000),
                   [this] { stacks_complete(); });
  return true;
}

void Controller::on_stacks(std::size_t node, proto::Stacks&& st) {
  if (!collecting_ || st.request_id != collecting_->id || collecting_->answered[node]) return;
  collecting_->answered[node] = true;
  collecting_->got.push_back(std::move(st));
  collecting_->got_node.push_back(node);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (collecting_->asked[i] && !collecting_->answered[i]) return;
  }
  stacks_complete();
}

void Controller::stacks_complete() {
  if (!collecting_) return;
  const StackCollection c = std::move(*collecting_);
  collecting_.reset();
  stacks_timer_->cancel();
  std::vector<RankStackText> all;
  std::vector<std::string> notes;
  bool python_native = false;
  for (std::size_t k = 0; k < c.got.size(); ++k) {
    const auto& st = c.got[k];
    const std::string& host = nodes_[c.got_node[k]].plan->host.name;
    if (st.tool.empty() && !st.ranks.empty()) {
      notes.push_back(
          fmt::format("no stack tool on node {}: install elfutils (eu-stack) or gdb", host));
    }
    for (const auto& r : st.ranks) {
      RankStackText t{.rank = r.rank,
                      .node = host,
                      .pid = r.pid,
                      .tool = st.tool,
                      .native = r.native,
                      .python = r.python,
                      .error = st.tool.empty() ? std::string("no stack tool") : r.error};
      python_native =
          python_native || (r.python.empty() && r.native.find("_PyEval") != r.native.npos);
      all.push_back(std::move(t));
    }
  }
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (c.asked[i] && !c.answered[i]) {
      notes.push_back(fmt::format("{} sent no stacks within {}", node_label(i),
                                  seconds_text(cfg_.stack_timeout)));
    }
  }
  const bool stopping = c.reason == StackReason::kTimeout || c.reason == StackReason::kStallAbort;
  // A report that stops the job gets these among its notes (Controller::run).
  if (!stopping) {
    for (const auto& [rank, note] : progress_damaged_) notes.push_back(note);
  }
  if (python_native && !stopping) {
    notes.emplace_back(
        "Python ranks show the interpreter's native frames: their Python tracebacks are taken "
        "only when the job is stopped (--timeout, --stall-action abort)");
  }
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  const char* what = c.reason == StackReason::kTimeout    ? "at --timeout"
                     : c.reason == StackReason::kOnDemand ? "on SIGQUIT"
                                                          : "at a stall (--stall-timeout)";
  std::string section;
  if (!all.empty()) {
    const std::string file = write_stacks_file(
        format_full_stacks(all, fmt::format("dlaunch: stacks of job {} {}", plan_.job_id, what)));
    section +=
        fmt::format("  stacks of {} rank(s) {}, identical ones together (full stacks: {}):\n",
                    all.size(), what, file);
    section += format_stack_groups(group_stacks(all), "    ");
  }
  for (const auto& n : notes) section += "    note: " + n + "\n";
  if (stopping) {
    cause_.stacks = section;
    if (abort_after_stacks_) {
      abort_after_stacks_ = false;
      abort_all("job failed", false);
    }
    return;
  }
  progress_.clear();
  const std::string report =
      fmt::format(
          "dlaunch: job {}: {}", plan_.job_id,
          c.reason == StackReason::kOnDemand
              ? "stacks on SIGQUIT (the job goes on)\n"
              : fmt::format(
                    "no rank wrote a line or completed a comm call for {} (--stall-timeout)\n",
                    seconds_text(cfg_.stall_timeout))) +
      section;
  sink_.console().write(true, report);
  if (c.reason == StackReason::kOnDemand) record_stacks_answer(report);
}

// DIR/<job-id>/stacks.txt with --output-dir (the folder OutputSink made);
// else the job's record (jobs/registry.h); else a fresh private folder
// (mkdtemp, 0700) in the runtime folder, kept for the user to read. The file is new (O_EXCL,
// O_NOFOLLOW, 0600); later collections of the same job write stacks.2.txt, ... Returns its path, or
// why it was not written.
std::string Controller::write_stacks_file(const std::string& text) {
  ++stacks_files_;
  const std::string name =
      stacks_files_ == 1 ? std::string("stacks.txt") : fmt::format("stacks.{}.txt", stacks_files_);
  // In the output folder, the console's FileWriter makes and writes it: an
  // --output-dir on a disk that stopped answering holds its thread, not the
  // loop. A failure is said on stderr when it happens.
  if (const auto file = sink_.add_job_file(name, 0600)) {
    sink_.console().write_file(*file, text);
    return sink_.output_path(name);
  }
  if (sink_.write_record_file(name, text)) return sink_.record_path(name);
  if (stacks_dir_.empty()) {
    try {
      stacks_dir_ = make_private_dir(runtime_base_dir(), "dlaunch-stacks-" + plan_.job_id + "-");
    } catch (const PrivateDirError& e) {
      return std::string("not written: ") + e.what();
    }
  }
  const std::string path = stacks_dir_ + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fmt::format("not written: {}: {}", path, std::strerror(errno));
  const bool ok = write_all(fd, text);
  ::close(fd);
  return ok ? path : fmt::format("not written in full: {}", path);
}

void Controller::on_activity_seen() {
  last_output_ = env_.clock.now();
  if (stalled_) {
    stalled_ = false;
    arm_stall_timer();
  }
}

// A rank damaged the progress memory its agent gave it (agent/progress_board.h):
// its doing, said at once with its rank, and in every report from then on; its
// comm calls count no more, so its stalls are judged by its output alone.
void Controller::on_progress_damaged(std::size_t node, const proto::ProgressDamaged& m) {
  const auto& ranks = nodes_[node].plan->ranks;
  const bool its =
      std::any_of(ranks.begin(), ranks.end(), [&](auto& r) { return r.rank == m.rank; });
  if (!its || progress_damaged_.contains(m.rank)) return;
  const std::string note = fmt::format(
      "rank {} on {} {}: its comm calls no longer count as activity for --stall-timeout", m.rank,
      node_label(node), printable(m.what));
  progress_damaged_.emplace(m.rank, note);
  say(note);
}

// Runs while output flows: it wakes at the last line's time plus the limit,
// and stops once it has reported a stall (on_activity_seen starts it again).
void Controller::arm_stall_timer() {
  if (cfg_.stall_timeout.count() <= 0) return;
  stall_timer_->expires_at(last_output_ + cfg_.stall_timeout, [this] {
    if (phase_ != Phase::kRunning) return;
    if (env_.clock.now() - last_output_ < cfg_.stall_timeout) {
      arm_stall_timer();
      return;
    }
    stalled_ = true;
    const std::string msg = fmt::format("no rank wrote a line or completed a comm call for {}",
                                        seconds_text(cfg_.stall_timeout));
    if (cfg_.stall_abort) {
      say(msg + " (--stall-timeout); collecting every rank's stack, then stopping the job");
      stop_with_stacks({.kind = CauseKind::kStall, .message = msg + " (--stall-action abort)"},
                       StackReason::kStallAbort);
    } else if (!collecting_) {
      say(msg + " (--stall-timeout); collecting every rank's stack");
      if (!collect_stacks(StackReason::kStall)) say("no stacks to collect");
    }
  });
}

}  // namespace dlaunch
