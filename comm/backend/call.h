// What a collective or point-to-point call was asked to do, kept as plain
// fields on the fast path and turned into text only when the call fails
// (shared by the backends, so that their errors read the same).
#pragma once

#include <cstddef>
#include <string>

#include "comm/process_group.h"

namespace dlaunch::comm::detail {

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
