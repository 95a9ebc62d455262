// dlaunch --detach (-d): the head goes on as a daemon, the command returns.
//
// detach_head() forks once every check that can stop the job before it starts
// has passed (the hostfile, the plan, this machine's programs and agent), and
// before anything starts a thread or reaches a node. The child is the job's
// head for the rest of its life: its own session (no terminal, so no SIGHUP
// when the terminal closes, no Ctrl-C from it), stdin and stdout /dev/null
// (the ranks' output is in the job's record), and stderr a file of its own
// from the start: an unnamed file in the jobs folder (O_TMPFILE), which
// becomes `head.log` in the job's record (0600) once every node is ready,
// where `dlaunch attach` follows it. Until then the parent (the command the
// user ran) copies what the head writes there to its own stderr, so that
// whatever happens in the start (an SSH failure, a missing program, its
// report) is shown as it would be without --detach; it returns:
//  - once every node of an attempt is ready: prints the job's name on stdout
//    (JOB=$(dlaunch -d ...)) and how to reach it on stderr, exit 0;
//  - when the head ends first (the job could not start): the head's exit
//    status, its report already shown.
// One file for the head's lines, not a pipe switched at the ready: the
// console writes through its own copy of stderr (output/console.h), which a
// later dup2 would not reach. The record keeps the job's exit status for
// `dlaunch wait`.
#pragma once

#include <optional>
#include <string>

namespace dlaunch {

class EventLog;

class DetachedHead {
 public:
  // The head, in the child: `ctl` is the pipe to the command, `log` the
  // head's stderr file.
  DetachedHead(int ctl, int log) : ctl_(ctl), log_(log) {}
  DetachedHead(DetachedHead&& o) noexcept : ctl_(o.ctl_), log_(o.log_) {
    o.ctl_ = -1;
    o.log_ = -1;
  }
  DetachedHead(const DetachedHead&) = delete;
  DetachedHead& operator=(const DetachedHead&) = delete;
  DetachedHead& operator=(DetachedHead&&) = delete;
  ~DetachedHead();

  // (Moved only before watch(): the event writer holds `this`.)
  // Watches the job's events: once `nodes` nodes of one attempt said
  // `ready_event` (node_ready; node_resumed for a new head taking a job
  // over), the head's stderr file becomes `record_dir`/head.log (none
  // without a record; the heads' before it head.log.1, .2, ...) and the
  // command is told `name`.
  void watch(EventLog& events, int nodes, const std::string& record_dir, const std::string& name,
             const std::string& ready_event = "node_ready");

 private:
  void ready();
  int ctl_ = -1;
  int log_ = -1;
  bool ready_ = false;
  int nodes_ = 0;
  int seen_ = 0;
  std::string record_dir_;
  std::string name_;
};

// Forks. In the command (the parent) it sets `exit_status` to what the
// command exits with and returns nothing; in the head (the child), it
// returns the DetachedHead to watch the job with. `log_dir`: where the
// head's stderr file is made (the jobs folder, so that it can become the
// record's head.log); empty: a file in memory (no record to keep it).
std::optional<DetachedHead> detach_head(std::optional<int>& exit_status,
                                        const std::string& log_dir);

}  // namespace dlaunch
