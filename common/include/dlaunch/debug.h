#pragma once
// DLAUNCH_DEBUG: a comma-separated list of topics ("ssh,stats").
//   ssh    each SSH connection's stages with their times (launcher)
//   stats  one line of resource use at exit: dlaunch (start-up milestones,
//          CPU time, peak RSS) and each local agent; read by bench/
//   net    how MASTER_ADDR was found: node 0's addresses in the order tried,
//          which of them each other node reached (and by which interface),
//          the choice (launcher)
#include <string>
#include <string_view>

namespace dlaunch {

// True when `topic` is one of the comma-separated words in `value`.
bool debug_topic_in(std::string_view value, std::string_view topic);

// True when DLAUNCH_DEBUG (read once) names `topic`.
bool debug_enabled(std::string_view topic);

// This process's own resource use so far, as "cpu_user_s=U cpu_sys_s=S
// maxrss_kib=M": CPU from getrusage(RUSAGE_SELF), peak RSS from VmHWM;
// children not included.
std::string self_usage();

}  // namespace dlaunch
