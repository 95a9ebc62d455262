#include "backend/nccl/nccl_process_group.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "comm/nccl.h"
#include "comm/store.h"
#include "comm/worker_env.h"
#include "src/progress.h"

namespace dlaunch::comm::nccl {
namespace {

using Clock = std::chrono::steady_clock;
using detail::overlap;

// Every rank creates its NCCL groups in the same order; the n-th one of each
// rank meets under the n-th key.
std::atomic<int> g_sequence{0};

// These helpers build their text by appending to one string. GCC 12 at -O3
// reported a bogus -Wrestrict (a memcpy of some 2^63 bytes "overlapping")
// inside libstdc++ for `"'" + std::string(v) + "'"`, where
// operator+(const char*, std::string&&) inserts at the front of the
// temporary. Appending never inserts; the text is the same.
std::string cuda_text(cudaError_t e) {
  std::string text = cudaGetErrorName(e);
  text.append(" (").append(cudaGetErrorString(e)).append(")");
  return text;
}

std::string nccl_text(ncclResult_t rc, ncclComm_t comm) {
  std::string text = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text.append(": ").append(last);
  return text;
}

std::string visible_devices() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (v == nullptr) return "unset";
  std::string text = "'";
  text.append(v).append("'");
  return text;
}

std::string seconds_text(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

}  // namespace

bool nccl_type(DataType type, ncclDataType_t& out) {
  switch (type) {
    case DataType::kFloat32:
      out = ncclFloat32;
      return true;
    case DataType::kFloat64:
      out = ncclFloat64;
      return true;
    case DataType::kInt32:
      out = ncclInt32;
      return true;
    case DataType::kInt64:
      out = ncclInt64;
      return true;
    case DataType::kFloat16:
      out = ncclFloat16;
      return true;
    case DataType::kBFloat16:
      out = ncclBfloat16;
      return true;
  }
  return false;
}

// kAvg is NCCL's own ncclAvg: floating types are pre-multiplied by 1/size
// (the rounding differs slightly from the mpi backend's sum-then-divide),
// integer types are summed and then divided, truncating as C++ does.
bool nccl_op(ReduceOp op, ncclRedOp_t& out) {
  switch (op) {
    case ReduceOp::kSum:
      out = ncclSum;
      return true;
    case ReduceOp::kAvg:
      out = ncclAvg;
      return true;
    case ReduceOp::kMin:
      out = ncclMin;
      return true;
    case ReduceOp::kMax:
      out = ncclMax;
      return true;
  }
  return false;
}

std::string unique_id_key(int sequence, const std::string& restart_count) {
  return "comm/nccl/restart" + (restart_count.empty() ? std::string("0") : restart_count) +
         "/group" + std::to_string(sequence) + "/unique_id";
}

std::string to_hex(const ncclUniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(sizeof id.internal * 2);
  for (char c : id.internal) {
    const auto b = static_cast<unsigned char>(c);
    hex += kDigits[b >> 4];
    hex += kDigits[b & 15];
  }
  return hex;
}

bool from_hex(const std::string& hex, ncclUniqueId& out) {
  if (hex.size() != sizeof out.internal * 2) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < sizeof out.internal; ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.internal[i] = static_cast<char>((hi << 4) | lo);
  }
  return true;
}

std::unique_ptr<ProcessGroup> make_nccl_process_group(const GroupOptions& options) {
  return std::make_unique<NcclProcessGroup>(options);
}

void NcclProcessGroup::select_device() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    throw CommError(ErrorKind::kEnvironment, rank_, "create(nccl)",
                    "no CUDA device visible to this process (" +
                        (e != cudaSuccess ? cuda_text(e) : std::string("0 devices")) +
                        ", CUDA_VISIBLE_DEVICES " + visible_devices() +
                        "): the nccl backend needs a GPU per rank; use the mpi backend on CPUs");
  }
  if (local_rank_ >= count) {
    throw CommError(ErrorKind::kUsage, rank_, "create(nccl)",
                    "LOCAL_RANK " + std::to_string(local_rank_) + " but only " +
                        std::to_string(count) + " CUDA device(s) visible (CUDA_VISIBLE_DEVICES " +
                        visible_devices() +
                        "): one rank per GPU; lower --nproc-per-node or the host's slots");
  }
  device_ = local_rank_;
  const cudaError_t s = cudaSetDevice(device_);
  if (s != cudaSuccess) {
    throw CommError(ErrorKind::kEnvironment, rank_, "create(nccl)",
                    "cudaSetDevice(" + std::to_string(device_) + ") failed: " + cuda_text(s));
  }
}

