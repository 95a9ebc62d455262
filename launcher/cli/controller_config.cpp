#include "cli/controller_config.h"

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
  c.stall_abort = o.stall_action == "abort";
  c.output_dir = o.output_dir;
  c.bind_to = o.bind_to;
  c.map_by = o.map_by;
  c.oversubscribe = o.oversubscribe;
  c.report_bindings = o.report_bindings;
  return c;
}

}  // namespace dlaunch
