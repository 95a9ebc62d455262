// One key of a job's event (jobs/events.h, docs/events.md) and its value.
#pragma once

#include <string>
#include <variant>

namespace dlaunch {

struct EventField {
  std::string key;
  std::variant<std::string, long long, double, bool> value;
};

}  // namespace dlaunch
