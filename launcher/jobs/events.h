// The job's events as JSON Lines (docs/events.md): one object per line,
// written to the job's record (jobs/registry.h) and to --events FILE.
//
// Every line has the same leading keys: "v" (the schema version, 1), "time"
// (UTC, RFC 3339 with milliseconds), "job" (the job id), "attempt" (0 for
// the first run, +1 per restart) and "type"; the type's own keys follow.
// Keys are never renamed or given another meaning within a version; new keys
// may be added. Human narration stays on stderr: nothing here is printed.
//
// EventLog only formats: where the lines go is given as writers, so that the
// head's loop never waits on a disk (main.cpp hands it the console's
// FileWriter, whose thread does the writing).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "jobs/event_field.h"
#include "jobs/job_observer.h"

namespace dlaunch {

inline constexpr int kEventSchemaVersion = 1;

// The job's events come to it as an observer's (jobs/job_observer.h): the
// record is one of the job's observers.
class EventLog final : public JobObserver {
 public:
  using Writer = std::function<void(std::string_view line)>;

  explicit EventLog(std::string job_id) : job_id_(std::move(job_id)) {}

  void add_writer(Writer w) { writers_.push_back(std::move(w)); }
  bool active() const { return !writers_.empty(); }
  void set_attempt(int attempt) { attempt_ = attempt; }

  // One event now: its line goes to every writer.
  void emit(std::string_view type, const std::vector<EventField>& fields = {});
  void on_event(std::string_view type, const std::vector<EventField>& fields) override {
    emit(type, fields);
  }

  // The line of an event at `unix_ms` (for tests), with its '\n'.
  std::string line(std::int64_t unix_ms, std::string_view type,
                   const std::vector<EventField>& fields) const;

 private:
  std::string job_id_;
  int attempt_ = 0;
  std::vector<Writer> writers_;
};

// `s` as a JSON string, quotes included: control characters escaped, bytes
// that are not UTF-8 replaced by U+FFFD (a rank's message may be anything).
std::string json_quote(std::string_view s);

// A time as RFC 3339 UTC with milliseconds: 2026-11-26T13:47:05.123Z.
std::string rfc3339_ms(std::int64_t unix_ms);

std::int64_t unix_now_ms();

}  // namespace dlaunch
