// A worker that hangs where tests/integration/stacks_test.cpp expects to find
// it: rank 2 in stuck_in_data_loader (sleeping), every other rank in
// wait_for_gradients (blocked in poll on a pipe nobody writes). It prints
// "ready" first, then stays quiet; after argv[1] seconds (default: for ever)
// it prints "done" and exits 0.
//
// Built with symbols and without inlining these two (stack tools name them
// from the symbol table).
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace {

volatile int g_side_effect = 0;

double now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

extern "C" __attribute__((noinline)) void stuck_in_data_loader(double until) {
  while (until <= 0 || now_s() < until) {
    ::usleep(100 * 1000);
    g_side_effect = g_side_effect + 1;
  }
}

extern "C" __attribute__((noinline)) void wait_for_gradients(double until) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  while (until <= 0 || now_s() < until) {
    pollfd p{fds[0], POLLIN, 0};
    ::poll(&p, 1, 100);
    g_side_effect = g_side_effect + 1;
  }
}

int main(int argc, char** argv) {
  const char* rank_env = std::getenv("RANK");
  const int rank = rank_env != nullptr ? std::atoi(rank_env) : 0;
  const double run_s = argc > 1 ? std::atof(argv[1]) : 0;
  const double until = run_s > 0 ? now_s() + run_s : 0;
  std::printf("ready\n");
  std::fflush(stdout);
  if (rank == 2) {
    stuck_in_data_loader(until);
  } else {
    wait_for_gradients(until);
  }
  std::printf("done\n");
  return g_side_effect >= 0 ? 0 : 1;
}
