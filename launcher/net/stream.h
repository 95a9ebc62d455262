// One stream of --check's network test between nodes (issue 33): the
// controller runs them (controller/bandwidth_test.h), check/health.h judges
// them. One type and one rate for both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dlaunch::net {

struct Stream {
  std::size_t from = 0;
  std::size_t to = 0;
  std::uint32_t round = 0;  // 1, 2: the rings; 3, 4: the slow ones of 1, 2 again
  std::uint64_t bytes = 0;
  std::uint64_t micros = 0;
  std::string error;  // why it did not run
};

// Its rate in Gb/s; 0 when it did not run.
inline double gbps(const Stream& s) {
  return s.micros == 0 ? 0.0
                       : static_cast<double>(s.bytes) * 8 / static_cast<double>(s.micros) / 1e3;
}

}  // namespace dlaunch::net
