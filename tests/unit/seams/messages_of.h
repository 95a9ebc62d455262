// The messages of one type in a list of control-protocol messages, oldest
// first: what the tests' fakes of a link, an agent or a node were sent.
#pragma once

#include <variant>
#include <vector>

#include "dlaunch/proto/protocol.h"

namespace dltest {

template <typename T>
std::vector<T> messages_of(const std::vector<dlaunch::proto::Message>& messages) {
  std::vector<T> out;
  for (const auto& m : messages) {
    if (const auto* t = std::get_if<T>(&m)) out.push_back(*t);
  }
  return out;
}

}  // namespace dltest
