// Which agent made something it leaves on a node (a container's dlaunch.agent
// label, the end of a job cgroup's name): "PID.START_TICKS", the pid and its
// /proc start time, so that a pid reused by another process is not taken for
// the agent. Shared by agent/runtime/oci_runtime.cpp and agent/posix_os.cpp.
#pragma once

#include <optional>
#include <sstream>
#include <string>

namespace dlaunch::agent {

struct OwnerToken {
  long pid = 0;
  unsigned long long start_ticks = 0;
};

inline std::string owner_token(long pid, unsigned long long start_ticks) {
  return std::to_string(pid) + "." + std::to_string(start_ticks);
}

// The token at the start of `text`, which may end in white space (a label as
// a runtime prints it); nothing when it is not one.
inline std::optional<OwnerToken> parse_owner_token(const std::string& text) {
  std::istringstream in(text);
  OwnerToken t;
  char dot = 0;
  if (!(in >> t.pid >> dot >> t.start_ticks) || dot != '.' || t.pid <= 0 || t.start_ticks == 0)
    return std::nullopt;
  in >> std::ws;
  if (!in.eof()) return std::nullopt;
  return t;
}

}  // namespace dlaunch::agent
