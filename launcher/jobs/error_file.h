// What a failed worker wrote to its TORCHELASTIC_ERROR_FILE, read for the
// failure report. PyTorch's `@record` (torch.distributed.elastic) writes
//
//   {"message": {"message": "RuntimeError: ...",
//                "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1700000000"}}}
//
// and a plain {"message": "..."} is accepted too. Pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dlaunch {

struct WorkerError {
  std::string message;    // "RuntimeError: boom"
  std::string traceback;  // py_callstack, may be empty
  std::string timestamp;  // seconds since the epoch as PyTorch wrote it, may be empty
};

// nullopt when text is not JSON of either form (the report then shows it raw).
std::optional<WorkerError> parse_error_file(std::string_view text);

}  // namespace dlaunch
