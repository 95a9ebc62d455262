// Random identifiers and secrets (job ids, store secrets, agent tokens).
#pragma once

#include <cstddef>
#include <string>

namespace dlaunch {

// 2*bytes lowercase hex digits from the kernel's CSPRNG (getrandom(2)).
// Throws std::system_error rather than ever returning something predictable.
std::string random_hex(std::size_t bytes);

}  // namespace dlaunch
