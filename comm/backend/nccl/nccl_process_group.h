// The NCCL backend of dlaunch::comm::ProcessGroup (private to comm and its tests). The
// contract is the one of comm/process_group.h (kNccl); this header adds the
// pieces the tests reach on their own.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "backend/call.h"
#include "comm/process_group.h"

namespace dlaunch::comm::nccl {

std::unique_ptr<ProcessGroup> make_nccl_process_group(const GroupOptions& options);

// The NCCL type and op of comm's; false for a value outside the enums.
bool nccl_type(DataType type, ncclDataType_t& out);
bool nccl_op(ReduceOp op, ncclRedOp_t& out);

// The store key under which rank 0 publishes the unique id of the process's
// `sequence`-th NCCL group (every rank creates its groups in the same order);
// the restart count keeps a restarted job's ids apart.
std::string unique_id_key(int sequence, const std::string& restart_count);

// 128-byte ncclUniqueId <-> lowercase hex (store values are text-safe).
std::string to_hex(const ncclUniqueId& id);
bool from_hex(const std::string& hex, ncclUniqueId& out);

class NcclProcessGroup final : public ProcessGroup {
 public:
  explicit NcclProcessGroup(const GroupOptions& options);
  ~NcclProcessGroup() override;

  Backend backend() const override { return Backend::kNccl; }
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

  using ProcessGroup::all_gather;
  using ProcessGroup::all_reduce;
  using ProcessGroup::broadcast;
  using ProcessGroup::recv;
  using ProcessGroup::reduce_scatter;
  using ProcessGroup::send;

  ncclComm_t communicator() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  bool aborted() const { return aborted_; }
  // dlaunch::comm::nccl_check: a direct call's result, under the watchdog.
  void check_direct(ncclResult_t rc, const char* function);

 private:
  using Call = detail::Call;
  // After an NCCL call was enqueued: waits until the stream reached this
  // point, polling the communicator's async error and the clock (the
  // watchdog). Aborts the communicator and throws on an error or timeout.
  void wait(const Call& call);
  // rc of an NCCL call; ncclInProgress (non-blocking communicator) is waited
  // out under the watchdog. Anything else than success aborts and throws.
  void check_nccl(ncclResult_t rc, const Call& call, const char* function);
  [[noreturn]] void abort_and_throw(const Call& call, const std::string& reason);
  // After an abort every call is refused with CommError.
  void refuse_if_aborted(const Call& call) const;
  // p is device memory of the group's device, or CommError. Addresses that
  // passed are remembered (the last kCheckedPointers), and not asked again.
  void check_device_pointer(const Call& call, const void* p, const char* name) const;
  bool check_point_to_point(const Call& call, const void* buf, int peer) const;
  void select_device();

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  cudaEvent_t done_ = nullptr;
  int* scratch_ = nullptr;  // one int on the device for barrier()
  int rank_ = -1;
  int size_ = 0;
  int local_rank_ = 0;
  int device_ = -1;
  std::chrono::milliseconds timeout_{0};
  bool aborted_ = false;
  static constexpr std::size_t kCheckedPointers = 16;
  mutable std::array<const void*, kCheckedPointers> checked_{};
  mutable std::size_t checked_next_ = 0;
};

}  // namespace dlaunch::comm::nccl
