// dlaunch::comm::ProcessGroup: collectives and point-to-point messages between
// the ranks of one job, over a backend chosen at run time.
//
//   namespace dc = dlaunch::comm;
//   auto pg = dc::ProcessGroup::create(dc::Backend::kMpi);
//   pg->all_reduce(std::span<float>(grad), dc::ReduceOp::kAvg);
//
// Namespace: everything of comm is in dlaunch::comm. The global alias
// `comm` (namespace comm = dlaunch::comm) is deprecated and kept for this
// release only, so that code written for `comm::` still compiles; it goes in
// the next release. Define DLAUNCH_COMM_NO_ALIAS before including any comm
// header to drop it now (e.g. when your program has a `comm` of its own).
//
// Contract:
// - create() either returns a group whose rank()/size() are this process's
//   place in the job, or throws CommError saying what failed.
//   kMpi: calls MPI_Init_thread(MPI_THREAD_SERIALIZED) unless MPI is already
//   initialised, and works on a duplicate of MPI_COMM_WORLD (the group's
//   traffic never matches the program's own MPI messages) with
//   MPI_ERRORS_RETURN set on it. If RANK / WORLD_SIZE are in the environment
//   (dlaunch, torchrun) they must equal MPI's rank and size: otherwise MPI did
//   not join the launcher's world (e.g. every worker became an MPI singleton)
//   and create() throws, naming both values. local_rank() is LOCAL_RANK, else
//   OMPI_COMM_WORLD_LOCAL_RANK (plain mpirun), else 0.
//   kNccl (only where comm was built with CUDA and NCCL: nccl_available()):
//   rank 0 makes the NCCL unique id and publishes it in the job's store
//   (DLAUNCH_STORE_*), every rank selects CUDA device LOCAL_RANK (of the
//   devices CUDA_VISIBLE_DEVICES leaves visible) and joins with
//   ncclCommInitRankConfig. Buffers are device memory; operations are
//   enqueued on the group's CUDA stream (GroupOptions::stream, else one the
//   group creates) and return when they completed on the device. While a call
//   waits, a watchdog polls ncclCommGetAsyncError and the clock: a peer's
//   error, or a call longer than the collective timeout, aborts the
//   communicator (ncclCommAbort) and throws; the group is then unusable. See
//   comm/nccl.h for the communicator and stream, to mix in direct NCCL calls.
// - The destructor frees the group's communicator; the last MPI group alive
//   finalises MPI if a group initialised it (MPI cannot be initialised twice
//   in one process, so a later create() throws). Destroy every group before
//   returning from main.
// - Every operation either completes or throws CommError (rank, operation,
//   element type and count, reason; for MPI failures the MPI_Error_string
//   text). Nothing is truncated: counts above INT_MAX are split into several
//   MPI calls. Arguments are checked before MPI is called (null buffer with a
//   non-zero count, root/peer out of range, negative tag).
// - Collectives must be called by every rank of the group in the same order
//   with the same count, type, op and root. Buffers are the caller's: no copy
//   is made on the way (all_reduce is in place; kAvg divides in place after
//   the sum; only all_gather split for > INT_MAX elements in all copies this
//   rank's own block). Buffers may not overlap except where an operation
//   says so.
// - kAvg is the sum divided by size(). For the integer types the division
//   truncates toward zero (C++ `/`), and the sum itself must fit the type.
// - send/recv are blocking with MPI semantics: send may wait until the
//   matching recv is posted, so two ranks that both send first can deadlock
//   for large messages. Messages between one pair with one tag arrive in
//   order. nccl: NCCL has no tags; tag is checked (>= 0) and otherwise
//   ignored, and messages between one pair arrive in the order posted.
// - Thread safety: rank(), size(), local_rank() and backend() may be called
//   from any thread. Everything else, create() and destruction included, must
//   be called from one thread at a time per process (MPI_THREAD_SERIALIZED:
//   any thread, never two at once, across all groups).
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "comm/error.h"

