#include "command.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "dlaunch/process.h"
#include "dlaunch/unique_fd.h"

namespace dlaunch::agent {

namespace {

// Whatever the pipe holds now, without waiting.
void drain(int fd, std::string& out) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    if (out.size() < kMaxCommandOutput) {
      out.append(buf, std::min(static_cast<std::size_t>(n), kMaxCommandOutput - out.size()));
    }
  }
}

}  // namespace

CommandResult run_command(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                          std::chrono::milliseconds limit) {
  CommandResult r;
  auto [out_r, out_w] = make_pipe();
  SpawnOptions opts;
  opts.argv = argv;
  opts.env = env;
  opts.stdout_fd = out_w.get();
  opts.stderr_fd = out_w.get();
  opts.parent_death_signal = SIGKILL;
  auto pid = spawn(opts);
  out_w.reset();
  if (!pid) {
    r.error = pid.error();
    return r;
  }
  set_nonblocking(out_r.get(), true);
  UniqueFd exited(static_cast<int>(::syscall(SYS_pidfd_open, *pid, 0)));
  const auto until = std::chrono::steady_clock::now() + limit;
  bool pipe_open = true;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      ::kill(-*pid, SIGKILL);
      break;
    }
    pollfd fds[2] = {{pipe_open ? out_r.get() : -1, POLLIN, 0}, {exited.get(), POLLIN, 0}};
    // Without a pidfd (Linux < 5.3), look for the exit every 50 ms.
    const int wait_ms = exited ? static_cast<int>(left.count())
                               : static_cast<int>(std::min<long long>(left.count(), 50));
    const int n = ::poll(fds, 2, wait_ms);
    if (n < 0 && errno != EINTR) break;
    if (pipe_open && (fds[0].revents & (POLLIN | POLLHUP)) != 0) {
      const std::size_t before = r.output.size();
      drain(out_r.get(), r.output);
      if ((fds[0].revents & POLLIN) == 0 && r.output.size() == before) pipe_open = false;
    }
    if (exited ? (fds[1].revents & POLLIN) != 0 : ::waitpid(*pid, &r.status, WNOHANG) == *pid) {
      if (!exited) {
        drain(out_r.get(), r.output);
        return r;
      }
      break;
    }
  }
  drain(out_r.get(), r.output);
  while (::waitpid(*pid, &r.status, 0) < 0 && errno == EINTR) {
  }
  return r;
}

std::string describe_failure(const std::vector<std::string>& argv, const CommandResult& r) {
  std::string cmd = "`" + (argv.empty() ? std::string() : argv[0]);
  if (argv.size() > 1) cmd += " " + argv[1];
  cmd += "`";
  if (!r.error.empty()) return cmd + " did not start: " + r.error;
  std::string what;
  if (r.timed_out) {
    what = cmd + " did not finish in time (killed)";
  } else if (WIFSIGNALED(r.status)) {
    what = cmd + " was killed by " + signal_name(WTERMSIG(r.status));
  } else {
    what = cmd + " exited with " + std::to_string(WEXITSTATUS(r.status));
  }
  // Its last lines say why.
  std::string out = r.output;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (out.size() > 600) out = "..." + out.substr(out.size() - 600);
  if (!out.empty()) what += ": " + out;
  return what;
}

}  // namespace dlaunch::agent
