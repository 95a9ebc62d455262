// A worker that hangs where tests/integration/stacks_test.cpp expects to find
// it: rank 2 in stuck_in_data_loader (sleeping), every other rank in
// wait_for_gradients (blocked in poll on a pipe nobody writes). It prints
// "ready" first, then stays quiet; after argv[1] seconds (default: for ever)
// it prints "done" and exits 0.
//
// Each waits in one system call until its time is up (a stack tool's attach
// only restarts it), never in a loop of short ones: a rank caught between two
// of those, in the clock call, would show a stack of its own and split the
// group the tests look for.
//
// Built with symbols and without inlining these two (stack tools name them
// from the symbol table).
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include <climits>

namespace {

volatile int g_side_effect = 0;

double now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

extern "C" __attribute__((noinline)) void stuck_in_data_loader(double until) {
  // Until `until` on the monotonic clock (for ever when 0): one sleep, begun
  // again only if something interrupts it.
  timespec end{};
  end.tv_sec = until > 0 ? static_cast<time_t>(until) : INT_MAX;
  end.tv_nsec = until > 0 ? static_cast<long>((until - static_cast<double>(end.tv_sec)) * 1e9) : 0;
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, nullptr) == EINTR) {
  }
  g_side_effect = g_side_effect + 1;
}

extern "C" __attribute__((noinline)) void wait_for_gradients(double until) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  for (;;) {
    const double left = until > 0 ? until - now_s() : -1;
    if (until > 0 && left <= 0) break;
    // One poll for all the time left (nobody writes to the pipe).
    pollfd p{fds[0], POLLIN, 0};
    ::poll(&p, 1, left < 0 ? -1 : static_cast<int>(left * 1000) + 1);
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
