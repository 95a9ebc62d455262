#include "backend/mpi/mpi_process_group.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "backend/call.h"
#include "src/progress.h"

namespace dlaunch::comm::mpi {
namespace {

using detail::Call;
using detail::overlap;

std::string error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS || len <= 0) {
    return "MPI error code " + std::to_string(rc);
  }
  return {text, static_cast<std::size_t>(len)};
}

// A call's arguments refused before MPI saw them (kUsage).
[[noreturn, gnu::cold, gnu::noinline]] void fail(int rank, const Call& call,
                                                 const std::string& reason) {
  throw CommError(ErrorKind::kUsage, rank, call.str(), reason);
}

// Whose problem an MPI error is, by its class: arguments MPI refused, or a
// message that does not match the receive (ranks calling with different
// counts), are the caller's; an invalid communicator is comm's own (it owns
// the group's); anything else (the network, a peer, MPI itself) is the
// environment's.
ErrorKind mpi_error_kind(int rc) {
  int error_class = MPI_ERR_OTHER;
  if (MPI_Error_class(rc, &error_class) != MPI_SUCCESS) return ErrorKind::kEnvironment;
  switch (error_class) {
    case MPI_ERR_BUFFER:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_TAG:
    case MPI_ERR_RANK:
    case MPI_ERR_ROOT:
    case MPI_ERR_OP:
    case MPI_ERR_ARG:
    case MPI_ERR_TRUNCATE:
      return ErrorKind::kUsage;
    case MPI_ERR_COMM:
      return ErrorKind::kInternal;
    default:
      return ErrorKind::kEnvironment;
  }
}

// MPI itself failed.
[[noreturn, gnu::cold, gnu::noinline]] void fail_mpi(int rc, int rank, const Call& call,
                                                     const char* function) {
  throw CommError(mpi_error_kind(rc), rank, call.str(),
                  std::string(function) + " failed: " + error_text(rc));
}

// Every MPI call of a collective, send or receive goes through here: one
// that succeeded is progress for dlaunch's stall detection.
inline void check(int rc, int rank, const Call& call, const char* function) {
  if (rc != MPI_SUCCESS) [[unlikely]] {
    fail_mpi(rc, rank, call, function);
  }
  progress::completed();
}

// MPI_DATATYPE_NULL for a value outside the enum.
inline MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      break;  // no MPI type; refused with a message of its own (check_type)
  }
  return MPI_DATATYPE_NULL;
}

// Why mpi_type(type) is MPI_DATATYPE_NULL.
std::string type_error(DataType type) {
  if (type == DataType::kFloat16 || type == DataType::kBFloat16) {
    return std::string(to_string(type)) +
           " is not supported by the mpi backend (MPI has no such type): use the nccl backend "
           "or convert to float32";
  }
  return "invalid data type";
}

// kAvg reduces with MPI_SUM and divides afterwards. MPI_OP_NULL outside the enum.
inline MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
  }
  return MPI_OP_NULL;
}

template <typename T>
void divide_each(void* buf, std::size_t count, int n) {
  T* p = static_cast<T*>(buf);
  const T d = static_cast<T>(n);
  for (std::size_t i = 0; i < count; ++i) p[i] /= d;  // integers: truncates toward zero
}

void divide(void* buf, std::size_t count, DataType type, int n) {
  if (n == 1 || count == 0) return;
  switch (type) {
    case DataType::kFloat32:
      return divide_each<float>(buf, count, n);
    case DataType::kFloat64:
      return divide_each<double>(buf, count, n);
    case DataType::kInt32:
      return divide_each<std::int32_t>(buf, count, n);
    case DataType::kInt64:
      return divide_each<std::int64_t>(buf, count, n);
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return;  // refused before any MPI call
  }
}

inline char* bytes(void* p) { return static_cast<char*>(p); }
inline const char* bytes(const void* p) { return static_cast<const char*>(p); }

std::optional<long long> env_integer(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  long long value = 0;
  const char* end = v + std::strlen(v);
  auto [ptr, ec] = std::from_chars(v, end, value);
  if (ec != std::errc() || ptr != end || ptr == v) {
    throw CommError(ErrorKind::kUsage, launcher_rank_or(-1), "create(mpi)",
                    std::string(name) + "='" + v + "' is not an integer");
  }
  return value;
}

std::string env_text(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "(unset)" : v;
}

}  // namespace

constinit Mutex MpiProcessGroup::mutex_;
int MpiProcessGroup::live_groups_ = 0;
bool MpiProcessGroup::initialised_by_us_ = false;

