#include "jobs/report.h"

#include <ctime>
#include <string_view>
#include <vector>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "dlaunch/placement/mapping.h"
#include "dlaunch/process.h"
#include "dlaunch/text.h"
#include "jobs/error_file.h"

namespace dlaunch {

std::string index_ranges(const std::vector<std::size_t>& sorted) {
  // The notation of --report-bindings' CPU lists.
  return placement::cpu_list(std::vector<int>(sorted.begin(), sorted.end()));
}

namespace {

constexpr std::size_t kMaxTracebackLines = 60;  // the innermost frames, where the error is
constexpr std::size_t kMaxLineBytes = 1024;

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    out.emplace_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

void quote_lines(std::string& out, const std::vector<std::string>& lines, std::size_t keep_last) {
  std::size_t from = 0;
  if (lines.size() > keep_last) {
    from = lines.size() - keep_last;
    out += fmt::format("    | ... ({} earlier line(s) left out)\n", from);
  }
  for (std::size_t i = from; i < lines.size(); ++i) {
    out += "    | " + lines[i].substr(0, kMaxLineBytes) + "\n";
  }
}

// The worker's TORCHELASTIC_ERROR_FILE: PyTorch's message and traceback, or
// the text as it is when it is not what @record writes.
std::string format_error_file(const proto::Exited& e) {
  std::string out;
  const bool cut = e.error_file_data.size() >= proto::kMaxErrorFileBytes;
  if (auto err = parse_error_file(e.error_file_data)) {
    std::string when;
    if (!err->timestamp.empty()) {
      try {
        const std::time_t t = std::stoll(err->timestamp);
        std::tm tm{};
        if (::localtime_r(&t, &tm) != nullptr) when = fmt::format(" at {:%Y-%m-%d %H:%M:%S}", tm);
      } catch (const std::exception&) {
        when = " at " + err->timestamp;
      }
    }
    out += fmt::format("  error{} (from its error file {}):\n", when, e.error_file);
    for (const auto& l : split_lines(err->message)) out += "    " + printable(l) + "\n";
    if (!err->traceback.empty()) {
      out += "  traceback:\n";
      quote_lines(out, split_lines(err->traceback), kMaxTracebackLines);
    }
  } else {
    out += fmt::format("  its error file {}{}:\n", e.error_file,
                       cut ? " (first 64 KiB, not JSON as PyTorch writes it)"
                           : " (not JSON as PyTorch writes it)");
    quote_lines(out, split_lines(e.error_file_data), kMaxTracebackLines);
  }
  return out;
}

}  // namespace

bool allows_restart(const RootCause& cause) {
  return cause.kind == CauseKind::kWorker || cause.kind == CauseKind::kNode;
}

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
    case CauseKind::kStall:
      return kStallExitStatus;  // next to --timeout's 124, used for nothing else
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
        how = fmt::format("called MPI_Abort with code {}{}", e.code,
                          e.message.empty() ? "" : ": " + printable(e.message));
      } else if (e.kind == proto::ExitKind::kSpawnFailed) {
        how = "could not be started: " + printable(e.message);
      } else {
        how = fmt::format("exited with code {}", e.code);
      }
      out += fmt::format("dlaunch: job {} failed: rank {} {}\n", job_id, e.rank, how);
      out += fmt::format("  rank {}: node {}, local rank {}, pid {}, ran {:.2f} s\n", e.rank,
                         c.node, c.local_rank, e.pid, static_cast<double>(e.runtime_ms) / 1000.0);
      if (!e.error_file_data.empty()) out += format_error_file(e);
      if (!c.stderr_tail.empty()) {
        out += fmt::format("  last {} line(s) of its stderr:\n", c.stderr_tail.size());
        for (const auto& l : c.stderr_tail) out += "    | " + l + "\n";
      }
      if (!c.output_file.empty()) {
        out += fmt::format("  its whole output: {} (dlaunch logs {} --rank {})\n", c.output_file,
                           job_id, e.rank);
      }
      break;
    }
    case CauseKind::kNode:
      out += fmt::format("dlaunch: job {} {}: {}\n", job_id, c.for_restart ? "stopped" : "failed",
                         printable(c.message));
      break;
    case CauseKind::kLaunch:
      out += fmt::format("dlaunch: job {} could not start: {}\n", job_id, printable(c.message));
      break;
    case CauseKind::kInterrupted:
      out += fmt::format("dlaunch: job {} interrupted by {}\n", job_id, signal_name(c.signal));
      break;
    case CauseKind::kTimeout:
      out += fmt::format("dlaunch: job {} timed out: {}\n", job_id, printable(c.message));
      break;
    case CauseKind::kStall:
      out += fmt::format("dlaunch: job {} stalled: {}\n", job_id, printable(c.message));
      break;
  }
  out += c.stacks;
  for (const auto& a : c.also) out += "  also: " + printable(a) + "\n";
  for (const auto& n : c.notes) out += "  note: " + printable(n) + "\n";
  if (ranks_stopped > 0) {
    out += fmt::format("  {} {}rank(s) were stopped by dlaunch\n", ranks_stopped,
                       c.kind == CauseKind::kWorker ? "other " : "");
  }
  return out;
}

}  // namespace dlaunch
