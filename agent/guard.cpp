#include "guard.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dlaunch/codec.h"
#include "dlaunch/error.h"
#include "dlaunch/process.h"
#include "dlaunch/tunables.h"

namespace dlaunch::agent {
namespace {

// What the agent tells its guard, one frame each (dlaunch/codec.h):
//   u32 length of the rest | u8 kind | payload
// kWatch: i32 process group; kRemove: bytes path; kDisarm: nothing.
// kCgroup: bytes path of the job's cgroup. kRun: u32 count, then each
// argument as bytes.
// How long the guard waits for each command it runs once the agent died (the
// removal of the node's container) before it kills it.
constexpr std::chrono::milliseconds kGuardCommandLimit{30000};

enum class GuardMessage : std::uint8_t {
  kWatch = 1,
  kRemove = 2,
  kDisarm = 3,
  kCgroup = 4,
  kRun = 5
};

std::string guard_frame(GuardMessage kind, const std::function<void(codec::Writer&)>& payload) {
  std::string out;
  codec::Writer w(out);
  w.u32(0).u8(static_cast<std::uint8_t>(kind));
  payload(w);
  w.u32_at(0, static_cast<std::uint32_t>(out.size() - 4));
  return out;
}

// Waits until every one of pids has exited, or `limit` passes: on pidfds
// (Linux 5.3), so it returns as soon as the last one is gone.
void wait_exit(const std::vector<pid_t>& pids, std::chrono::milliseconds limit) {
  std::vector<pollfd> fds;
  for (pid_t p : pids) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, p, 0));
    if (fd >= 0) fds.push_back({fd, POLLIN, 0});
  }
  const auto until = std::chrono::steady_clock::now() + limit;
  std::size_t open = fds.size();
  while (open > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (auto& f : fds) {
      if (f.fd >= 0 && f.revents != 0) {
        ::close(f.fd);
        f.fd = -1;  // poll skips it from now on
        --open;
      }
    }
  }
  for (const auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
}

// The processes in a cgroup (v1 or v2: cgroup.procs).
std::vector<pid_t> cgroup_pids(const std::string& cg) {
  std::vector<pid_t> out;
  std::ifstream in(cg + "/cgroup.procs");
  long pid = 0;
  while (in >> pid) out.push_back(static_cast<pid_t>(pid));
  return out;
}

// Runs argv (a path) with the agent's environment, its output discarded,
// and waits for it at most kGuardCommandLimit; then it is killed.
void run_bounded(const std::vector<std::string>& argv) {
  if (argv.empty()) return;
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return;
  if (pid == 0) {
    ::setpgid(0, 0);
    const int devnull = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) ::dup2(devnull, fd);
    ::close_range(3, ~0u, 0);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(s, SIG_DFL);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  wait_exit({pid}, kGuardCommandLimit);
  ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

[[noreturn]] void guard_main(int from_agent, const std::string& token_entry) {
  std::vector<std::vector<std::string>> commands;
  std::vector<pid_t> groups;
  std::vector<std::string> dirs;
  std::vector<std::string> cgroups;
  std::string buf;
  char chunk[4096];
  for (;;) {
    ssize_t n = ::read(from_agent, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, static_cast<std::size_t>(n));
    for (;;) {
      codec::Reader header(buf);
      const std::uint32_t len = header.u32();
      if (!header.ok() || header.remaining() < len) break;  // the rest is on its way
      codec::Reader r(std::string_view(buf).substr(4, len));
      const auto kind = static_cast<GuardMessage>(r.u8());
      if (kind == GuardMessage::kDisarm) ::_exit(0);
      if (kind == GuardMessage::kWatch) {
        const std::int32_t pgid = r.i32();
        if (r.finish() && pgid > 1) groups.push_back(pgid);
      } else if (kind == GuardMessage::kRemove) {
        std::string dir(r.bytes());
        if (r.finish() && !dir.empty()) dirs.push_back(std::move(dir));
      } else if (kind == GuardMessage::kCgroup) {
        std::string cg(r.bytes());
        if (r.finish() && !cg.empty()) cgroups.push_back(std::move(cg));
      } else if (kind == GuardMessage::kRun) {
        std::vector<std::string> argv(r.count(4));
        for (auto& a : argv) a = std::string(r.bytes());
        if (r.finish() && !argv.empty()) commands.push_back(std::move(argv));
      }
      buf.erase(0, 4 + std::size_t{len});
    }
  }
  // The agent is gone without disarming: take everything of its down. The
  // cgroup first: nothing in it escapes, whatever group, session or
  // environment it took.
  for (const auto& cg : cgroups) {
    const int fd = ::open((cg + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      (void)!::write(fd, "1", 1);
      ::close(fd);
    }
  }
  for (int round = 0; round < timing::kGuardKillRounds; ++round) {
    bool any = false;
    for (pid_t g : groups) {
      if (::kill(-g, SIGKILL) == 0) any = true;
    }
    std::vector<pid_t> killed;
    for (pid_t p : pids_with_env_entry(token_entry)) {
      if (::kill(p, SIGKILL) == 0) killed.push_back(p);
    }
    if (!any && killed.empty()) break;
    wait_exit(killed, timing::kGuardKillRound);
  }
  for (const auto& d : dirs) {
    std::error_code ignored;
    std::filesystem::remove_all(d, ignored);
  }
  for (const auto& argv : commands) run_bounded(argv);
  for (const auto& cg : cgroups) {
    // Empty once its processes are gone (cgroup.kill is not synchronous).
    for (int round = 0; round < timing::kGuardKillRounds && ::rmdir(cg.c_str()) != 0; ++round)
      wait_exit(cgroup_pids(cg), timing::kGuardKillRound);
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
  write_all(to_guard_.get(),
            guard_frame(GuardMessage::kWatch, [&](codec::Writer& w) { w.i32(pgid); }));
}

void Guard::remove_on_death(const std::string& dir) {
  write_all(to_guard_.get(),
            guard_frame(GuardMessage::kRemove, [&](codec::Writer& w) { w.bytes(dir); }));
}

void Guard::kill_cgroup_on_death(const std::string& cgroup) {
  write_all(to_guard_.get(),
            guard_frame(GuardMessage::kCgroup, [&](codec::Writer& w) { w.bytes(cgroup); }));
}

void Guard::run_on_death(const std::vector<std::string>& argv) {
  write_all(to_guard_.get(), guard_frame(GuardMessage::kRun, [&](codec::Writer& w) {
              w.u32(static_cast<std::uint32_t>(argv.size()));
              for (const auto& a : argv) w.bytes(a);
            }));
}

void Guard::disarm() {
  write_all(to_guard_.get(), guard_frame(GuardMessage::kDisarm, [](codec::Writer&) {}));
  to_guard_.reset();
}

}  // namespace dlaunch::agent
