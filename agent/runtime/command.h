// A runtime's command (podman run, rm, inspect), run to its end with a
// deadline, its stdout and stderr together. Synchronous: the agent calls it
// while setting up and tearing down, when no worker output waits on its loop.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace dlaunch::agent {

struct CommandResult {
  int status = -1;         // wait status; -1 when it did not start
  bool timed_out = false;  // killed at the deadline
  std::string output;      // stdout and stderr, at most kMaxCommandOutput bytes
  std::string error;       // why it did not start
  bool ok() const { return status == 0 && !timed_out && error.empty(); }
};

inline constexpr std::size_t kMaxCommandOutput = 64 * 1024;

// Runs argv (argv[0] a path, or found on env's PATH) with env. The output is
// read until the command exits, not until every copy of the pipe is closed
// (a daemon it leaves behind may hold one).
CommandResult run_command(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                          std::chrono::milliseconds limit);

// "`podman run` exited with 125: Error: ..." (the last lines of the output).
std::string describe_failure(const std::vector<std::string>& argv, const CommandResult& r);

}  // namespace dlaunch::agent