NcclProcessGroup::NcclProcessGroup(const GroupOptions& options) {
  // Outside a launcher (no RANK, no WORLD_SIZE) the group is a world of one.
  if (std::getenv("RANK") != nullptr || std::getenv("WORLD_SIZE") != nullptr) {
    try {
      const WorkerEnv env = WorkerEnv::from_env();
      rank_ = env.rank;
      size_ = env.world_size;
      local_rank_ = env.local_rank;
    } catch (const EnvError& e) {
      throw CommError(e.kind(), -1, "create(nccl)", e.what());
    }
  } else {
    rank_ = 0;
    size_ = 1;
  }
  timeout_ = options.timeout.count() < 0 ? collective_timeout_from_env() : options.timeout;
  const int sequence = g_sequence.fetch_add(1);

  const Call call{.name = "create(nccl)", .has_data = false};
  try {
    select_device();
    auto cuda = [&](cudaError_t e, const char* what) {
      if (e != cudaSuccess)
        throw CommError(ErrorKind::kEnvironment, rank_, call.str(),
                        std::string(what) + ": " + cuda_text(e));
    };
    if (options.stream != nullptr) {
      stream_ = static_cast<cudaStream_t>(options.stream);
    } else {
      cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      own_stream_ = true;
    }
    cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    cuda(cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(int)), "cudaMalloc");

    ncclUniqueId id{};
    if (size_ == 1 || rank_ == 0) {
      if (const ncclResult_t rc = ncclGetUniqueId(&id); rc != ncclSuccess)
        throw CommError(ErrorKind::kEnvironment, rank_, call.str(),
                        std::string("ncclGetUniqueId: ") + ncclGetErrorString(rc));
    }
    if (size_ > 1) {
      // Rank 0 publishes its id in the job's store, the others wait for it.
      const char* restart = std::getenv("DLAUNCH_RESTART_COUNT");
      const std::string key = unique_id_key(sequence, restart == nullptr ? "" : restart);
      std::string hex;
      try {
        Store store = Store::from_env();
        if (rank_ == 0) {
          store.set(key, to_hex(id));
        } else {
          // Rank 0 may be slow to start: wait as long as the collective timeout allows.
          const auto wait_for = timeout_.count() > 0 ? timeout_ : std::chrono::hours(24);
          hex = store.get(key, wait_for);
        }
      } catch (const Error& e) {
        // Whatever the store says (a StoreError: no DLAUNCH_STORE_* outside
        // dlaunch, unreachable, timed out ...), with its kind.
        throw CommError(
            e.kind(), rank_, call.str(),
            std::string("exchanging the NCCL unique id through the job's store: ") + e.what());
      }
      if (rank_ != 0 && !from_hex(hex, id)) {
        throw CommError(ErrorKind::kEnvironment, rank_, call.str(),
                        "the store's value of '" + key + "' is not a hex ncclUniqueId");
      }
    }

    // Non-blocking: set-up and every call return at once and progress in the
    // background, so that the watchdog can give up on a peer that never comes.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check_nccl(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), call,
               "ncclCommInitRankConfig");
  } catch (...) {
    if (comm_ != nullptr && !aborted_) ncclCommAbort(comm_);
    comm_ = nullptr;
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (done_ != nullptr) cudaEventDestroy(done_);
    if (own_stream_ && stream_ != nullptr) cudaStreamDestroy(stream_);
    throw;
  }
}

NcclProcessGroup::~NcclProcessGroup() {
  if (comm_ != nullptr && !aborted_) {
    // Finalize flushes what is still in flight; a peer that is gone makes it
    // wait forever, hence the same watchdog as for the calls.
    const Call call{.name = "destroy(nccl)", .has_data = false};
    try {
      check_nccl(ncclCommFinalize(comm_), call, "ncclCommFinalize");
    } catch (const CommError& e) {
      std::fprintf(stderr, "comm: %s\n", e.what());
    }
    if (!aborted_) ncclCommDestroy(comm_);
  }
  comm_ = nullptr;
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (own_stream_ && stream_ != nullptr) cudaStreamDestroy(stream_);
}

