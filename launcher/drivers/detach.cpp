#include "drivers/detach.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "dlaunch/error.h"
#include "dlaunch/process.h"
#include "dlaunch/unique_fd.h"
#include "jobs/events.h"

namespace dlaunch {

namespace {

// Copies what the head's stderr file holds past where `reader` is to the
// command's stderr.
void copy_new(int reader) {
  char buf[65536];
  ssize_t n = 0;
  while ((n = ::read(reader, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) write_all(2, std::string_view(buf, static_cast<std::size_t>(n)));
  }
}

// The command's side: shows the head's lines until the head says it is
// ready (or ends), then returns what the command exits with.
int wait_for_head(int reader, int ctl, pid_t head) {
  std::string said;  // from ctl: "ready NAME\n"
  for (;;) {
    pollfd p{ctl, POLLIN, 0};
    const int n = ::poll(&p, 1, 100);  // the file has no readiness: looked at as often
    copy_new(reader);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    char buf[4096];
    const ssize_t got = ::read(ctl, buf, sizeof buf);
    if (got > 0) {
      said.append(buf, static_cast<std::size_t>(got));
      if (said.ends_with("\n")) break;
    } else if (got == 0 || errno != EINTR) {
      break;  // the head ended
    }
  }
  copy_new(reader);
  ::close(ctl);
  if (said.starts_with("ready ") && said.ends_with("\n")) {
    ::close(reader);
    const std::string name = said.substr(6, said.size() - 7);
    write_all(1, name + "\n");
    write_all(2, fmt::format("dlaunch: job {} runs detached (head pid {}): dlaunch attach {} | "
                             "logs {} -f | stop {} | wait {}\n",
                             name, head, name, name, name, name));
    return 0;
  }
  // The head ended before every node was ready: its report came above.
  int status = 0;
  while (::waitpid(head, &status, 0) < 0 && errno == EINTR) {
  }
  copy_new(reader);
  ::close(reader);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) {
    write_all(2, fmt::format("dlaunch: the detached head (pid {}) was killed by signal {}\n", head,
                             WTERMSIG(status)));
    return 128 + WTERMSIG(status);
  }
  return 1;
}

}  // namespace

std::optional<DetachedHead> detach_head(std::optional<int>& exit_status,
                                        const std::string& log_dir) {
  // The head's stderr: unnamed until it is the record's head.log.
  UniqueFd log;
  if (!log_dir.empty()) log.reset(::open(log_dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!log) log.reset(::memfd_create("dlaunch-head", MFD_CLOEXEC));
  if (!log) {
    throw Error(ErrorKind::kEnvironment,
                std::string("--detach: cannot make the head's log: ") + std::strerror(errno));
  }
  // The command reads it through a description of its own (its own offset).
  UniqueFd reader(
      ::open(("/proc/self/fd/" + std::to_string(log.get())).c_str(), O_RDONLY | O_CLOEXEC));
  std::array<int, 2> ctl{-1, -1};
  if (!reader || ::pipe2(ctl.data(), O_CLOEXEC) != 0) {
    throw Error(ErrorKind::kEnvironment,
                std::string("--detach: cannot read the head's log: ") + std::strerror(errno));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    throw Error(ErrorKind::kEnvironment,
                std::string("--detach: cannot fork: ") + std::strerror(errno));
  }
  if (pid > 0) {
    ::close(ctl[1]);
    log.reset();
    exit_status = wait_for_head(reader.release(), ctl[0], pid);
    return std::nullopt;
  }
  // The head: a session of its own, away from the terminal.
  ::close(ctl[0]);
  reader.reset();
  (void)::setsid();
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    (void)::dup2(null, 0);
    (void)::dup2(null, 1);
    ::close(null);
  }
  const int flags = ::fcntl(log.get(), F_GETFL);
  if (flags >= 0) (void)::fcntl(log.get(), F_SETFL, flags | O_APPEND);
  (void)::dup2(log.get(), 2);
  return DetachedHead(ctl[1], log.release());
}

DetachedHead::~DetachedHead() {
  if (ctl_ >= 0) ::close(ctl_);
  if (log_ >= 0) ::close(log_);
}

void DetachedHead::watch(EventLog& events, int nodes, const std::string& record_dir,
                         const std::string& name, const std::string& ready_event) {
  nodes_ = nodes;
  record_dir_ = record_dir;
  name_ = name;
  events.add_writer([this, wanted = "\"type\":\"" + ready_event + "\""](std::string_view line) {
    if (ready_) return;
    if (line.find(R"("type":"restart")") != std::string_view::npos) seen_ = 0;
    if (line.find(wanted) == std::string_view::npos &&
        line.find(R"("type":"node_ready")") == std::string_view::npos) {
      return;
    }
    if (++seen_ >= nodes_) ready();
  });
}

void DetachedHead::ready() {
  ready_ = true;
  // The head's lines so far and from here on: the record's head.log, where
  // `dlaunch attach` follows them (a file in memory, without a record, stays
  // unnamed).
  if (!record_dir_.empty() && log_ >= 0) {
    const std::string path = record_dir_ + "/head.log";
    // A head before this one (a take-over): its lines stay, as head.log.N.
    for (int k = 1; k < 1000 && ::access(path.c_str(), F_OK) == 0; ++k) {
      const std::string older = path + "." + std::to_string(k);
      if (::access(older.c_str(), F_OK) == 0) continue;
      (void)::rename(path.c_str(), older.c_str());
    }
    if (::linkat(AT_FDCWD, ("/proc/self/fd/" + std::to_string(log_)).c_str(), AT_FDCWD,
                 path.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      write_all(2, fmt::format("dlaunch: --detach: cannot keep the head's lines as {}: {}\n", path,
                               std::strerror(errno)));
    }
  }
  write_all(ctl_, "ready " + name_ + "\n");
  ::close(ctl_);
  ctl_ = -1;
}

}  // namespace dlaunch
