#include "launcher/controller/report.h"

#include <fmt/format.h>

#include "dlaunch/process.h"

namespace dlaunch {

int exit_status(const RootCause& c) {
  switch (c.kind) {
    case CauseKind::kNone:
      return 0;
    case CauseKind::kWorker:
      if (c.exit.kind == proto::ExitKind::kSignaled) return 128 + c.exit.signal;
      return c.exit.code;
    case CauseKind::kInterrupted:
      return 128 + c.signal;
    case CauseKind::kNode:
    case CauseKind::kLaunch:
      return 1;
    case CauseKind::kTimeout:
      return 124;  // timeout(1)'s convention
  }
  return 1;
}

std::string format_report(const std::string& job_id, const RootCause& c, int ranks_stopped) {
  std::string out;
  switch (c.kind) {
    case CauseKind::kNone:
      return {};
    case CauseKind::kWorker: {
      const auto& e = c.exit;
      std::string how;
      if (e.kind == proto::ExitKind::kSignaled) {
        how =
            fmt::format("was killed by {} (exit status {})", signal_name(e.signal), 128 + e.signal);
      } else if (e.kind == proto::ExitKind::kAborted) {
        how = fmt::format("called MPI_Abort with code {}{}", e.code, e.message.empty() ? "" : ": " + e.message);
      } else if (e.kind == proto::ExitKind::kSpawnFailed) {
        how = "could not be started: " + e.message;
      } else {
        how = fmt::format("exited with code {}", e.code);
      }
      out += fmt::format("dlaunch: job {} failed: rank {} {}\n", job_id, e.rank, how);
      out += fmt::format("  rank {}: node {}, local rank {}, pid {}, ran {:.2f} s\n", e.rank,
                         c.node, c.local_rank, e.pid, static_cast<double>(e.runtime_ms) / 1000.0);
      if (!c.stderr_tail.empty()) {
        out += fmt::format("  last {} line(s) of its stderr:\n", c.stderr_tail.size());
        for (const auto& l : c.stderr_tail) out += "    | " + l + "\n";
      }
      break;
    }
    case CauseKind::kNode:
      out += fmt::format("dlaunch: job {} failed: {}\n", job_id, c.message);
      break;
    case CauseKind::kLaunch:
      out += fmt::format("dlaunch: job {} could not start: {}\n", job_id, c.message);
      break;
    case CauseKind::kInterrupted:
      out += fmt::format("dlaunch: job {} interrupted by {}\n", job_id, signal_name(c.signal));
      break;
    case CauseKind::kTimeout:
      out += fmt::format("dlaunch: job {} timed out: {}\n", job_id, c.message);
      break;
  }
  for (const auto& a : c.also) out += "  also: " + a + "\n";
  if (ranks_stopped > 0) {
    out += fmt::format("  {} {}rank(s) were stopped by dlaunch\n", ranks_stopped,
                       c.kind == CauseKind::kWorker ? "other " : "");
  }
  return out;
}

}  // namespace dlaunch
