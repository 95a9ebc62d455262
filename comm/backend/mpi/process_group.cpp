// The backend-independent part of dlaunch::comm::ProcessGroup: names, CommError,
// parse_backend, and create() choosing the backend.
#include "comm/process_group.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/mpi/mpi_process_group.h"
#ifdef DLAUNCH_WITH_NCCL
#include "backend/nccl/nccl_process_group.h"
#endif

namespace dlaunch::comm {
namespace {

std::string describe(int rank, const std::string& op, const std::string& reason) {
  std::string text;
  if (rank >= 0) text = "rank " + std::to_string(rank) + ": ";
  return text + op + ": " + reason;
}

}  // namespace

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::kMpi:
      return "mpi";
    case Backend::kNccl:
      return "nccl";
  }
  return "unknown-backend";
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown-op";
}

const char* to_string(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
  }
  return "unknown-type";
}

std::size_t element_size(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
  }
  return 0;
}

CommError::CommError(ErrorKind kind, int rank, std::string op, const std::string& reason)
    : Error(kind, describe(rank, op, reason)), rank_(rank), op_(std::move(op)) {}

CommError::CommError(int rank, std::string op, const std::string& reason)
    : CommError(ErrorKind::kEnvironment, rank, std::move(op), reason) {}

Backend parse_backend(const std::string& name) {
  if (name == "mpi") return Backend::kMpi;
  if (name == "nccl") return Backend::kNccl;
  throw CommError(ErrorKind::kUsage, -1, "parse_backend",
                  "unknown backend '" + name + "' (choices: mpi, nccl)");
}

bool nccl_available() {
#ifdef DLAUNCH_WITH_NCCL
  return true;
#else
  return false;
#endif
}

std::chrono::milliseconds collective_timeout_from_env() {
  constexpr const char* kName = "DLAUNCH_COLLECTIVE_TIMEOUT";
  const char* v = std::getenv(kName);
  if (v == nullptr || *v == '\0') return std::chrono::milliseconds(600'000);
  double seconds = -1;
  const char* end = v + std::strlen(v);
  auto [ptr, ec] = std::from_chars(v, end, seconds);
  if (ec != std::errc() || ptr != end || !(seconds >= 0) || seconds > 1e9) {
    throw CommError(ErrorKind::kUsage, mpi::launcher_rank_or(-1), "create",
                    std::string(kName) + "='" + v +
                        "' is not a number of seconds (0 or more; 0 turns the timeout off)");
  }
  return std::chrono::milliseconds(std::llround(seconds * 1000.0));
}

std::unique_ptr<ProcessGroup> ProcessGroup::create(Backend backend) {
  return create(backend, GroupOptions{});
}

std::unique_ptr<ProcessGroup> ProcessGroup::create(Backend backend,
                                                   [[maybe_unused]] const GroupOptions& options) {
  switch (backend) {
    case Backend::kMpi:
      return std::make_unique<mpi::MpiProcessGroup>();
    case Backend::kNccl:
#ifdef DLAUNCH_WITH_NCCL
      return nccl::make_nccl_process_group(options);
#else
      throw CommError(ErrorKind::kUsage, mpi::launcher_rank_or(-1), "create(nccl)",
                      "this build has no NCCL backend (comm was built without CUDA/NCCL: "
                      "CMake found no CUDA toolkit with nccl.h and libnccl); use the mpi backend");
#endif
  }
  throw CommError(ErrorKind::kUsage, mpi::launcher_rank_or(-1), "create",
                  "unknown backend value " + std::to_string(static_cast<int>(backend)));
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::check_span_sizes(const char* op, DataType type, std::size_t part,
                                    std::size_t whole, bool part_is_recv) const {
  const auto n = static_cast<std::size_t>(size());
  if (whole / n == part && whole % n == 0) return;
  const char* part_name = part_is_recv ? "recv" : "send";
  const char* whole_name = part_is_recv ? "send" : "recv";
  throw CommError(
      ErrorKind::kUsage, rank(),
      std::string(op) + "(" + to_string(type) + ", " + std::to_string(part) + " elements)",
      std::string(whole_name) + " has " + std::to_string(whole) + " elements, expected size() * " +
          part_name + " = " + std::to_string(n) + " * " + std::to_string(part));
}

}  // namespace dlaunch::comm
