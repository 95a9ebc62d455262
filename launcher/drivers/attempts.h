// The attempts of one job (--max-restarts): the one restart loop of the
// head-node driver and the per-node driver (run_attempts), and how each
// attempt ended, for the summary either prints when it stops after a
// restart:
//
//   dlaunch: 3 attempt(s):
//     attempt 0: failed, exit status 1
//     attempt 1: stopped to take in a node waiting to join
//     attempt 2: succeeded
//     excluded: node3 (lost: ...)
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlaunch {

class AttemptLog {
 public:
  // One attempt ended and another follows; `how` as summary() prints it.
  void ended(std::string how) { ended_.push_back(std::move(how)); }
  // The attempt said ended last is the last after all (the one that was to
  // follow it never started): summary()'s `last` is its.
  void withdraw_last() {
    if (!ended_.empty()) ended_.pop_back();
  }
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

// How one attempt ended, as the restart loop judges it.
struct AttemptEnd {
  int status = 0;
  // Another attempt may help: a failed rank, a lost node; not an interrupt,
  // a timeout, a launch error (it would fail the same way).
  bool restartable = false;
  // Not a failure: the job stopped to take in a node waiting to join (per-node
  // mode); the restart is not counted against --max-restarts.
  bool joining = false;
};

// What a driver does at each point of the loop. Only `run` and `finish` are
// needed.
struct AttemptHooks {
  // Runs attempt k (0 first) and says how it ended.
  std::function<AttemptEnd(int k)> run;
  // The loop's decision on the attempt that ended: last, or another follows
  // (per-node mode tells the rendezvous). Before anything is said.
  std::function<void(bool last)> decided;
  // Another attempt is to follow, before it is counted: what must hold for
  // it (the nodes left, after a lost one); nullopt to go on, else why not.
  std::function<std::optional<std::string>(const AttemptEnd& end)> keep;
  // Counted and said (the restarting line): what the next attempt needs (the
  // nodes checked again, a new plan); nullopt to go on, else why not.
  std::function<std::optional<std::string>(const AttemptEnd& end, int restart)> prepare;
  // The job ended (run_attempts returns its status next); `last` is how its
  // last attempt ended, for the summary ("succeeded", AttemptLog::failed(N),
  // "... (not restarted: WHY)"); `log` has the attempts before it.
  std::function<void(const std::string& last, const AttemptLog& log)> finish;
  // Said after "restarting the job (k of N restarts)".
  std::string restarting_suffix;
};

// Runs attempts until one succeeds, one cannot be restarted, max_restarts
// counted restarts are spent, or a hook says the next cannot be had; says
// each restart on stderr. Returns the last attempt's status. `first`: the
// number of the first attempt, and the restarts already counted before it
// (a new head taking a restarted job over); the summary lists this loop's
// attempts.
int run_attempts(int max_restarts, const AttemptHooks& hooks, int first = 0);

}  // namespace dlaunch
