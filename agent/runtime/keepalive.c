// dlaunch-keepalive: the main process of a node's container (agent/runtime/).
//
// The ranks do not run under it: the agent starts them itself and they enter
// the container's mount namespace (oci_runtime.cpp). This process only holds
// the container open, and ends it when the agent that started it is gone
// (exit, crash or SIGKILL): the container runs with --rm, so its runtime
// removes it then, even if the agent's guard is gone too.
//
// Usage: dlaunch-keepalive AGENT_PID (a pid of the host's PID namespace: the
// container shares it). Static, so that it runs in any image. On x86-64 it
// uses no C library at all (system calls of its own, a few kilobytes): the
// agent carries a copy of it (keepalive_image.h), for nodes where it was
// copied alone (docs/portable-agent.md).
#if defined(__x86_64__) && defined(__linux__)

// Linux x86-64 system call numbers.
enum { kPoll = 7, kNanosleep = 35, kKill = 62, kExitGroup = 231, kPidfdOpen = 434 };
enum { kEintr = 4, kEsrch = 3, kEperm = 1, kPollIn = 1 };

static long sys3(long n, long a, long b, long c) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return r;
}

struct pollfd_ {
  int fd;
  short events;
  short revents;
};
struct timespec_ {
  long sec;
  long nsec;
};

// Returns the exit status: 0 once the agent is gone, 2 for a bad argument.
static int keepalive(long argc, char** argv) {
  if (argc != 2) return 2;
  long pid = 0;
  const char* s = argv[1];
  if (*s == '\0') return 2;
  for (; *s != '\0'; ++s) {
    if (*s < '0' || *s > '9' || pid > 100000000) return 2;
    pid = pid * 10 + (*s - '0');
  }
  if (pid <= 1) return 2;
  // A pidfd becomes readable when the process exits (Linux 5.3).
  const long fd = sys3(kPidfdOpen, pid, 0, 0);
  if (fd >= 0) {
    struct pollfd_ p;
    p.fd = (int)fd;
    p.events = kPollIn;
    p.revents = 0;
    while (sys3(kPoll, (long)&p, 1, -1) == -kEintr) {
    }
    return 0;
  }
  if (fd == -kEsrch) return 0;  // gone already
  // No pidfds: look once a second.
  for (;;) {
    const long r = sys3(kKill, pid, 0, 0);
    if (r != 0 && r != -kEperm) return 0;
    struct timespec_ t;
    t.sec = 1;
    t.nsec = 0;
    sys3(kNanosleep, (long)&t, 0, 0);
  }
}

__attribute__((used)) static void start_c(long* sp) {
  sys3(kExitGroup, keepalive(sp[0], (char**)(sp + 1)), 0, 0);
  for (;;) {
  }
}

// The entry point: argc at the stack pointer, argv after it.
__asm__(
    ".text\n"
    ".globl _start\n"
    "_start:\n"
    "  xor %rbp, %rbp\n"
    "  mov %rsp, %rdi\n"
    "  and $-16, %rsp\n"
    "  call start_c\n"
    "  hlt\n");

#else

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

#endif
