#include "drivers/detach.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "dlaunch/error.h"
#include "dlaunch/process.h"
#include "jobs/events.h"

namespace dlaunch {

namespace {

// The command's side: copies the head's stderr to its own until the head
// says it is ready (or ends), then returns what the command exits with.
int wait_for_head(int err, int ctl, pid_t head) {
  std::string said;  // from ctl: "ready NAME\n"
  bool err_open = true;
  bool ctl_open = true;
  while (err_open || ctl_open) {
    std::array<pollfd, 2> p{{{err_open ? err : -1, POLLIN, 0}, {ctl_open ? ctl : -1, POLLIN, 0}}};
    if (::poll(p.data(), p.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    char buf[65536];
    if ((p[0].revents & (POLLIN | POLLHUP)) != 0) {
      const ssize_t n = ::read(err, buf, sizeof buf);
      if (n > 0) {
        write_all(2, std::string_view(buf, static_cast<std::size_t>(n)));
      } else if (n == 0 || errno != EINTR) {
        err_open = false;
      }
    }
    if ((p[1].revents & (POLLIN | POLLHUP)) != 0) {
      const ssize_t n = ::read(ctl, buf, sizeof buf);
      if (n > 0) {
        said.append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ctl_open = false;
      }
    }
    if (said.starts_with("ready ") && said.ends_with("\n")) break;
  }
  ::close(err);
  ::close(ctl);
  if (said.starts_with("ready ") && said.ends_with("\n")) {
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
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) {
    write_all(2, fmt::format("dlaunch: the detached head (pid {}) was killed by signal {}\n", head,
                             WTERMSIG(status)));
    return 128 + WTERMSIG(status);
  }
  return 1;
}

}  // namespace

std::optional<DetachedHead> detach_head(std::optional<int>& exit_status) {
  std::array<int, 2> err{-1, -1};
  std::array<int, 2> ctl{-1, -1};
  if (::pipe2(err.data(), O_CLOEXEC) != 0 || ::pipe2(ctl.data(), O_CLOEXEC) != 0) {
    throw Error(ErrorKind::kEnvironment,
                std::string("--detach: cannot make a pipe: ") + std::strerror(errno));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    throw Error(ErrorKind::kEnvironment,
                std::string("--detach: cannot fork: ") + std::strerror(errno));
  }
  if (pid > 0) {
    ::close(err[1]);
    ::close(ctl[1]);
    exit_status = wait_for_head(err[0], ctl[0], pid);
    return std::nullopt;
  }
  // The head: a session of its own, away from the terminal.
  ::close(err[0]);
  ::close(ctl[0]);
  (void)::setsid();
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    (void)::dup2(null, 0);
    (void)::dup2(null, 1);
    ::close(null);
  }
  (void)::dup2(err[1], 2);
  ::close(err[1]);
  return DetachedHead(ctl[1]);
}

DetachedHead::~DetachedHead() {
  if (ctl_ >= 0) ::close(ctl_);
}

void DetachedHead::watch(EventLog& events, int nodes, const std::string& record_dir,
                         const std::string& name) {
  nodes_ = nodes;
  record_dir_ = record_dir;
  name_ = name;
  events.add_writer([this](std::string_view line) {
    if (ready_) return;
    if (line.find(R"("type":"restart")") != std::string_view::npos) seen_ = 0;
    if (line.find(R"("type":"node_ready")") == std::string_view::npos) return;
    if (++seen_ >= nodes_) ready();
  });
}

void DetachedHead::ready() {
  ready_ = true;
  // From here on the head's own lines go to the record, where `dlaunch
  // attach` follows them; the command's pipe closes with this.
  int log = -1;
  if (!record_dir_.empty()) {
    log = ::open((record_dir_ + "/head.log").c_str(),
                 O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (log < 0) log = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (log >= 0) {
    (void)::dup2(log, 2);
    ::close(log);
  }
  write_all(ctl_, "ready " + name_ + "\n");
  ::close(ctl_);
  ctl_ = -1;
}

}  // namespace dlaunch
