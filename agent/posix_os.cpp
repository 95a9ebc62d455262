#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "dlaunch/private_dir.h"
#include "guard.h"
#include "os.h"

namespace dlaunch::agent {

void PosixOs::become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

std::unique_ptr<GuardLink> PosixOs::start_guard(const std::string& token_entry) {
  return std::make_unique<Guard>(token_entry);
}

SpawnResult PosixOs::spawn(const SpawnOptions& opts) { return dlaunch::spawn(opts); }

void PosixOs::signal_group(pid_t pgid, int sig) { ::kill(-pgid, sig); }

void PosixOs::signal(pid_t pid, int sig) { ::kill(pid, sig); }

std::vector<pid_t> PosixOs::descendants() { return descendants_of(::getpid()); }

pid_t PosixOs::process_group(pid_t pid) { return ::getpgid(pid); }

std::vector<std::pair<pid_t, int>> PosixOs::reap() {
  std::vector<std::pair<pid_t, int>> out;
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) out.emplace_back(pid, status);
  return out;
}

char PosixOs::process_state(pid_t pid) { return dlaunch::process_state(pid); }

std::string PosixOs::make_private_dir(const std::string& prefix) {
  return dlaunch::make_private_dir(runtime_base_dir(), prefix);
}

void PosixOs::remove_dir(const std::string& dir) {
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace dlaunch::agent
