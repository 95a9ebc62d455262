// How the attempts of one job ended, for the summary a driver prints when it
// stops after a restart (--max-restarts): the head-node driver and the
// per-node driver keep the same record and print the same lines.
//
//   dlaunch: 3 attempt(s):
//     attempt 0: failed, exit status 1
//     attempt 1: stopped to take in a node waiting to join
//     attempt 2: succeeded
//     excluded: node3 (lost: ...)
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dlaunch {

class AttemptLog {
 public:
  // One attempt ended and another follows; `how` as summary() prints it.
  void ended(std::string how) { ended_.push_back(std::move(how)); }
  // Attempts ended so far (the one running now is not counted).
  std::size_t count() const { return ended_.size(); }

  // The summary once the last attempt ended as `last` ("succeeded",
  // failed(N), ...), with a line per excluded node; empty when the job had one
  // attempt only (nothing to summarize: its report says it all).
  std::string summary(std::string_view last, const std::vector<std::string>& excluded = {}) const;

  static std::string failed(int status);  // "failed, exit status N"

 private:
  std::vector<std::string> ended_;
};

}  // namespace dlaunch
