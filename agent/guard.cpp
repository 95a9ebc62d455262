#include "guard.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "dlaunch/error.h"
#include "dlaunch/process.h"
#include "dlaunch/tunables.h"

namespace dlaunch::agent {
namespace {

[[noreturn]] void guard_main(int from_agent, const std::string& token_entry) {
  std::vector<pid_t> groups;
  std::vector<std::string> dirs;
  std::string buf;
  char chunk[256];
  for (;;) {
    ssize_t n = ::read(from_agent, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (line == "D") ::_exit(0);
      if (line.size() > 2 && line[0] == 'P') groups.push_back(std::atoi(line.c_str() + 2));
      if (line.size() > 2 && line[0] == 'R') dirs.push_back(line.substr(2));
    }
  }
  // The agent is gone without disarming: take everything of its down.
  for (int round = 0; round < timing::kGuardKillRounds; ++round) {
    bool any = false;
    for (pid_t g : groups) {
      if (::kill(-g, SIGKILL) == 0) any = true;
    }
    for (pid_t p : pids_with_env_entry(token_entry)) {
      if (::kill(p, SIGKILL) == 0) any = true;
    }
    if (!any) break;
    ::usleep(static_cast<useconds_t>(timing::kGuardKillRound.count()) * 1000);
  }
  for (const auto& d : dirs) {
    std::error_code ignored;
    std::filesystem::remove_all(d, ignored);
  }
  ::_exit(0);
}

}  // namespace

Guard::Guard(const std::string& token_entry) {
  auto [r, w] = make_pipe();
  pid_ = ::fork();
  if (pid_ < 0)
    throw Error(ErrorKind::kEnvironment,
                std::string("fork of guard failed: ") + std::strerror(errno));
  if (pid_ == 0) {
    ::setpgid(0, 0);  // not in the agent's group: a group-wide kill must not take it
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(s, SIG_IGN);
    const int keep = r.release();
    for (int fd = 0; fd < 2; ++fd) {
      // stdin/stdout are the control channel: the guard must not keep it open.
      int devnull = ::open("/dev/null", O_RDWR);
      ::dup2(devnull, fd);
      ::close(devnull);
    }
    ::close_range(3, static_cast<unsigned>(keep) - 1, 0);
    ::close_range(static_cast<unsigned>(keep) + 1, ~0u, 0);
    guard_main(keep, token_entry);
  }
  to_guard_ = std::move(w);
}

Guard::~Guard() = default;  // closing the pipe without "D" arms the guard

void Guard::watch_process_group(pid_t pgid) {
  write_all(to_guard_.get(), "P " + std::to_string(pgid) + "\n");
}

void Guard::remove_on_death(const std::string& dir) {
  if (dir.find('\n') == std::string::npos) write_all(to_guard_.get(), "R " + dir + "\n");
}

void Guard::disarm() {
  write_all(to_guard_.get(), "D\n");
  to_guard_.reset();
}

}  // namespace dlaunch::agent
