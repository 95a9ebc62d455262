// A comm rank (MPI backend) that communicates without writing a line, for
// --stall-timeout (tests/integration/stacks_test.cpp): one line when the
// group is up, then an all_reduce every 20 ms until SECONDS (argv[1]) have
// passed on rank 0, which decides for all (the all_reduce carries its "go
// on"), then "done". With HANG_AFTER (argv[2]) rank 0 stops calling after
// that many seconds and sleeps, so the others wait in an all_reduce that
// never completes: a stall, although no rank is idle.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "comm/process_group.h"

int main(int argc, char** argv) {
  using namespace dlaunch::comm;
  using Clock = std::chrono::steady_clock;
  const double seconds = argc > 1 ? std::atof(argv[1]) : 6.0;
  const double hang_after = argc > 2 ? std::atof(argv[2]) : -1.0;
  auto pg = ProcessGroup::create(Backend::kMpi);
  std::printf("rank %d of %d up\n", pg->rank(), pg->size());
  std::fflush(stdout);
  const auto start = Clock::now();
  for (;;) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (pg->rank() == 0 && hang_after >= 0 && elapsed >= hang_after)
      std::this_thread::sleep_for(std::chrono::minutes(10));
    double go = pg->rank() == 0 && elapsed < seconds ? 1.0 : 0.0;
    pg->all_reduce(&go, 1, DataType::kFloat64, ReduceOp::kMax);
    if (go == 0.0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("rank %d done\n", pg->rank());
  return 0;
}
