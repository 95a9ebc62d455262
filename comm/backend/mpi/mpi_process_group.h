// The MPI backend of dlaunch::comm::ProcessGroup (private to comm and its tests). The
// contract is the one of comm/process_group.h; this header adds what the
// tests need to reach: the world check on its own and a lower per-call
// element limit to exercise the split (> INT_MAX elements) paths with small
// buffers.
#pragma once

#include <cstddef>
#include <string>

#include <climits>
#include <mpi.h>

#include "comm/process_group.h"
#include "dlaunch/thread_annotations.h"

namespace dlaunch::comm::mpi {

// RANK (else OMPI_COMM_WORLD_RANK, under plain mpirun) from the environment
// if it is a non-negative integer, else fallback: CommError::rank() before
// MPI knows the rank.
int launcher_rank_or(int fallback);

// Throws CommError (op "create(mpi)") unless RANK and WORLD_SIZE, those of
// them that are set, equal MPI's rank and size; the message says both pairs.
// A value that is not an integer is an error too.
void check_launcher_world(int mpi_rank, int mpi_size);

// LOCAL_RANK, else OMPI_COMM_WORLD_LOCAL_RANK, else 0; must be in [0, mpi_size).
int local_rank_from_env(int mpi_rank, int mpi_size);

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup();
  ~MpiProcessGroup() override;

  Backend backend() const override { return Backend::kMpi; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }

  void all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op) override;
  void broadcast(void* buf, std::size_t count, DataType type, int root) override;
  void all_gather(const void* send, void* recv, std::size_t count, DataType type) override;
  void reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                      ReduceOp op) override;
  void barrier() override;
  void send(const void* buf, std::size_t count, DataType type, int dst, int tag) override;
  void recv(void* buf, std::size_t count, DataType type, int src, int tag) override;

  // Keep the typed conveniences of the base visible beside the overrides.
  using ProcessGroup::all_gather;
  using ProcessGroup::all_reduce;
  using ProcessGroup::broadcast;
  using ProcessGroup::recv;
  using ProcessGroup::reduce_scatter;
  using ProcessGroup::send;

  // The group's communicator (a duplicate of MPI_COMM_WORLD).
  MPI_Comm comm() const { return comm_; }

  // Most elements one MPI call carries (INT_MAX). Tests lower it to run the
  // split paths on small buffers; every rank must use the same value.
  std::size_t max_count_per_call() const { return max_count_; }
  void set_max_count_per_call_for_testing(std::size_t n);

 private:
  // MPI is initialised once per process: every group shares this, and any
  // thread may create or destroy a group (one at a time, but comm does not
  // rely on that for its own bookkeeping).
  static Mutex mutex_;
  static int live_groups_ GUARDED_BY(mutex_);         // constructed and not yet destroyed
  static bool initialised_by_us_ GUARDED_BY(mutex_);  // a group called MPI_Init_thread

  // Frees comm_ and, if may_finalize, finalises MPI when this was the last
  // group alive and a group initialised MPI.
  void release(bool may_finalize) noexcept REQUIRES(mutex_);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = -1;
  int size_ = 0;
  int local_rank_ = 0;
  int tag_ub_ = 32767;  // the least MPI guarantees; replaced by MPI_TAG_UB
  std::size_t max_count_ = INT_MAX;
  bool counted_ = false;  // included in the live-group count
};

}  // namespace dlaunch::comm::mpi
