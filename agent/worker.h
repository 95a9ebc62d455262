// A worker: one rank's process on this node and its state (its output
// pipes are the OutputRelay's: output_pump.h).
//
// State machine: pending -> running -> exited; pending -> failed (spawn).
// The worker leads its own process group (pgid == pid); the agent signals the
// group so that children the worker forked go down with it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "dlaunch/proto/protocol.h"

namespace dlaunch::agent {

enum class WorkerState { kPending, kRunning, kExited, kFailed };

struct Worker {
  proto::WorkerSpec spec;
  WorkerState state = WorkerState::kPending;
  pid_t pid = -1;
  std::chrono::steady_clock::time_point started;
  // Wall-clock start, to tell an error file written by this worker from an older one.
  std::chrono::system_clock::time_point started_wall;
  std::string error_file;  // its TORCHELASTIC_ERROR_FILE
};

// Where the worker's TORCHELASTIC_ERROR_FILE is: the value env already holds
// (the user chose), else dir/error.<rank>.json, which is then added to env;
// empty when neither (no dir).
std::string ensure_error_file(std::vector<std::string>& env, const std::string& dir, int rank);

// At most max_bytes of a failed worker's error file, when it exists and was
// written after the worker started (a user's path may hold an older one).
// Empty when there is nothing to report.
std::string read_error_file(const std::string& path, std::chrono::system_clock::time_point since,
                            std::size_t max_bytes);

// The complete environment of a worker: base (the agent's own), then the
// worker's own variables, then the job-wide ones from Start, then the agent
// token. Later entries override earlier ones with the same name.
std::vector<std::string> worker_environment(const std::vector<std::string>& base,
                                            const proto::Env& worker_env,
                                            const proto::Env& start_env,
                                            const std::string& token_entry);

}  // namespace dlaunch::agent
