// The line `dlaunch attach` keeps at the bottom of a terminal: where a
// running job is, tallied from its events (docs/events.md) as they come.
//
//   attempt 0: 2/2 nodes ready, 4/4 ranks running · 5m12s
//   attempt 1: 1/2 nodes ready, 0/4 ranks running, 1 node lost · 7m40s
//
// A new attempt (a restart) starts the counts again, with its own numbers
// of nodes and ranks. Lines it cannot read are passed over.
// Thread safety: none.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

namespace dlaunch {

class ProgressLine {
 public:
  // The job's nodes and ranks at its start (its record's).
  ProgressLine(int nodes, int ranks) : nodes_(nodes), ranks_(ranks) {}

  // One line of the events file.
  void add(std::string_view event_line);

  // The line, without a newline; `up_s`: seconds since the job started
  // (shown when not negative).
  std::string text(std::int64_t up_s) const;

 private:
  int nodes_ = 0;
  int ranks_ = 0;
  int attempt_ = 0;
  int ready_ = 0;
  int started_ = 0;
  int exited_ = 0;
  int failed_ = 0;
  int lost_ = 0;
  std::set<int> pulling_;  // nodes pulling their container image
};

}  // namespace dlaunch
