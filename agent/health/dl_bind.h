// A function of a library loaded at run time (dlopen), by its symbol, into a
// typed pointer: the NVIDIA libraries the health checks use are never linked.
#pragma once

#include <dlfcn.h>

namespace dlaunch::agent::health {

// false when `lib` has no `symbol`.
template <typename F>
bool bind_symbol(void* lib, const char* symbol, F& out) {
  out = reinterpret_cast<F>(::dlsym(lib, symbol));  // NOLINT(*-reinterpret-cast): dlsym's way
  return out != nullptr;
}

}  // namespace dlaunch::agent::health
