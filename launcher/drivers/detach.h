// dlaunch --detach (-d): the head goes on as a daemon, the command returns.
//
// detach_head() forks once every check that can stop the job before it starts
// has passed (the hostfile, the plan, this machine's programs and agent), and
// before anything starts a thread or reaches a node. The child is the job's
// head for the rest of its life: its own session (no terminal, so no SIGHUP
// when the terminal closes, no Ctrl-C from it), stdin and stdout /dev/null
// (the ranks' output is in the job's record), and stderr a pipe to the
// command until every node is ready, so that whatever happens in the start
// (an SSH failure, a missing program, its report) is shown there as it would
// be without --detach. The parent (the command the user ran) copies that to
// its stderr, and returns:
//  - once every node of an attempt is ready: prints the job's name on stdout
//    (JOB=$(dlaunch -d ...)) and how to reach it on stderr, exit 0;
//  - when the head ends first (the job could not start): the head's exit
//    status, its report already shown.
// At that moment the head moves its stderr to `head.log` in the job's record
// (0600), where `dlaunch attach` follows it; the record keeps the job's exit
// status for `dlaunch wait`.
#pragma once

#include <optional>
#include <string>

namespace dlaunch {

class EventLog;

class DetachedHead {
 public:
  // The head, in the child: `ctl` is the pipe to the command.
  explicit DetachedHead(int ctl) : ctl_(ctl) {}
  DetachedHead(DetachedHead&& o) noexcept : ctl_(o.ctl_) { o.ctl_ = -1; }
  DetachedHead(const DetachedHead&) = delete;
  DetachedHead& operator=(const DetachedHead&) = delete;
  DetachedHead& operator=(DetachedHead&&) = delete;
  ~DetachedHead();

  // (Moved only before watch(): the event writer holds `this`.)
  // Watches the job's events: once `nodes` nodes of one attempt said
  // node_ready, the head's stderr moves to `record_dir`/head.log (or
  // /dev/null without a record) and the command is told `name`.
  void watch(EventLog& events, int nodes, const std::string& record_dir, const std::string& name);

 private:
  void ready();
  int ctl_ = -1;
  bool ready_ = false;
  int nodes_ = 0;
  int seen_ = 0;
  std::string record_dir_;
  std::string name_;
};

// Forks. In the command (the parent) it sets `exit_status` to what the
// command exits with and returns nothing; in the head (the child), it
// returns the DetachedHead to watch the job with.
std::optional<DetachedHead> detach_head(std::optional<int>& exit_status);

}  // namespace dlaunch
