// JobObserver: what a job tells those who watch it. The job (the head's
// Controller) says each thing once, to one list of observers; where it goes
// is each observer's business:
//
//   the console (controller/console_observer.h)   dlaunch's lines, the
//       progress line and the final report on stderr;
//   the job's record (EventLog, jobs/events.h)    the events, as JSON Lines;
//   per-node mode (drivers/pernode.cpp)           the root cause, told to
//       the other launchers at once;
//   --check (check/preflight.cpp)                 image pulls, said on a
//       console that is otherwise muted.
//
// An attach client and a job log are the next (docs/architecture.md). Every
// call comes on the job's loop: an observer must not block it (the console
// queues, the record's writers hand lines to a thread). The ranks' own
// output is not here: it goes through the OutputSink, which holds the agents
// back when the console is behind.
#pragma once

#include <string_view>
#include <vector>

#include "jobs/event_field.h"
#include "jobs/report.h"

namespace dlaunch {

class JobObserver {
 public:
  virtual ~JobObserver() = default;

  // dlaunch's own text for the user, whole lines with their '\n', in order
  // with the ranks' output: its "dlaunch: " lines, --report-bindings, the
  // stacks of a hang.
  virtual void on_text(std::string_view /*text*/) {}
  // The status line while a job starts (hosts connected, agents ready, ranks
  // running). Empty: the line goes (output follows, or the job runs).
  virtual void on_progress(std::string_view /*line*/) {}
  // A line worth saying even where the console is muted (--check, whose
  // table is its output): a node pulling its image. No "dlaunch: ", no '\n'.
  virtual void on_notice(std::string_view /*line*/) {}
  // An event of the job's record (jobs/events.h): nodes ready and lost,
  // ranks started and exited, signals, image pulls.
  virtual void on_event(std::string_view /*type*/, const std::vector<EventField>& /*fields*/) {}
  // The job's root cause, once, when it is first known.
  virtual void on_cause(const RootCause& /*cause*/) {}
  // The final report (jobs/report.h's format_report), when the job failed:
  // the last thing the job says.
  virtual void on_report(std::string_view /*report*/) {}

 protected:
  JobObserver() = default;
  JobObserver(const JobObserver&) = default;
  JobObserver& operator=(const JobObserver&) = default;
};

// Several observers as one, told in the order they were added.
class ObserverList final : public JobObserver {
 public:
  void add(JobObserver* o) {
    if (o != nullptr) list_.push_back(o);
  }
  void on_text(std::string_view text) override {
    for (auto* o : list_) o->on_text(text);
  }
  void on_progress(std::string_view line) override {
    for (auto* o : list_) o->on_progress(line);
  }
  void on_notice(std::string_view line) override {
    for (auto* o : list_) o->on_notice(line);
  }
  void on_event(std::string_view type, const std::vector<EventField>& fields) override {
    for (auto* o : list_) o->on_event(type, fields);
  }
  void on_cause(const RootCause& cause) override {
    for (auto* o : list_) o->on_cause(cause);
  }
  void on_report(std::string_view report) override {
    for (auto* o : list_) o->on_report(report);
  }

 private:
  std::vector<JobObserver*> list_;
};

}  // namespace dlaunch
