// What the head keeps of a job beyond its terminal: its record in the
// registry (jobs/registry.h) and its events (jobs/events.h), written to the
// record and to --events FILE|- through the console's FileWriter (never
// blocking the loop on a disk).
//
// A record that cannot be made (a read-only home, a folder another user
// owns) does not stop the job: dlaunch says so once and runs without one.
// A --events file that cannot be opened does: it is the user's input (exit 2,
// before anything starts).
#pragma once

#include <optional>
#include <string>

#include "jobs/events.h"
#include "jobs/registry.h"
#include "jobs/report.h"
#include "output/output_sink.h"
#include "plan/plan.h"

namespace dlaunch {

class JobJournal {
 public:
  // argv: dlaunch's own command line, as the record shows it.
  JobJournal(const JobPlan& plan, const std::vector<std::string>& argv,
             const std::string& events_arg, OutputSink& sink);
  // A new head takes over the job of `entry` (dlaunch attach --recover): its
  // record again, with this process as its head, and its events appended.
  JobJournal(const JobEntry& entry, const JobPlan& plan, const std::string& events_arg,
             OutputSink& sink);

  EventLog& events() { return events_; }
  const std::optional<JobRecord>& record() const { return record_; }

  // The job's first start: the "start" event.
  void started(const JobPlan& plan);
  // The job starts again (attempt counts from 0): the "restart" event.
  void restarting(int attempt, const std::string& why, const JobPlan& plan);
  // A new head took attempt `attempt` over: the "head_recovered" event.
  void recovered(int attempt, const JobPlan& plan);
  // The end: the "end" event and the record's result.
  void ended(int exit_status, const RootCause& cause, int attempts, const std::string& job_id);

 private:
  void add_events_arg(const std::string& events_arg, Console& console);
  void add_record_events(Console& console);
  EventLog events_;
  std::optional<JobRecord> record_;
};

}  // namespace dlaunch
