// Guard: a small process forked by the agent before anything else, so that
// killing the agent with SIGKILL still takes its workers down.
//
// The agent tells the guard every worker's process group. If the pipe from
// the agent closes without a "disarm" (the agent died), the guard SIGKILLs
// those process groups and every process whose environment carries this
// agent's token (grandchildren that left the group), removes the folders it
// was given (the workers' error files), runs the commands it was given (the
// removal of the node's container), each bounded in time, then exits.
#pragma once

#include <sys/types.h>

#include <string>

#include "dlaunch/unique_fd.h"
#include "os.h"

namespace dlaunch::agent {

class Guard final : public GuardLink {
 public:
  // Forks the guard. token_entry is "NAME=VALUE" as set in workers' env.
  explicit Guard(const std::string& token_entry);
  ~Guard() override;
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

  void watch_process_group(pid_t pgid) override;
  void remove_on_death(const std::string& dir) override;
  void kill_cgroup_on_death(const std::string& cgroup) override;
  void run_on_death(const std::vector<std::string>& argv) override;
  void disarm() override;
  pid_t pid() const override { return pid_; }

 private:
  pid_t pid_ = -1;
  UniqueFd to_guard_;
};

}  // namespace dlaunch::agent