namespace dlaunch::comm {

enum class Backend { kMpi, kNccl };
enum class ReduceOp { kSum, kAvg, kMin, kMax };
// kFloat16 (IEEE binary16) and kBFloat16 have no C++20 element type: pass
// them through the untyped calls. The mpi backend refuses them.
enum class DataType { kFloat32, kFloat64, kInt32, kInt64, kFloat16, kBFloat16 };

// "mpi", "nccl"; "sum", "avg", "min", "max"; "float32", "float64", "int32",
// "int64", "float16", "bfloat16".
const char* to_string(Backend backend);
const char* to_string(ReduceOp op);
const char* to_string(DataType type);
std::size_t element_size(DataType type);

// CommError: a ProcessGroup operation, create() or one of the helpers here
// (parse_backend, collective_timeout_from_env, comm/nccl.h) failed. what()
// names the rank, the operation and the reason. Kinds (Error::kind()):
// - kUsage: an argument was refused before anything was sent (null buffer,
//   root/peer/tag out of range, overlapping buffers, a type or op the backend
//   has not, host memory for nccl), the ranks' calls did not match (a
//   message longer or shorter than the receive: MPI_ERR_TRUNCATE and the
//   like, or NCCL's invalid-argument/usage results), a call on an NCCL group
//   aborted earlier, or create() found the job misconfigured (a bad RANK /
//   WORLD_SIZE / LOCAL_RANK or DLAUNCH_COLLECTIVE_TIMEOUT, MPI not joined to
//   the launcher's world, more ranks on a node than GPUs, a backend this
//   build has not). Recoverable when the group refused the arguments itself:
//   it is untouched and may be used again with correct ones. A mismatch
//   between ranks is a bug in the program, best treated as fatal.
// - kEnvironment: MPI, CUDA or NCCL failed underneath, a peer failed, the
//   job's store could not be used (create(nccl)), or a call outlived the
//   collective timeout. Not recoverable for the group: an NCCL group is
//   aborted and refuses every further call; after an MPI failure the state of
//   the communicator is undefined. Destroy the group; ending the process (and
//   letting dlaunch restart the job) is the usual answer.
// - kInternal: MPI says the group's own communicator is invalid
//   (MPI_ERR_COMM): a bug in comm. Not recoverable.
class CommError : public Error {
 public:
  // rank < 0: not known yet (before the backend knows it); what() then omits it.
  // what(): "rank 3: all_reduce(float32, 1024 elements, sum): <reason>".
  CommError(ErrorKind kind, int rank, std::string op, const std::string& reason);
  // Kind kEnvironment.
  [[deprecated("say whose problem it is: CommError(ErrorKind, rank, op, reason)")]] CommError(
      int rank, std::string op, const std::string& reason);
  int rank() const { return rank_; }
  // The operation as it appears in what(), e.g. "all_reduce(float32, 1024 elements, sum)".
  const std::string& op() const { return op_; }

 private:
  int rank_;
  std::string op_;
};

// "mpi" or "nccl"; anything else throws CommError listing the choices.
Backend parse_backend(const std::string& name);

// The DataType of a C++ element type: float, double, and the signed 32- and
// 64-bit integers (int, long, long long, int32_t, int64_t).
template <typename T>
concept CommElement = std::same_as < std::remove_cv_t<T>,
float > || std::same_as<std::remove_cv_t<T>, double> ||
    (std::signed_integral<std::remove_cv_t<T>> && (sizeof(T) == 4 || sizeof(T) == 8));

template <CommElement T>
constexpr DataType data_type_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::same_as<U, float>) {
    return DataType::kFloat32;
  } else if constexpr (std::same_as<U, double>) {
    return DataType::kFloat64;
  } else if constexpr (sizeof(U) == 4) {
    return DataType::kInt32;
  } else {
    return DataType::kInt64;
  }
}