void NcclProcessGroup::refuse_if_aborted(const Call& call) const {
  if (aborted_)
    throw CommError(ErrorKind::kUsage, rank_, call.str(),
                    "the communicator was aborted by an earlier failure");
}

void NcclProcessGroup::abort_and_throw(const Call& call, const std::string& reason) {
  if (comm_ != nullptr && !aborted_) {
    ncclCommAbort(comm_);
    aborted_ = true;
  }
  throw CommError(ErrorKind::kEnvironment, rank_, call.str(),
                  reason + "; the NCCL communicator was aborted");
}

void NcclProcessGroup::check_nccl(ncclResult_t rc, const Call& call, const char* function) {
  if (rc == ncclSuccess) [[likely]]
    return;
  if (rc == ncclInvalidArgument || rc == ncclInvalidUsage) {
    // Refused before anything was enqueued: the communicator is still good.
    throw CommError(ErrorKind::kUsage, rank_, call.str(),
                    std::string(function) + ": " + nccl_text(rc, comm_));
  }
  if (rc != ncclInProgress)
    abort_and_throw(call, std::string(function) + ": " + nccl_text(rc, comm_));
  // A call that NCCL enqueues in the background (the first one on a
  // connection, say) is usually posted within microseconds: spin for the
  // first stretch so that it costs no sleep, then poll every 100 us.
  constexpr auto kSpin = std::chrono::milliseconds(2);
  const auto start = Clock::now();
  for (;;) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
    if (q != ncclSuccess) state = q;
    if (state == ncclSuccess) return;
    if (state != ncclInProgress)
      abort_and_throw(call, std::string(function) + ": " + nccl_text(state, comm_));
    const auto waited = Clock::now() - start;
    if (timeout_.count() > 0 && waited > timeout_) {
      abort_and_throw(call, std::string(function) +
                                " did not complete within the collective "
                                "timeout of " +
                                seconds_text(timeout_) + " (a rank missing or stuck?)");
    }
    if (waited > kSpin) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void NcclProcessGroup::check_direct(ncclResult_t rc, const char* function) {
  const Call call{.name = function, .has_data = false};
  if (rc == ncclSuccess) [[likely]]
    return;
  refuse_if_aborted(call);
  check_nccl(rc, call, function);
}

void NcclProcessGroup::wait(const Call& call) {
  // On the group's own stream nothing but this call can follow the op, so the
  // stream's own state says when it is done; on a caller's stream, another
  // thread may queue more behind it, hence an event. Measured on an H100
  // (docs/nccl.md), the event's record alone was a tenth of a small op.
  if (!own_stream_) {
    if (const cudaError_t e = cudaEventRecord(done_, stream_); e != cudaSuccess)
      abort_and_throw(call, "cudaEventRecord: " + cuda_text(e));
  }
  const auto start = Clock::now();
  // Spin for the first stretch (a small collective is done in microseconds),
  // then poll every 50 us so that a long wait costs no core.
  constexpr auto kSpin = std::chrono::milliseconds(2);
  for (unsigned polls = 0;; ++polls) {
    const cudaError_t q = own_stream_ ? cudaStreamQuery(stream_) : cudaEventQuery(done_);
    if (q == cudaSuccess) [[likely]] {
      progress::completed();  // for dlaunch's stall detection
      return;
    }
    if (q != cudaErrorNotReady) abort_and_throw(call, "CUDA error while waiting: " + cuda_text(q));
    if ((polls & 63) == 0) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
      if (rc != ncclSuccess) state = rc;
      if (state != ncclSuccess && state != ncclInProgress)
        abort_and_throw(call,
                        "NCCL reported an error (a peer failed?): " + nccl_text(state, comm_));
      const auto waited = Clock::now() - start;
      if (timeout_.count() > 0 && waited > timeout_) {
        abort_and_throw(call, "not complete after the collective timeout of " +
                                  seconds_text(timeout_) +
                                  " (a rank missing, stuck, or calling collectives in another "
                                  "order?)");
      }
      if (waited > kSpin) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void NcclProcessGroup::check_device_pointer(const Call& call, const void* p,
                                            const char* name) const {
  // The driver's answer costs about as much as a small op itself: ask once per
  // address (training passes the same few buffers again and again, and a
  // caching allocator hands the same addresses back).
  for (const void* seen : checked_)
    if (seen == p && p != nullptr) return;
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky, but keep the next call's error clean
    throw CommError(ErrorKind::kUsage, rank_, call.str(),
                    std::string(name) + " is not a CUDA pointer (" + cuda_text(e) + ")");
  }
  if (attr.type == cudaMemoryTypeUnregistered || attr.type == cudaMemoryTypeHost) {
    throw CommError(
        ErrorKind::kUsage, rank_, call.str(),
        std::string(name) + " is host memory: the nccl backend takes device buffers (cudaMalloc)");
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != device_) {
    throw CommError(ErrorKind::kUsage, rank_, call.str(),
                    std::string(name) + " is on CUDA device " + std::to_string(attr.device) +
                        ", the group's device is " + std::to_string(device_));
  }
  checked_[checked_next_] = p;
  checked_next_ = (checked_next_ + 1) % checked_.size();
}

namespace {

// Type and op of a call, or CommError.
ncclDataType_t checked_type(int rank, const detail::Call& call) {
  ncclDataType_t t{};
  if (!nccl_type(call.type, t))
    throw CommError(ErrorKind::kUsage, rank, call.str(), "invalid data type");
  return t;
}

ncclRedOp_t checked_op(int rank, const detail::Call& call) {
  ncclRedOp_t o{};
  if (!nccl_op(call.op, o))
    throw CommError(ErrorKind::kUsage, rank, call.str(), "invalid reduce op");
  return o;
}

}  // namespace

void NcclProcessGroup::all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op) {
  const Call call{.name = "all_reduce", .type = type, .count = count, .has_op = true, .op = op};
  const ncclDataType_t t = checked_type(rank_, call);
  const ncclRedOp_t o = checked_op(rank_, call);
  refuse_if_aborted(call);
  if (count == 0) return;
  if (buf == nullptr) throw CommError(ErrorKind::kUsage, rank_, call.str(), "buf is null");
  check_device_pointer(call, buf, "buf");
  check_nccl(ncclAllReduce(buf, buf, count, t, o, comm_, stream_), call, "ncclAllReduce");
  wait(call);
}

void NcclProcessGroup::broadcast(void* buf, std::size_t count, DataType type, int root) {
  const Call call{
      .name = "broadcast", .type = type, .count = count, .peer_label = "root", .peer = root};
  const ncclDataType_t t = checked_type(rank_, call);
  if (root < 0 || root >= size_)
    throw CommError(ErrorKind::kUsage, rank_, call.str(),
                    "root is not in [0, " + std::to_string(size_) + ")");
  refuse_if_aborted(call);
  if (count == 0) return;
  if (buf == nullptr) throw CommError(ErrorKind::kUsage, rank_, call.str(), "buf is null");
  check_device_pointer(call, buf, "buf");
  check_nccl(ncclBroadcast(buf, buf, count, t, root, comm_, stream_), call, "ncclBroadcast");
  wait(call);
}

void NcclProcessGroup::all_gather(const void* send, void* recv, std::size_t count, DataType type) {
  const Call call{.name = "all_gather", .type = type, .count = count};
  const ncclDataType_t t = checked_type(rank_, call);
  refuse_if_aborted(call);
  if (count == 0) return;
  if (send == nullptr || recv == nullptr)
    throw CommError(ErrorKind::kUsage, rank_, call.str(),
                    send == nullptr ? "send is null" : "recv is null");
  const std::size_t block = count * element_size(type);
  const auto* own = static_cast<const char*>(recv) + static_cast<std::size_t>(rank_) * block;
  if (send != own && overlap(send, block, recv, block * static_cast<std::size_t>(size_))) {
    throw CommError(ErrorKind::kUsage, rank_, call.str(),
                    "send overlaps recv (in place, send must be exactly recv + rank() * count)");
  }
  check_device_pointer(call, send, "send");
  check_device_pointer(call, recv, "recv");
  check_nccl(ncclAllGather(send, recv, count, t, comm_, stream_), call, "ncclAllGather");
  wait(call);
}

void NcclProcessGroup::reduce_scatter(const void* send, void* recv, std::size_t count,
                                      DataType type, ReduceOp op) {
  const Call call{.name = "reduce_scatter", .type = type, .count = count, .has_op = true, .op = op};
  const ncclDataType_t t = checked_type(rank_, call);
  const ncclRedOp_t o = checked_op(rank_, call);
  refuse_if_aborted(call);
  if (count == 0) return;
  if (send == nullptr || recv == nullptr)
    throw CommError(ErrorKind::kUsage, rank_, call.str(),
                    send == nullptr ? "send is null" : "recv is null");
  const std::size_t block = count * element_size(type);
  if (overlap(send, block * static_cast<std::size_t>(size_), recv, block))
    throw CommError(ErrorKind::kUsage, rank_, call.str(), "send and recv overlap");
  check_device_pointer(call, send, "send");
  check_device_pointer(call, recv, "recv");
  check_nccl(ncclReduceScatter(send, recv, count, t, o, comm_, stream_), call, "ncclReduceScatter");
  wait(call);
}

void NcclProcessGroup::barrier() {
  const Call call{.name = "barrier", .has_data = false};
  refuse_if_aborted(call);
  check_nccl(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_), call,
             "ncclAllReduce");
  wait(call);
}

