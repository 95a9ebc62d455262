// Locating hangs: every rank's stack, grouped (hang_watch.h, stacks.h).
#include "controller/hang_watch.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "controller/stacks.h"
#include "dlaunch/private_dir.h"
#include "dlaunch/process.h"
#include "dlaunch/text.h"

namespace dlaunch {

using std::chrono::milliseconds;

HangWatch::HangWatch(JobAccess& job, Clock& clock, OutputSink& sink, Config cfg)
    : job_(job),
      clock_(clock),
      sink_(sink),
      cfg_(cfg),
      stacks_timer_(clock.make_timer()),
      stall_timer_(clock.make_timer()) {}

void HangWatch::on_phase(JobPhase now) {
  switch (now) {
    case JobPhase::kRunning:
      last_activity_ = clock_.now();
      arm_stall_timer();
      break;
    case JobPhase::kAborting:
      // The job is being stopped for another cause (a failure while the
      // stacks were coming): the stacks no longer hold it back.
      stop_after_ = false;
      break;
    case JobPhase::kFinished:
      stacks_timer_->cancel();
      stall_timer_->cancel();
      break;
    default:
      break;
  }
}

void HangWatch::stop_at_timeout(RootCause cause) {
  stop_with_stacks(std::move(cause), Reason::kTimeout);
}

void HangWatch::stop_with_stacks(RootCause cause, Reason reason) {
  if (job_.cause().kind != CauseKind::kNone || !collect(reason)) {
    job_.fail(std::move(cause));
    return;
  }
  job_.record_cause(std::move(cause));
  stop_after_ = true;
}

void HangWatch::report_now() {
  // Each answer is also a file in the job's record, for `dlaunch stacks`
  // (drivers/job_commands.cpp), which sent the SIGQUIT and waits for it.
  const auto refuse = [&](const std::string& why) {
    job_.say("SIGQUIT: " + why);
    record_answer("dlaunch: job " + job_.plan().job_id + ": " + why + "\n");
  };
  if (job_.phase() != JobPhase::kRunning) {
    refuse("no job running to take stacks of");
    return;
  }
  if (collecting_) {
    job_.say("SIGQUIT: stacks are being collected already");  // that one answers
    return;
  }
  if (cfg_.stack_timeout.count() <= 0) {
    refuse("no stacks are collected with --stack-timeout 0");
    return;
  }
  job_.say("SIGQUIT: collecting every rank's stack (the job goes on)");
  if (!collect(Reason::kOnDemand)) refuse("no rank is running");
}

void HangWatch::record_answer(const std::string& text) {
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  (void)sink_.write_record_file(fmt::format("stacks-{}-{}.txt", now, ++answers_), text);
}

bool HangWatch::collect(Reason reason) {
  if (cfg_.stack_timeout.count() <= 0 || job_.phase() != JobPhase::kRunning) return false;
  const bool stopping = reason == Reason::kTimeout || reason == Reason::kStallAbort;
  // One at a time; one that stops the job replaces a report in progress
  // (the agents answer the old one at once with what they have).
  if (collecting_ && !stopping) return false;
  const JobPlan& plan = job_.plan();
  Collection c;
  c.id = ++requests_;
  c.reason = reason;
  c.asked.assign(plan.nodes.size(), false);
  c.answered.assign(plan.nodes.size(), false);
  const proto::CollectStacks req{
      .request_id = c.id, .timeout_ms = proto::ms(cfg_.stack_timeout), .python_abort = stopping};
  bool any = false;
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    if (!job_.node_reachable(i)) continue;
    const auto& ranks = plan.nodes[i].ranks;
    const bool running = std::any_of(ranks.begin(), ranks.end(),
                                     [&](const RankPlan& r) { return job_.rank_running(r.rank); });
    if (!running) continue;
    job_.send(i, req);
    c.asked[i] = true;
    any = true;
  }
  if (!any) return false;
  collecting_ = std::move(c);
  // The agents answer within the time given; allow for the link.
  clock_.after(*stacks_timer_, cfg_.stack_timeout + milliseconds(1000), [this] { complete(); });
  return true;
}

void HangWatch::on_stacks(std::size_t node, proto::Stacks&& st) {
  if (!collecting_ || st.request_id != collecting_->id || collecting_->answered[node]) return;
  collecting_->answered[node] = true;
  collecting_->got.push_back(std::move(st));
  collecting_->got_node.push_back(node);
  for (std::size_t i = 0; i < collecting_->asked.size(); ++i) {
    if (collecting_->asked[i] && !collecting_->answered[i]) return;
  }
  complete();
}

void HangWatch::end() {
  if (collecting_) complete();  // what came before the job ended
}

std::vector<std::string> HangWatch::notes() const {
  std::vector<std::string> out;
  out.reserve(damaged_.size());
  for (const auto& [rank, note] : damaged_) out.push_back(note);
  return out;
}