// True if this build of comm has the NCCL backend (CUDA and NCCL were found
// when it was built). Says nothing about GPUs being present.
bool nccl_available();

// Seconds from DLAUNCH_COLLECTIVE_TIMEOUT (set by `dlaunch --collective-timeout`),
// else 600 s; "0" turns the timeout off. A value that is not a non-negative
// number throws CommError naming the variable.
std::chrono::milliseconds collective_timeout_from_env();

struct GroupOptions {
  // nccl: the longest one call (and the set-up in create()) may wait before
  // the communicator is aborted and the call throws. Negative: from the
  // environment (collective_timeout_from_env()); zero: wait forever.
  std::chrono::milliseconds timeout{-1};
  // nccl: the cudaStream_t to enqueue on; null: the group makes its own
  // non-blocking stream. The group never destroys a stream it was given.
  void* stream = nullptr;
};

class ProcessGroup {
 public:
  static std::unique_ptr<ProcessGroup> create(Backend backend);
  static std::unique_ptr<ProcessGroup> create(Backend backend, const GroupOptions& options);

  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  virtual Backend backend() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;

  // In place: buf holds count elements on entry (this rank's input) and on
  // return (the reduction over all ranks, the same on every rank).
  virtual void all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op) = 0;
  // buf of root is copied into buf of every other rank.
  virtual void broadcast(void* buf, std::size_t count, DataType type, int root) = 0;
  // recv holds size()*count elements: rank r's send lands at recv + r*count.
  // In place: send may be recv + rank()*count.
  virtual void all_gather(const void* send, void* recv, std::size_t count, DataType type) = 0;
  // send holds size()*count elements; block r of the reduction (elements
  // [r*count, (r+1)*count)) lands in recv (count elements) of rank r.
  virtual void reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                              ReduceOp op) = 0;
  virtual void barrier() = 0;
  // Blocking; dst/src in [0, size()), tag >= 0. recv needs exactly count
  // elements from src with that tag (a longer message is an error).
  virtual void send(const void* buf, std::size_t count, DataType type, int dst, int tag) = 0;
  virtual void recv(void* buf, std::size_t count, DataType type, int src, int tag) = 0;

  // Typed conveniences (the element type gives the DataType).
  template <CommElement T>
  void all_reduce(std::span<T> buf, ReduceOp op) {
    all_reduce(buf.data(), buf.size(), data_type_of<T>(), op);
  }
  template <CommElement T>
  void broadcast(std::span<T> buf, int root) {
    broadcast(buf.data(), buf.size(), data_type_of<T>(), root);
  }
  // recv.size() must be size() * send.size().
  template <CommElement T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    check_span_sizes("all_gather", data_type_of<T>(), send.size(), recv.size(), false);
    all_gather(send.data(), recv.data(), send.size(), data_type_of<T>());
  }
  // send.size() must be size() * recv.size().
  template <CommElement T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check_span_sizes("reduce_scatter", data_type_of<T>(), recv.size(), send.size(), true);
    reduce_scatter(send.data(), recv.data(), recv.size(), data_type_of<T>(), op);
  }
  template <CommElement T>
  void send(std::span<const T> buf, int dst, int tag) {
    send(buf.data(), buf.size(), data_type_of<T>(), dst, tag);
  }
  template <CommElement T>
  void recv(std::span<T> buf, int src, int tag) {
    recv(buf.data(), buf.size(), data_type_of<T>(), src, tag);
  }

 protected:
  ProcessGroup() = default;

 private:
  // Throws CommError unless whole == size() * part.
  void check_span_sizes(const char* op, DataType type, std::size_t part, std::size_t whole,
                        bool part_is_recv) const;
};

}  // namespace dlaunch::comm

// Deprecated (removed in the next release): `comm` for dlaunch::comm, so that
// code written before the move still compiles. DLAUNCH_COMM_NO_ALIAS drops it.
#ifndef DLAUNCH_COMM_NO_ALIAS
namespace comm = dlaunch::comm;
#endif
