// The job registry: every job started from this head leaves a record in the
// user's state directory, $XDG_STATE_HOME/dlaunch/jobs (an absolute
// XDG_STATE_HOME; else $HOME/.local/state/dlaunch/jobs, $HOME from the
// passwd entry when unset), that `dlaunch ps` and `dlaunch status` read.
//
//   jobs/<name>/job.json      what was started: id, command line, folder,
//                             head host and pid, nodes, ranks, start time
//   jobs/<name>/events.jsonl  its events (jobs/events.h, docs/events.md)
//   jobs/<name>/result.json   how it ended (absent while it runs, and when
//                             the head died without saying)
//   jobs/<name>/output/       each rank's output per attempt (OutputSink)
//   jobs/<name>/stacks*.txt   stacks reports (controller/hang_watch.h)
//   jobs/<name>/takeover.json with --head-grace: what a new head needs to
//                             take the job over (the job's secret, the
//                             attempt, its hosts), rewritten at each attempt
//   jobs/<name>/head.log      a detached head's own lines (head.log.N: those
//                             of the heads before a take-over)
//
// <name> is the job id, with "-2", "-3", ... when --job-id was used before.
// The folders are the user's own: dlaunch/ and jobs/ are made 0700 and
// refused when another user owns them, or when group or others may write
// to them or read them (a record holds command lines). A record is kept
// until it is pruned: ended records past kKeepDays days, the oldest ended
// ones past kKeepRecords records, and the oldest ended ones while the ended
// records together hold more than kKeepBytes (the newest ended one stays,
// whatever its size).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dlaunch {

struct JobStart {
  std::string id;
  std::vector<std::string> argv;  // dlaunch's own command line
  std::string cwd;
  std::string head_host;
  long head_pid = 0;
  unsigned long long head_start_ticks = 0;  // /proc/<pid>/stat's starttime
  int nodes = 0;
  int ranks = 0;
  std::vector<std::string> node_names;  // at most kListedNodes
  std::int64_t started_ms = 0;          // Unix time
};

// What a record says now.
struct JobEntry {
  std::string name;  // the record's folder name, what the verbs take
  std::string dir;
  JobStart start;
  // "running" (its head is alive), "ended", or "lost" (no head and no result:
  // it was killed, or its machine went down).
  std::string state;
  std::optional<int> exit_status;
  std::int64_t ended_ms = 0;
  std::string summary;  // the report's headline, "succeeded" when none
  int attempts = 0;     // restarts + 1, when ended
};

inline constexpr int kKeepDays = 30;
inline constexpr std::size_t kKeepRecords = 500;
// 8 GiB: the ranks' output of a few large jobs at the default --log-size.
inline constexpr std::uint64_t kKeepBytes = std::uint64_t{8} << 30;
inline constexpr std::size_t kListedNodes = 64;

// The jobs folder, made as described above when `create` (else it may not
// be there yet: no job was recorded); throws Error
// (kEnvironment) naming the folder and what is wrong with it.
std::string jobs_dir(bool create);

// What a new head needs to take a running job over (takeover.json,
// docs/events.md "A job that survives its head"): the job's secret (what
// its agents ask a new head to prove), the attempt that runs and the
// restarts spent before it, its hosts in node order, and when it started.
struct Takeover {
  std::string secret;
  int attempt = 0;
  int restarts = 0;
  std::vector<std::string> hosts;
  std::int64_t started_ms = 0;
};

class JobRecord {
 public:
  // Makes the job's folder and writes job.json. Throws Error.
  static JobRecord create(const std::string& jobs_dir, const JobStart& start);
  // The record of an existing job (a new head takes it over): job.json is
  // written again with `start` (its head now this one). Throws Error.
  static JobRecord reopen(const JobEntry& entry, const JobStart& start);
  // takeover.json, written whole (0600). Throws Error.
  void write_takeover(const Takeover& t) const;

  const std::string& dir() const { return dir_; }
  const std::string& name() const { return name_; }
  std::string events_path() const { return dir_ + "/events.jsonl"; }
  // result.json, written whole (a temporary file renamed over it).
  void finish(int exit_status, const std::string& summary, int attempts) const;

 private:
  std::string dir_;
  std::string name_;
};

// The records in `jobs_dir`, newest first. Folders that are not records
// (no readable job.json) are left out.
std::vector<JobEntry> list_jobs(const std::string& jobs_dir);

// The record `name` names: a job id (its newest record), a record's name
// (<id>-2, ...; <id>-1 for the first of a reused id), or "last" (the newest
// record). Throws Error (kInput) when none does.
JobEntry find_job(const std::string& jobs_dir, const std::string& name);

// What prune_jobs keeps (the limits above; tests give smaller ones).
struct KeepLimits {
  int days = kKeepDays;
  std::size_t records = kKeepRecords;
  std::uint64_t bytes = kKeepBytes;
};
// Removes ended and lost records past the limits; never a running one.
void prune_jobs(const std::string& jobs_dir, const KeepLimits& keep = {});

// How often a job's start prunes: pruning reads every record (its job.json,
// and the size of each of its files), about 0.1 s of CPU at 500 records, too
// much for each start of a CI's stream of short jobs. A start prunes when the
// last prune (jobs/.pruned's time) is older than `every`, or when the folder
// holds more than `records` + `slack` entries (counted by name, without
// reading them).
struct PruneCadence {
  std::chrono::seconds every{600};
  std::size_t slack = 50;
};
// prune_jobs() when it is due by `cadence`; says whether it pruned.
bool prune_jobs_when_due(const std::string& jobs_dir, const KeepLimits& keep = {},
                         const PruneCadence& cadence = {});

// The record's takeover.json; nullopt when it has none (a job started
// without --head-grace) or it cannot be read.
std::optional<Takeover> read_takeover(const std::string& record_dir);

// A record as one JSON object (ps --json, status --json).
std::string job_json(const JobEntry& e);

// Sets `start`'s head to this process on this machine (host, pid and start
// time): what tells `running` from `lost` later.
void set_head_to_this_process(JobStart& start);

}  // namespace dlaunch
