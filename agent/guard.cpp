#include "guard.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
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
// kCgroup: bytes path of the job's cgroup.
enum class GuardMessage : std::uint8_t { kWatch = 1, kRemove = 2, kDisarm = 3, kCgroup = 4 };

std::string guard_frame(GuardMessage kind, const std::function<void(codec::Writer&)>& payload) {
  std::string out;
  codec::Writer w(out);
  w.u32(0).u8(static_cast<std::uint8_t>(kind));
  payload(w);
  w.u32_at(0, static_cast<std::uint32_t>(out.size() - 4));
  return out;
}

[[noreturn]] void guard_main(int from_agent, const std::string& token_entry) {
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
  for (const auto& cg : cgroups) {
    // Empty once its processes are gone (cgroup.kill is not synchronous).
    for (int round = 0; round < timing::kGuardKillRounds && ::rmdir(cg.c_str()) != 0; ++round)
      ::usleep(static_cast<useconds_t>(timing::kGuardKillRound.count()) * 1000);
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

void Guard::disarm() {
  write_all(to_guard_.get(), guard_frame(GuardMessage::kDisarm, [](codec::Writer&) {}));
  to_guard_.reset();
}

}  // namespace dlaunch::agent