int launcher_rank_or(int fallback) {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK"}) {
    const char* v = std::getenv(name);
    if (v == nullptr) continue;
    int value = 0;
    const char* end = v + std::strlen(v);
    auto [ptr, ec] = std::from_chars(v, end, value);
    if (ec != std::errc() || ptr != end || ptr == v || value < 0) return fallback;
    return value;
  }
  return fallback;
}

void check_launcher_world(int mpi_rank, int mpi_size) {
  const auto rank = env_integer("RANK");
  const auto world = env_integer("WORLD_SIZE");
  if ((!rank || *rank == mpi_rank) && (!world || *world == mpi_size)) return;
  throw CommError(
      ErrorKind::kUsage, launcher_rank_or(mpi_rank), "create(mpi)",
      "the launcher says RANK=" + env_text("RANK") + " WORLD_SIZE=" + env_text("WORLD_SIZE") +
          " but MPI_COMM_WORLD says rank " + std::to_string(mpi_rank) + " of size " +
          std::to_string(mpi_size) +
          ": MPI did not join the launcher's world (each worker an MPI singleton?). Start MPI "
          "workers with `dlaunch --mpi` or under mpirun");
}

int local_rank_from_env(int mpi_rank, int mpi_size) {
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"}) {
    const auto v = env_integer(name);
    if (!v) continue;
    if (*v < 0 || *v >= mpi_size) {
      throw CommError(ErrorKind::kUsage, launcher_rank_or(mpi_rank), "create(mpi)",
                      std::string(name) + "=" + std::to_string(*v) + " is out of range [0, " +
                          std::to_string(mpi_size) + ")");
    }
    return static_cast<int>(*v);
  }
  return 0;
}

MpiProcessGroup::MpiProcessGroup() {
  const int env_rank = launcher_rank_or(-1);
  MutexLock lock(mutex_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) {
    throw CommError(ErrorKind::kUsage, env_rank, "create(mpi)",
                    "MPI is already finalised in this process and cannot be initialised again "
                    "(create the ProcessGroup once and keep it until the end of main)");
  }
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised == 0) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      throw CommError(ErrorKind::kEnvironment, env_rank, "create(mpi)",
                      "MPI_Init_thread failed: " + error_text(rc));
    }
    initialised_by_us_ = true;
  }
  auto step = [&](int rc, const char* what) {
    if (rc != MPI_SUCCESS) {
      throw CommError(ErrorKind::kEnvironment, rank_ >= 0 ? rank_ : env_rank, "create(mpi)",
                      std::string(what) + " failed: " + error_text(rc));
    }
  };
  try {
    step(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup(MPI_COMM_WORLD)");
    step(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    step(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    step(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    int* tag_ub = nullptr;
    int flag = 0;
    step(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag), "MPI_Comm_get_attr");
    if (flag != 0 && tag_ub != nullptr) tag_ub_ = *tag_ub;
    check_launcher_world(rank_, size_);
    local_rank_ = local_rank_from_env(rank_, size_);
  } catch (...) {
    // Finalising waits for the other processes of the world: only safe alone.
    release(/*may_finalize=*/size_ <= 1);
    throw;
  }
  ++live_groups_;
  counted_ = true;
}

MpiProcessGroup::~MpiProcessGroup() {
  MutexLock lock(mutex_);
  release(/*may_finalize=*/true);
}

void MpiProcessGroup::release(bool may_finalize) noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0 && comm_ != MPI_COMM_NULL) {
    const int rc = MPI_Comm_free(&comm_);
    if (rc != MPI_SUCCESS) {
      std::fprintf(stderr, "comm: rank %d: MPI_Comm_free failed: %s\n", rank_,
                   error_text(rc).c_str());
    }
  }
  comm_ = MPI_COMM_NULL;
  if (counted_) {
    --live_groups_;
    counted_ = false;
  }
  if (may_finalize && finalized == 0 && live_groups_ == 0 && initialised_by_us_) {
    initialised_by_us_ = false;
    const int rc = MPI_Finalize();
    if (rc != MPI_SUCCESS) {
      std::fprintf(stderr, "comm: rank %d: MPI_Finalize failed: %s\n", rank_,
                   error_text(rc).c_str());
    }
  }
}

void MpiProcessGroup::set_max_count_per_call_for_testing(std::size_t n) {
  max_count_ = std::clamp<std::size_t>(n, 1, INT_MAX);
}

