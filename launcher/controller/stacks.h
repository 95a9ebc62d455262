// Stacks of a job's ranks, as the agents send them (proto::Stacks), turned
// into the short grouped summary of the report and the full text of
// stacks.txt. Pure functions; the controller (controller/hang_watch.h) collects.
//
// Grouping: ranks whose stacks are the same once normalised share a line,
// the odd ones out (the smallest groups) first:
//
//   rank 2: stuck_in_data_loader (data.py:88) <- load (data.py:12) <- ...
//   ranks 0,1,3 (3 ranks): wait_for_gradients (train.py:41) <- step (train.py:60) <- ...
//
// Normalised: a Python rank (faulthandler's dump) by its current thread,
// "function (file:line)" innermost first, file without its folder; a native
// rank by the function names of its main thread (the thread whose id is the
// pid, else the first), without addresses, arguments, symbol versions or
// thread ids. The summary shows the first kSummaryFrames frames; for native
// stacks glibc's internal names ("__nanosleep", "_start") are left out of it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dlaunch {

inline constexpr std::size_t kSummaryFrames = 4;

struct RankStackText {
  int rank = 0;
  std::string node;  // the node's name
  int pid = 0;
  std::string tool;    // what took the native stack ("eu-stack", "gdb"); empty: none
  std::string native;  // the tool's output
  std::string python;  // faulthandler's dump
  std::string error;   // why there is no native stack
};

// The main thread's frames of eu-stack or gdb output: function names,
// innermost first ("??" for a frame without one).
std::vector<std::string> native_frames(std::string_view text, int pid);
// The current thread's frames of a faulthandler dump: "function (file:line)",
// innermost first.
std::vector<std::string> python_frames(std::string_view dump);

struct StackGroup {
  std::vector<int> ranks;  // ascending
  std::string summary;     // "f (a.py:1) <- g (a.py:2) <- ..." or "no stack: why"
};
// Groups of identical stacks, smallest groups first (then by first rank).
std::vector<StackGroup> group_stacks(const std::vector<RankStackText>& stacks);

// "0,1,3" with runs of three or more as ranges: "0-3,7".
std::string rank_list(const std::vector<int>& ranks);

// The report's lines, each indented by `indent`: one per group.
std::string format_stack_groups(const std::vector<StackGroup>& groups, const std::string& indent);

// Every rank's stacks in full, for stacks.txt.
std::string format_full_stacks(const std::vector<RankStackText>& stacks, const std::string& title);

}  // namespace dlaunch
