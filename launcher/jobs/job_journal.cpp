#include "jobs/job_journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "dlaunch/error.h"
#include "dlaunch/process.h"
#include "dlaunch/unique_fd.h"
#include "hostfile/hostfile.h"

namespace dlaunch {

namespace {

// The report's headline, without "dlaunch: ".
std::string headline(const RootCause& cause, const std::string& job_id) {
  if (cause.kind == CauseKind::kNone) return "succeeded";
  std::string text = format_report(job_id, cause, 0);
  if (const auto nl = text.find('\n'); nl != std::string::npos) text.resize(nl);
  if (text.rfind("dlaunch: ", 0) == 0) text.erase(0, 9);
  return text;
}

std::vector<EventField> plan_fields(const JobPlan& plan) {
  std::string hosts;
  for (std::size_t k = 0; k < plan.nodes.size() && k < kListedNodes; ++k) {
    hosts += (hosts.empty() ? "" : " ") + plan.nodes[k].host.name;
  }
  std::string command;
  for (const auto& w : plan.command) command += (command.empty() ? "" : " ") + w;
  return {{"nodes", static_cast<long long>(plan.nodes.size())},
          {"world_size", static_cast<long long>(plan.world_size)},
          {"hosts", hosts},
          {"command", command}};
}

}  // namespace

void JobJournal::add_events_arg(const std::string& events_arg, Console& console) {
  if (events_arg == "-") {
    events_.add_writer([&console](std::string_view l) { console.write(false, l); });
  } else if (!events_arg.empty()) {
    UniqueFd fd(::open(events_arg.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!fd) {
      throw InputError({"--events"}, "",
                       fmt::format("cannot open '{}': {}", events_arg, std::strerror(errno)));
    }
    const auto target = console.add_open_file(fd.get(), "--events " + events_arg);
    events_.add_writer([&console, target](std::string_view l) { console.write_file(target, l); });
  }
}

void JobJournal::add_record_events(Console& console) {
  UniqueFd fd(::open(record_->events_path().c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) {
    throw Error(ErrorKind::kEnvironment,
                fmt::format("cannot open '{}': {}", record_->events_path(), std::strerror(errno)));
  }
  const auto target = console.add_open_file(fd.get(), record_->events_path());
  events_.add_writer([&console, target](std::string_view l) { console.write_file(target, l); });
}

JobJournal::JobJournal(const JobPlan& plan, const std::vector<std::string>& argv,
                       const std::string& events_arg, OutputSink& sink)
    : events_(plan.job_id) {
  Console& console = sink.console();
  add_events_arg(events_arg, console);
  try {
    const std::string dir = jobs_dir(true);
    (void)prune_jobs_when_due(dir);
    JobStart s{.id = plan.job_id,
               .argv = argv,
               .cwd = std::filesystem::current_path().string(),
               .nodes = static_cast<int>(plan.nodes.size()),
               .ranks = plan.world_size,
               .node_names = {},
               .started_ms = unix_now_ms()};
    set_head_to_this_process(s);
    for (std::size_t k = 0; k < plan.nodes.size() && k < kListedNodes; ++k) {
      s.node_names.push_back(plan.nodes[k].host.name);
    }
    record_ = JobRecord::create(dir, s);
    add_record_events(console);
  } catch (const Error& e) {
    write_all(2, fmt::format("dlaunch: note: this job has no record ({}); dlaunch ps and "
                             "dlaunch status will not know it\n",
                             e.what()));
  }
}

JobJournal::JobJournal(const JobEntry& entry, const JobPlan& plan, const std::string& events_arg,
                       OutputSink& sink)
    : events_(plan.job_id) {
  Console& console = sink.console();
  add_events_arg(events_arg, console);
  JobStart s = entry.start;
  set_head_to_this_process(s);
  // A record the new head cannot write is no take-over: it is the job's.
  record_ = JobRecord::reopen(entry, s);
  add_record_events(console);
}

void JobJournal::started(const JobPlan& plan) { events_.emit("start", plan_fields(plan)); }

void JobJournal::recovered(int attempt, const JobPlan& plan) {
  events_.set_attempt(attempt);
  auto fields = plan_fields(plan);
  fields.push_back({"head_pid", static_cast<long long>(::getpid())});
  events_.emit("head_recovered", fields);
}

void JobJournal::restarting(int attempt, const std::string& why, const JobPlan& plan) {
  events_.set_attempt(attempt);
  auto fields = plan_fields(plan);
  fields.push_back({"why", why});
  events_.emit("restart", fields);
}

void JobJournal::ended(int exit_status, const RootCause& cause, int attempts,
                       const std::string& job_id) {
  const std::string summary = headline(cause, job_id);
  events_.emit("end", {{"exit_status", static_cast<long long>(exit_status)},
                       {"summary", summary},
                       {"attempts", static_cast<long long>(attempts)}});
  if (!record_) return;
  try {
    record_->finish(exit_status, summary, attempts);
  } catch (const Error& e) {
    write_all(2, fmt::format("dlaunch: note: the job's record is incomplete ({})\n", e.what()));
  }
}

}  // namespace dlaunch
