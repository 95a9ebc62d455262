// dlaunch::comm::Error: the root of the exceptions comm throws, with kind()
// saying whose problem the failure is, so that a caller can decide what to do
// with any of them in one catch:
//
//   try {
//     pg->all_reduce(std::span<float>(grad), dlaunch::comm::ReduceOp::kSum);
//   } catch (const dlaunch::comm::Error& e) {
//     if (e.kind() == dlaunch::comm::ErrorKind::kUsage) report_bug_in_caller(e.what());
//     throw;
//   }
//
// The three concrete types, each documented in its header, derive from it:
//   CommError  (comm/process_group.h)  a ProcessGroup call or its creation
//   StoreError (comm/store.h)          the job's store client
//   EnvError   (comm/worker_env.h)     the launcher's environment variables
// Error derives from std::runtime_error: what() is the full message, and code
// that catches std::runtime_error or std::exception still catches everything.
// Not comm::Error: std::bad_alloc, and StoreServer's std::invalid_argument /
// std::system_error (see comm/store.h).
//
// Namespace: dlaunch::comm. The global alias `comm` for it is deprecated, kept
// for this release only (removed in the next); define DLAUNCH_COMM_NO_ALIAS
// before including to drop it now.
#pragma once

#include <stdexcept>
#include <string>

namespace dlaunch::comm {

// Whose problem a failure is.
enum class ErrorKind {
  // The caller's: a bad argument (a null buffer, a rank out of range, a key
  // over the store's limit), a call the object's state does not allow, or a
  // bad value in what the caller controls: the environment its launcher sets
  // (RANK, DLAUNCH_STORE_PORT, DLAUNCH_COLLECTIVE_TIMEOUT ...), the job's
  // secret, the way the program was started. The same call fails the same way
  // again; the call or the configuration has to change.
  kUsage,
  // The world's: the network, a store that cannot be reached or stops
  // answering, a peer that died or misbehaved, a timeout, a device or library
  // (MPI, CUDA, NCCL) failing underneath. A later attempt may succeed; whether
  // the object that threw is still usable is said by each error type.
  kEnvironment,
  // comm's own: an internal check failed (a bug in comm, or a library breaking
  // its contract). Not recoverable; worth a bug report.
  kInternal,
};

// "usage", "environment", "internal".
const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace dlaunch::comm

// Deprecated (removed in the next release): `comm` for dlaunch::comm, so that
// code written before the move still compiles. DLAUNCH_COMM_NO_ALIAS drops it.
#ifndef DLAUNCH_COMM_NO_ALIAS
namespace comm = dlaunch::comm;
#endif
