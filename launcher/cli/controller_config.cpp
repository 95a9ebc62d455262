#include "cli/controller_config.h"

#include <unistd.h>

#include <fmt/format.h>

#include "dlaunch/process.h"

namespace dlaunch {

std::chrono::milliseconds option_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
}

ControllerConfig controller_config(const Options& o) {
  ControllerConfig c;
  c.kill_grace = option_ms(o.kill_grace_s);
  c.heartbeat_timeout = option_ms(o.heartbeat_timeout_s);
  c.start_timeout = option_ms(o.start_timeout_s);
  c.timeout = option_ms(o.timeout_s);
  c.warn_signal = o.warn_signal;
  c.warn_before = std::chrono::seconds(o.warn_before_s);
  c.nohup = o.nohup;
  c.stack_timeout = option_ms(o.stack_timeout_s);
  c.stall_timeout = option_ms(o.stall_timeout_s);
  c.stall_abort = o.stall_action == StallAction::kAbort;
  c.output_dir = o.output_dir;
  c.bind_to = o.bind_to;
  c.container = o.container;
  c.map_by = o.map_by;
  c.oversubscribe = o.oversubscribe;
  c.report_bindings = o.report_bindings;
  c.forward_signals = o.forward_signals;
  if (!o.auto_python.empty()) c.python_hint = python_hint(o.auto_python, current_environment());
  return c;
}

std::string python_hint(const std::string& interpreter, const std::vector<std::string>& env) {
  const std::string found = find_program(interpreter, env, ".");
  std::string others;
  std::string path;
  for (const auto& kv : env) {
    if (kv.rfind("PATH=", 0) == 0) path = kv.substr(5);
  }
  std::size_t start = 0;
  while (start <= path.size() && interpreter.find('/') == std::string::npos) {
    const auto colon = path.find(':', start);
    const std::string dir = path.substr(start, colon - start);
    start = colon == std::string::npos ? path.size() + 1 : colon + 1;
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + interpreter;
    if (candidate != found && ::access(candidate.c_str(), X_OK) == 0 &&
        others.find(candidate) == std::string::npos) {
      others += (others.empty() ? "" : ", ") + candidate;
    }
  }
  return fmt::format(
      "dlaunch ran the program under `{}` ({}{}), the Python of PYTHON_EXEC, else the first "
      "python3 on PATH; set PYTHON_EXEC to the interpreter that has your packages, the same on "
      "every node (e.g. PYTHON_EXEC={}), or give it before the program",
      interpreter, found.empty() ? "not found on this machine" : "here: " + found,
      others.empty() ? "" : "; other Pythons on PATH here: " + others,
      others.empty() ? "/usr/bin/python3" : others.substr(0, others.find(',')));
}

}  // namespace dlaunch
