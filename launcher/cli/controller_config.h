// The controller's settings that come straight from the command line, the
// same in the head-node mode (main.cpp) and the per-node mode
// (drivers/pernode.cpp); each mode then sets what is its own (the agent, the
// working directory, ports, the store, MPI, stdin, progress).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "cli/options.h"
#include "controller/controller.h"

namespace dlaunch {

// Seconds as the command line gives them, as the controller counts them.
std::chrono::milliseconds option_ms(double seconds);

ControllerConfig controller_config(const Options& o);

// The report's note when a .py's Python failed: `interpreter` as found here
// (PATH in `env`), the other Pythons on PATH, and how to choose one.
std::string python_hint(const std::string& interpreter, const std::vector<std::string>& env);

}  // namespace dlaunch
