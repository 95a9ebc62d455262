// One default-made message of each type of the control protocol, in the
// variant's order: for tests that hold a table (which state accepts which
// message) to every type there is, including the ones added later.
#pragma once

#include <cstddef>
#include <utility>
#include <variant>
#include <vector>

#include "dlaunch/proto/protocol.h"

namespace dlaunch::test {

inline std::vector<proto::Message> every_message() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return std::vector<proto::Message>{proto::Message(std::in_place_index<I>)...};
  }
  (std::make_index_sequence<std::variant_size_v<proto::Message>>{});
}

}  // namespace dlaunch::test