// Checks shared by send and recv; false when there is nothing to move.
bool NcclProcessGroup::check_point_to_point(const Call& call, const void* buf, int peer) const {
  if (peer < 0 || peer >= size_)
    throw CommError(ErrorKind::kUsage, rank_, call.str(),
                    std::string(call.peer_label) + " is not in [0, " + std::to_string(size_) + ")");
  if (call.tag < 0) throw CommError(ErrorKind::kUsage, rank_, call.str(), "tag is negative");
  refuse_if_aborted(call);
  if (call.count == 0) return false;
  if (buf == nullptr) throw CommError(ErrorKind::kUsage, rank_, call.str(), "buf is null");
  check_device_pointer(call, buf, "buf");
  return true;
}

void NcclProcessGroup::send(const void* buf, std::size_t count, DataType type, int dst, int tag) {
  const Call call{.name = "send",
                  .type = type,
                  .count = count,
                  .peer_label = "dst",
                  .peer = dst,
                  .has_tag = true,
                  .tag = tag};
  const ncclDataType_t t = checked_type(rank_, call);
  if (!check_point_to_point(call, buf, dst)) return;
  check_nccl(ncclSend(buf, count, t, dst, comm_, stream_), call, "ncclSend");
  wait(call);
}

void NcclProcessGroup::recv(void* buf, std::size_t count, DataType type, int src, int tag) {
  const Call call{.name = "recv",
                  .type = type,
                  .count = count,
                  .peer_label = "src",
                  .peer = src,
                  .has_tag = true,
                  .tag = tag};
  const ncclDataType_t t = checked_type(rank_, call);
  if (!check_point_to_point(call, buf, src)) return;
  check_nccl(ncclRecv(buf, count, t, src, comm_, stream_), call, "ncclRecv");
  wait(call);
}

}  // namespace dlaunch::comm::nccl

namespace dlaunch::comm {
namespace {

nccl::NcclProcessGroup& as_nccl(ProcessGroup& pg, const char* what) {
  auto* g = dynamic_cast<nccl::NcclProcessGroup*>(&pg);
  if (g == nullptr) {
    throw CommError(
        ErrorKind::kUsage, pg.rank(), what,
        std::string("the group's backend is ") + to_string(pg.backend()) + ", not nccl");
  }
  return *g;
}

}  // namespace

ncclComm_t nccl_communicator(ProcessGroup& pg) {
  return as_nccl(pg, "nccl_communicator").communicator();
}
cudaStream_t nccl_stream(ProcessGroup& pg) { return as_nccl(pg, "nccl_stream").stream(); }
int cuda_device(ProcessGroup& pg) { return as_nccl(pg, "cuda_device").device(); }
void nccl_check(ProcessGroup& pg, ncclResult_t rc, const char* function) {
  as_nccl(pg, "nccl_check").check_direct(rc, function);
}

}  // namespace dlaunch::comm