void HangWatch::complete() {
  if (!collecting_) return;
  const Collection c = std::move(*collecting_);
  collecting_.reset();
  stacks_timer_->cancel();
  const JobPlan& plan = job_.plan();
  std::vector<RankStackText> all;
  std::vector<std::string> notes;
  bool python_native = false;
  for (std::size_t k = 0; k < c.got.size(); ++k) {
    const auto& st = c.got[k];
    const std::string& host = plan.nodes[c.got_node[k]].host.name;
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
  for (std::size_t i = 0; i < c.asked.size(); ++i) {
    if (c.asked[i] && !c.answered[i]) {
      notes.push_back(fmt::format("{} sent no stacks within {}", job_.node_label(i),
                                  seconds_text(cfg_.stack_timeout)));
    }
  }
  const bool stopping = c.reason == Reason::kTimeout || c.reason == Reason::kStallAbort;
  // A report that stops the job gets these among its notes (Controller::run).
  if (!stopping) {
    for (const auto& [rank, note] : damaged_) notes.push_back(note);
  }
  if (python_native && !stopping) {
    notes.emplace_back(
        "Python ranks show the interpreter's native frames: their Python tracebacks are taken "
        "only when the job is stopped (--timeout, --stall-action abort)");
  }
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  const char* what = c.reason == Reason::kTimeout    ? "at --timeout"
                     : c.reason == Reason::kOnDemand ? "on SIGQUIT"
                                                     : "at a stall (--stall-timeout)";
  std::string section;
  if (!all.empty()) {
    const std::string file = write_stacks_file(
        format_full_stacks(all, fmt::format("dlaunch: stacks of job {} {}", plan.job_id, what)));
    section +=
        fmt::format("  stacks of {} rank(s) {}, identical ones together (full stacks: {}):\n",
                    all.size(), what, file);
    section += format_stack_groups(group_stacks(all), "    ");
  }
  for (const auto& n : notes) section += "    note: " + n + "\n";
  if (stopping) {
    job_.attach_stacks(std::move(section));
    if (stop_after_) {
      stop_after_ = false;
      job_.stop("job failed");
    }
    return;
  }
  const std::string report =
      fmt::format(
          "dlaunch: job {}: {}", plan.job_id,
          c.reason == Reason::kOnDemand
              ? "stacks on SIGQUIT (the job goes on)\n"
              : fmt::format(
                    "no rank wrote a line or completed a comm call for {} (--stall-timeout)\n",
                    seconds_text(cfg_.stall_timeout))) +
      section;
  job_.write_console(report);
  if (c.reason == Reason::kOnDemand) record_answer(report);
}

// DIR/<job-id>/stacks.txt with --output-dir (the folder OutputSink made);
// else the job's record (jobs/registry.h); else a fresh private folder
// (mkdtemp, 0700) in the runtime folder, kept for the user to read. The file is new (O_EXCL,
// O_NOFOLLOW, 0600); later collections of the same job write stacks.2.txt, ... Returns its path, or
// why it was not written.
std::string HangWatch::write_stacks_file(const std::string& text) {
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
      stacks_dir_ =
          make_private_dir(runtime_base_dir(), "dlaunch-stacks-" + job_.plan().job_id + "-");
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

void HangWatch::on_activity() {
  last_activity_ = clock_.now();
  if (stalled_) {
    stalled_ = false;
    arm_stall_timer();
  }
}

// A rank damaged the progress memory its agent gave it (agent/progress_board.h):
// its doing, said at once with its rank, and in every report from then on; its
// comm calls count no more, so its stalls are judged by its output alone.
void HangWatch::on_progress_damaged(std::size_t node, const proto::ProgressDamaged& m) {
  const auto& ranks = job_.plan().nodes[node].ranks;
  const bool its =
      std::any_of(ranks.begin(), ranks.end(), [&](auto& r) { return r.rank == m.rank; });
  if (!its || damaged_.contains(m.rank)) return;
  const std::string note = fmt::format(
      "rank {} on {} {}: its comm calls no longer count as activity for --stall-timeout", m.rank,
      job_.node_label(node), printable(m.what));
  damaged_.emplace(m.rank, note);
  job_.say(note);
}

// Runs while output flows: it wakes at the last line's time plus the limit,
// and stops once it has reported a stall (on_activity starts it again).
void HangWatch::arm_stall_timer() {
  if (cfg_.stall_timeout.count() <= 0) return;
  stall_timer_->expires_at(last_activity_ + cfg_.stall_timeout, [this] {
    if (job_.phase() != JobPhase::kRunning) return;
    if (clock_.now() - last_activity_ < cfg_.stall_timeout) {
      arm_stall_timer();
      return;
    }
    stalled_ = true;
    const std::string msg = fmt::format("no rank wrote a line or completed a comm call for {}",
                                        seconds_text(cfg_.stall_timeout));
    if (cfg_.stall_abort) {
      job_.say(msg + " (--stall-timeout); collecting every rank's stack, then stopping the job");
      stop_with_stacks({.kind = CauseKind::kStall, .message = msg + " (--stall-action abort)"},
                       Reason::kStallAbort);
    } else if (!collecting_) {
      job_.say(msg + " (--stall-timeout); collecting every rank's stack");
      if (!collect(Reason::kStall)) job_.say("no stacks to collect");
    }
  });
}

}  // namespace dlaunch
