// dlaunch-keepalive: the main process of a node's container (agent/runtime/).
//
// The ranks do not run under it: the agent starts them itself and they enter
// the container's mount namespace (oci_runtime.cpp). This process only holds
// the container open, and ends it when the agent that started it is gone
// (exit, crash or SIGKILL): the container runs with --rm, so its runtime
// removes it then, even if the agent's guard is gone too.
//
// Usage: dlaunch-keepalive AGENT_PID (a pid of the host's PID namespace: the
// container shares it). Built static, so that it runs in any image.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  char* end = NULL;
  const long pid = strtol(argv[1], &end, 10);
  if (end == argv[1] || *end != '\0' || pid <= 1) return 2;
  // A pidfd becomes readable when the process exits (Linux 5.3).
  const int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  if (fd >= 0) {
    struct pollfd p = {fd, POLLIN, 0};
    while (poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
    return 0;
  }
  if (errno == ESRCH) return 0;  // gone already
  // No pidfds: look once a second.
  while (kill((pid_t)pid, 0) == 0 || errno == EPERM) sleep(1);
  return 0;
}
