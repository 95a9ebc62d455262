#include "drivers/attempts.h"

#include <fmt/format.h>

#include "dlaunch/process.h"

namespace dlaunch {

std::string AttemptLog::summary(std::string_view last,
                                const std::vector<std::string>& excluded) const {
  if (ended_.empty()) return {};
  std::string out = fmt::format("dlaunch: {} attempt(s):\n", ended_.size() + 1);
  for (std::size_t k = 0; k < ended_.size(); ++k) {
    out += fmt::format("  attempt {}: {}\n", k, ended_[k]);
  }
  out += fmt::format("  attempt {}: {}\n", ended_.size(), last);
  for (const auto& e : excluded) out += "  excluded: " + e + "\n";
  return out;
}

std::string AttemptLog::failed(int status) { return fmt::format("failed, exit status {}", status); }

int run_attempts(int max_restarts, const AttemptHooks& hooks, int first) {
  AttemptLog log;
  int restarts = first;  // counted against max_restarts (a node joining is not)
  for (int k = first;; ++k) {
    const AttemptEnd end = hooks.run(k);
    const bool last =
        end.status == 0 || !end.restartable || (!end.joining && restarts >= max_restarts);
    if (hooks.decided) hooks.decided(last);
    const std::string failed = AttemptLog::failed(end.status);
    if (last) {
      hooks.finish(end.status == 0 ? "succeeded" : failed, log);
      return end.status;
    }
    if (hooks.keep) {
      if (auto why = hooks.keep(end)) {
        hooks.finish(failed + " (not restarted: " + *why + ")", log);
        return end.status;
      }
    }
    if (end.joining) {
      log.ended("stopped to take in a node waiting to join");
      write_all(2, "dlaunch: restarting the job to take in the node that is waiting\n");
    } else {
      log.ended(failed);
      ++restarts;
      write_all(2, fmt::format("dlaunch: restarting the job ({} of {} restarts){}\n", restarts,
                               max_restarts, hooks.restarting_suffix));
    }
    if (hooks.prepare) {
      if (auto why = hooks.prepare(end, restarts)) {
        // The restart said above never started: the attempt that ended is
        // the job's last, and the summary lists no attempt that did not run.
        write_all(2, fmt::format("dlaunch: the restart did not start: {}\n", *why));
        log.withdraw_last();
        hooks.finish(failed + " (not restarted: " + *why + ")", log);
        return end.status;
      }
    }
  }
}

}  // namespace dlaunch
