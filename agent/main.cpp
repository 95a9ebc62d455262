// dlaunch-agent: runs one node's part of a dlaunch job. Started by dlaunch
// (locally as a child, remotely over SSH); speaks the control protocol on
// stdin/stdout. Not meant to be run by hand.
#include <fcntl.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "agent.h"
#include "dlaunch/clock.h"
#include "dlaunch/debug.h"
#include "dlaunch/placement/topology.h"
#include "dlaunch/process.h"
#include "dlaunch/version.h"
#include "health/gpu_test.h"
#include "health/node_health.h"
#include "os.h"
#include "pmix/pmix_host.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("dlaunch-agent %s (protocol %u)\n", dlaunch::kVersion,
                  dlaunch::proto::kProtocolVersion);
      return 0;
    }
    if (std::strcmp(argv[i], "--topology") == 0) {
      // One line for dlaunch --check: this node as hwloc sees it.
      auto topo = dlaunch::placement::load_topology();
      if (!topo) {
        std::fprintf(stderr, "dlaunch-agent: %s\n", topo.error().c_str());
        return 1;
      }
      std::printf("%s\n", dlaunch::placement::summary(*topo).c_str());
      return 0;
    }
    if (std::strcmp(argv[i], "--health") == 0) {
      // For dlaunch --check: what this node says of its health, one
      // health.KEY=VALUE per line (health/node_health.h). DLAUNCH_HEALTH_ROOT
      // stands for / under /sys, /proc and /dev/kmsg (tests only).
      const char* root = std::getenv("DLAUNCH_HEALTH_ROOT");
      const dlaunch::agent::health::Where where{.workdir = i + 1 < argc ? argv[i + 1] : "",
                                                .root = root != nullptr ? root : ""};
      std::fputs(dlaunch::agent::health::to_lines(dlaunch::agent::health::collect(where)).c_str(),
                 stdout);
      return 0;
    }
    if (std::strcmp(argv[i], "--gpu-test") == 0 && i + 1 < argc) {
      // For dlaunch --check: the GPU compute and memory test on every CUDA
      // device, MB MiB of each (health/gpu_test.h); the agent runs it as a
      // child, with a deadline.
      char* end = nullptr;
      const unsigned long mb = std::strtoul(argv[i + 1], &end, 10);
      if (end == argv[i + 1] || *end != '\0' || mb == 0 || mb > (1UL << 20U)) {
        std::fprintf(stderr, "dlaunch-agent: --gpu-test wants a size in MiB, not '%s'\n",
                     argv[i + 1]);
        return 2;
      }
      std::fputs(dlaunch::agent::health::to_lines(dlaunch::agent::health::run_gpu_test(mb)).c_str(),
                 stdout);
      return 0;
    }
    std::fprintf(
        stderr,
        "usage: dlaunch-agent [--version | --topology | --health [WORKDIR] | --gpu-test MB]\n"
        "dlaunch starts this program itself; it speaks the control protocol on stdin/stdout.\n");
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);
  dlaunch::raise_descriptor_limit();
  // Keep the channel on private fds; stray writes to stdout then go to stderr
  // instead of corrupting the protocol stream, and stdin reads see /dev/null.
  const int control_in = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
  const int control_out = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
  if (control_in < 0 || control_out < 0) {
    std::perror("dlaunch-agent: dup");
    return 1;
  }
  // Under `srun --unbuffered` (dlaunch's Slurm transport) stdout is a pty and
  // stdin a pipe: make the pty raw so no byte of a frame is translated
  // (\n -> \r\n) or eaten. (Both a terminal: someone typed dlaunch-agent;
  // leave their terminal alone.)
  if (::isatty(control_out) == 1 && ::isatty(control_in) == 0) {
    termios raw{};
    if (::tcgetattr(control_out, &raw) == 0) {
      ::cfmakeraw(&raw);
      ::tcsetattr(control_out, TCSANOW, &raw);
    }
  }
  const int devnull = ::open("/dev/null", O_RDONLY);
  ::dup2(devnull, 0);
  ::close(devnull);
  ::dup2(2, 1);
  try {
    int rc;
    {
      boost::asio::io_context io;
      dlaunch::AsioClock clock(io);
      dlaunch::agent::PosixOs os;
      dlaunch::agent::Agent agent({.io = io, .os = os, .clock = clock}, control_in, control_out);
      rc = agent.run();
    }
    if (dlaunch::debug_enabled("stats")) {
      std::fprintf(stderr, "dlaunch-agent: stats: pid=%d %s\n", static_cast<int>(::getpid()),
                   dlaunch::self_usage().c_str());
    }
    if (dlaunch::agent::PmixHost::finalize_hung()) {
      std::fflush(nullptr);
      ::_exit(rc);  // libpmix's exit handlers would wait on the same lock
    }
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlaunch-agent: %s\n", e.what());
    return 1;
  }
}
