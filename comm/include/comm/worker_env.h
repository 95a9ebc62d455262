// dlaunch::comm::WorkerEnv: who this process is in the job, read from the
// environment that dlaunch (or torchrun, or any launcher setting the same
// variables) gives every worker.
//
// Contract: from_env() either returns every field validated or throws
// EnvError naming the variable and what is wrong with it. Thread-safe as long
// as nobody modifies the environment concurrently (getenv).
//
// Namespace: dlaunch::comm. The global alias `comm` for it is deprecated, kept
// for this release only (removed in the next); define DLAUNCH_COMM_NO_ALIAS
// before including to drop it now.
#pragma once

#include <string>
#include <utility>

#include "comm/error.h"

namespace dlaunch::comm {

// EnvError: a variable that the launcher should have set is missing or has a
// value that is not valid (not an integer, out of range, inconsistent with
// another). what() is "<VARIABLE>: <what is wrong>". Always kind kUsage: the
// environment is the caller's (or its launcher's) to fix, and reading it again
// unchanged fails again. Recoverable in the sense that nothing else was done:
// fix the environment and call from_env() again.
class EnvError : public Error {
 public:
  EnvError(std::string variable, const std::string& message)
      : Error(ErrorKind::kUsage, variable + ": " + message), variable_(std::move(variable)) {}
  const std::string& variable() const { return variable_; }

 private:
  std::string variable_;
};

struct WorkerEnv {
  int rank = 0;              // RANK
  int world_size = 1;        // WORLD_SIZE
  int local_rank = 0;        // LOCAL_RANK
  int local_world_size = 1;  // LOCAL_WORLD_SIZE
  int node_rank = 0;         // NODE_RANK (or GROUP_RANK)
  int num_nodes = 1;         // NNODES (or GROUP_WORLD_SIZE)
  std::string master_addr;   // MASTER_ADDR
  int master_port = 0;       // MASTER_PORT
  std::string job_id;        // DLAUNCH_JOB_ID, else TORCHELASTIC_RUN_ID; may be empty

  // Requires RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; the others
  // default as torchrun's users expect (one node, local = global).
  static WorkerEnv from_env();
};

}  // namespace dlaunch::comm

// Deprecated (removed in the next release): `comm` for dlaunch::comm, so that
// code written before the move still compiles. DLAUNCH_COMM_NO_ALIAS drops it.
#ifndef DLAUNCH_COMM_NO_ALIAS
namespace comm = dlaunch::comm;
#endif
