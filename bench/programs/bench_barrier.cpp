// bench_barrier: joins the job's process group (comm, MPI backend) and passes
// one barrier, then exits. The "past a comm barrier" variant of the launch
// benchmark runs it under dlaunch and under mpirun alike: the time includes
// the launcher's wire-up (PMIx) as a real job sees it.
#include <cstdio>
#include <exception>

#include "comm/process_group.h"

int main() {
  try {
    auto pg = dlaunch::comm::ProcessGroup::create(dlaunch::comm::Backend::kMpi);
    pg->barrier();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_barrier: %s\n", e.what());
    return 1;
  }
}