void MpiProcessGroup::all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op) {
  const Call call{.name = "all_reduce", .type = type, .count = count, .has_op = true, .op = op};
  const MPI_Datatype dt = mpi_type(type);
  const MPI_Op mop = mpi_op(op);
  if (dt == MPI_DATATYPE_NULL) [[unlikely]]
    fail(rank_, call, type_error(type));
  if (mop == MPI_OP_NULL) [[unlikely]]
    fail(rank_, call, "invalid reduce op");
  if (buf == nullptr && count != 0) [[unlikely]]
    fail(rank_, call, "buf is null");
  if (count <= max_count_) [[likely]] {
    check(MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(count), dt, mop, comm_), rank_, call,
          "MPI_Allreduce");
  } else {
    const std::size_t esz = element_size(type);
    for (std::size_t off = 0; off < count; off += max_count_) {
      const std::size_t n = std::min(max_count_, count - off);
      check(
          MPI_Allreduce(MPI_IN_PLACE, bytes(buf) + off * esz, static_cast<int>(n), dt, mop, comm_),
          rank_, call, "MPI_Allreduce");
    }
  }
  if (op == ReduceOp::kAvg) divide(buf, count, type, size_);
}

void MpiProcessGroup::broadcast(void* buf, std::size_t count, DataType type, int root) {
  const Call call{
      .name = "broadcast", .type = type, .count = count, .peer_label = "root", .peer = root};
  const MPI_Datatype dt = mpi_type(type);
  if (dt == MPI_DATATYPE_NULL) [[unlikely]]
    fail(rank_, call, type_error(type));
  if (root < 0 || root >= size_) [[unlikely]] {
    fail(rank_, call, "root is not in [0, " + std::to_string(size_) + ")");
  }
  if (buf == nullptr && count != 0) [[unlikely]]
    fail(rank_, call, "buf is null");
  const std::size_t esz = element_size(type);
  for (std::size_t off = 0; off < count; off += max_count_) {
    const std::size_t n = std::min(max_count_, count - off);
    check(MPI_Bcast(bytes(buf) + off * esz, static_cast<int>(n), dt, root, comm_), rank_, call,
          "MPI_Bcast");
  }
}

void MpiProcessGroup::all_gather(const void* send, void* recv, std::size_t count, DataType type) {
  const Call call{.name = "all_gather", .type = type, .count = count};
  const MPI_Datatype dt = mpi_type(type);
  if (dt == MPI_DATATYPE_NULL) [[unlikely]]
    fail(rank_, call, type_error(type));
  if (count == 0) return;
  if (send == nullptr || recv == nullptr) [[unlikely]]
    fail(rank_, call, "send or recv is null");
  const auto n = static_cast<std::size_t>(size_);
  const std::size_t esz = element_size(type);
  if (count > SIZE_MAX / n / esz) [[unlikely]]
    fail(rank_, call, "size() * count overflows");
  const std::size_t total = count * n;
  char* mine = bytes(recv) + static_cast<std::size_t>(rank_) * count * esz;
  const bool in_place = send == mine;
  if (!in_place && overlap(send, count * esz, recv, total * esz)) [[unlikely]] {
    fail(rank_, call, "send overlaps recv other than at recv + rank() * count");
  }
  if (total <= max_count_) [[likely]] {
    check(MPI_Allgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(count), dt, recv,
                        static_cast<int>(count), dt, comm_),
          rank_, call, "MPI_Allgather");
    return;
  }
  // More than one call can carry: every rank broadcasts its block in pieces.
  if (!in_place) std::memcpy(mine, send, count * esz);
  const std::size_t piece = std::max<std::size_t>(1, max_count_);
  for (int root = 0; root < size_; ++root) {
    char* block = bytes(recv) + static_cast<std::size_t>(root) * count * esz;
    for (std::size_t off = 0; off < count; off += piece) {
      const std::size_t k = std::min(piece, count - off);
      check(MPI_Bcast(block + off * esz, static_cast<int>(k), dt, root, comm_), rank_, call,
            "MPI_Bcast");
    }
  }
}

