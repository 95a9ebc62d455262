// The value a process would see for `name` in an EnvList (the last entry
// wins), or "<unset>": shared by the plan and user-environment tests.
#pragma once

#include <string>

#include "plan/plan.h"

namespace dltest {

inline std::string get(const dlaunch::EnvList& env, const std::string& name) {
  std::string v = "<unset>";
  for (const auto& [k, val] : env) {
    if (k == name) v = val;
  }
  return v;
}

}  // namespace dltest
