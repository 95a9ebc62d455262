// Shared by the comm_mpi_tests files. The tests run inside an MPI job: every
// rank runs every test (same order: do not shuffle), rank 0 prints. A test
// must make the same collective calls on every rank, so prefer EXPECT_* over
// ASSERT_* around collectives (an early return on one rank hangs the others
// until the CTest timeout).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "comm/process_group.h"

namespace comm_test {

// The group main() created for the whole run.
dlaunch::comm::ProcessGroup& pg();

// After each test every rank learns which ranks failed it; rank 0 (the one
// that prints) adds a failure naming the others.
class MpiTest : public ::testing::Test {
 protected:
  void TearDown() override;
};

// A small value that rank r holds at element i: exact in every data type,
// sign alternating (so integer kAvg rounds both ways), different per rank.
inline std::int64_t value(int r, std::size_t i) {
  const auto base = static_cast<std::int64_t>(i % 7) + 1 + 3 * static_cast<std::int64_t>(r);
  return (i % 2 == 1) ? -base : base;
}

template <typename T>
std::vector<T> values(int r, std::size_t count, std::size_t first = 0) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<T>(value(r, first + i));
  return v;
}

// What op over every rank's value(r, i) must give, in T.
template <typename T>
T expected(dlaunch::comm::ReduceOp op, int size, std::size_t i) {
  std::int64_t sum = 0, lo = value(0, i), hi = value(0, i);
  for (int r = 0; r < size; ++r) {
    sum += value(r, i);
    lo = std::min(lo, value(r, i));
    hi = std::max(hi, value(r, i));
  }
  switch (op) {
    case dlaunch::comm::ReduceOp::kSum:
      return static_cast<T>(sum);
    case dlaunch::comm::ReduceOp::kAvg:
      if constexpr (std::is_floating_point_v<T>) {
        // In double then T: double rounding is harmless for one division.
        return static_cast<T>(static_cast<double>(sum) / size);
      } else {
        return static_cast<T>(sum / size);  // truncates toward zero
      }
    case dlaunch::comm::ReduceOp::kMin:
      return static_cast<T>(lo);
    case dlaunch::comm::ReduceOp::kMax:
      return static_cast<T>(hi);
  }
  return T{};
}

// Calls f.template operator()<T>() with the C++ type of `type`.
template <typename F>
void with_type(dlaunch::comm::DataType type, F&& f) {
  switch (type) {
    case dlaunch::comm::DataType::kFloat32:
      return f.template operator()<float>();
    case dlaunch::comm::DataType::kFloat64:
      return f.template operator()<double>();
    case dlaunch::comm::DataType::kInt32:
      return f.template operator()<std::int32_t>();
    case dlaunch::comm::DataType::kInt64:
      return f.template operator()<std::int64_t>();
    case dlaunch::comm::DataType::kFloat16:
    case dlaunch::comm::DataType::kBFloat16:
      break;  // not an MPI type: the mpi backend refuses them (errors_test)
  }
}

inline const dlaunch::comm::DataType kAllTypes[] = {
    dlaunch::comm::DataType::kFloat32, dlaunch::comm::DataType::kFloat64,
    dlaunch::comm::DataType::kInt32, dlaunch::comm::DataType::kInt64};
inline const dlaunch::comm::ReduceOp kAllOps[] = {
    dlaunch::comm::ReduceOp::kSum, dlaunch::comm::ReduceOp::kAvg, dlaunch::comm::ReduceOp::kMin,
    dlaunch::comm::ReduceOp::kMax};

}  // namespace comm_test