void MpiProcessGroup::reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                                     ReduceOp op) {
  const Call call{.name = "reduce_scatter", .type = type, .count = count, .has_op = true, .op = op};
  const MPI_Datatype dt = mpi_type(type);
  const MPI_Op mop = mpi_op(op);
  if (dt == MPI_DATATYPE_NULL) [[unlikely]]
    fail(rank_, call, type_error(type));
  if (mop == MPI_OP_NULL) [[unlikely]]
    fail(rank_, call, "invalid reduce op");
  if (count == 0) return;
  if (send == nullptr || recv == nullptr) [[unlikely]]
    fail(rank_, call, "send or recv is null");
  const auto n = static_cast<std::size_t>(size_);
  const std::size_t esz = element_size(type);
  if (count > SIZE_MAX / n / esz) [[unlikely]]
    fail(rank_, call, "size() * count overflows");
  const std::size_t total = count * n;
  if (overlap(send, total * esz, recv, count * esz)) [[unlikely]] {
    fail(rank_, call, "send and recv overlap");
  }
  if (total <= max_count_) [[likely]] {
    check(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), dt, mop, comm_), rank_,
          call, "MPI_Reduce_scatter_block");
  } else {
    // More than one call can carry: one rooted reduction per block and piece.
    for (std::size_t off = 0; off < count; off += max_count_) {
      const std::size_t k = std::min(max_count_, count - off);
      for (int root = 0; root < size_; ++root) {
        const char* in = bytes(send) + (static_cast<std::size_t>(root) * count + off) * esz;
        void* out = root == rank_ ? bytes(recv) + off * esz : nullptr;
        check(MPI_Reduce(in, out, static_cast<int>(k), dt, mop, root, comm_), rank_, call,
              "MPI_Reduce");
      }
    }
  }
  if (op == ReduceOp::kAvg) divide(recv, count, type, size_);
}

namespace {

// Arguments of send and recv; returns the MPI datatype.
MPI_Datatype check_point_to_point(int rank, int size, int tag_ub, const Call& call, const void* buf,
                                  std::size_t count, DataType type, int peer, int tag) {
  const MPI_Datatype dt = mpi_type(type);
  if (dt == MPI_DATATYPE_NULL) [[unlikely]]
    fail(rank, call, type_error(type));
  if (peer < 0 || peer >= size) [[unlikely]] {
    fail(rank, call, std::string(call.peer_label) + " is not in [0, " + std::to_string(size) + ")");
  }
  if (tag < 0 || tag > tag_ub) [[unlikely]] {
    fail(rank, call, "tag is not in [0, " + std::to_string(tag_ub) + "]");
  }
  if (buf == nullptr && count != 0) [[unlikely]]
    fail(rank, call, "buf is null");
  return dt;
}

}  // namespace

void MpiProcessGroup::barrier() {
  const Call call{.name = "barrier", .has_data = false};
  check(MPI_Barrier(comm_), rank_, call, "MPI_Barrier");
}

void MpiProcessGroup::send(const void* buf, std::size_t count, DataType type, int dst, int tag) {
  const Call call{.name = "send",
                  .type = type,
                  .count = count,
                  .peer_label = "dst",
                  .peer = dst,
                  .has_tag = true,
                  .tag = tag};
  const MPI_Datatype dt =
      check_point_to_point(rank_, size_, tag_ub_, call, buf, count, type, dst, tag);
  const std::size_t esz = element_size(type);
  std::size_t off = 0;
  do {  // a zero-count message is still a message
    const std::size_t n = std::min(max_count_, count - off);
    check(MPI_Send(bytes(buf) + off * esz, static_cast<int>(n), dt, dst, tag, comm_), rank_, call,
          "MPI_Send");
    off += n;
  } while (off < count);
}

void MpiProcessGroup::recv(void* buf, std::size_t count, DataType type, int src, int tag) {
  const Call call{.name = "recv",
                  .type = type,
                  .count = count,
                  .peer_label = "src",
                  .peer = src,
                  .has_tag = true,
                  .tag = tag};
  const MPI_Datatype dt =
      check_point_to_point(rank_, size_, tag_ub_, call, buf, count, type, src, tag);
  const std::size_t esz = element_size(type);
  std::size_t off = 0;
  do {
    const std::size_t n = std::min(max_count_, count - off);
    MPI_Status status;
    check(MPI_Recv(bytes(buf) + off * esz, static_cast<int>(n), dt, src, tag, comm_, &status),
          rank_, call, "MPI_Recv");
    int got = 0;
    check(MPI_Get_count(&status, dt, &got), rank_, call, "MPI_Get_count");
    if (got < 0 || static_cast<std::size_t>(got) != n) [[unlikely]] {
      fail(rank_, call,
           "received " + std::to_string(off + static_cast<std::size_t>(std::max(got, 0))) +
               " elements, expected " + std::to_string(count) + " (sender sent fewer)");
    }
    off += n;
  } while (off < count);
}

}  // namespace dlaunch::comm::mpi
