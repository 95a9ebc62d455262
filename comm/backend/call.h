// What a collective or point-to-point call was asked to do, kept as plain
// fields on the fast path and turned into text only when the call fails
// (shared by the backends, so that their errors read the same).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/process_group.h"

namespace dlaunch::comm::detail {

// [a, a+na) and [b, b+nb) share a byte.
inline bool overlap(const void* a, std::size_t na, const void* b, std::size_t nb) {
  if (na == 0 || nb == 0) return false;
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + nb && y < x + na;
}

struct Call {
  const char* name;
  DataType type = DataType::kFloat32;
  std::size_t count = 0;
  bool has_data = true;
  bool has_op = false;
  ReduceOp op = ReduceOp::kSum;
  const char* peer_label = nullptr;  // "root", "dst", "src"
  int peer = 0;
  bool has_tag = false;
  int tag = 0;

  std::string str() const {
    std::string s = std::string(name) + "(";
    const char* sep = "";
    if (has_data) {
      s += std::string(to_string(type)) + ", " + std::to_string(count) +
           (count == 1 ? " element" : " elements");
      sep = ", ";
    }
    if (has_op) {
      s += sep + std::string(to_string(op));
      sep = ", ";
    }
    if (peer_label != nullptr) {
      s += sep + std::string(peer_label) + " " + std::to_string(peer);
      sep = ", ";
    }
    if (has_tag) s += sep + std::string("tag ") + std::to_string(tag);
    return s + ")";
  }
};

}  // namespace dlaunch::comm::detail
