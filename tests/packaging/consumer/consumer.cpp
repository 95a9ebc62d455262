// Sums the ranks over comm's MPI ProcessGroup and prints the result; built
// against an installed dlaunch (find_package or pkg-config) and run under the
// installed dlaunch with --mpi.
#include <comm/process_group.h>
#include <comm/worker_env.h>

#include <cstdio>
#include <vector>

int main() {
  try {
    const auto env = dlaunch::comm::WorkerEnv::from_env();
    auto pg = dlaunch::comm::ProcessGroup::create(dlaunch::comm::Backend::kMpi);
    std::vector<int> v{pg->rank()};
    pg->all_reduce(std::span<int>(v), dlaunch::comm::ReduceOp::kSum);
    std::printf("consumer rank %d/%d (env rank %d) sum %d\n", pg->rank(), pg->size(), env.rank,
                v[0]);
    pg.reset();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
