// hello: prints who this rank is, in one line. The smallest dlaunch job:
//   dlaunch -H hostfiles/localhost.yaml build/release/examples/hello
#include <unistd.h>

#include <cstdio>

#include "comm/worker_env.h"

int main() {
  try {
    const auto e = dlaunch::comm::WorkerEnv::from_env();
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::printf("hello from rank %d/%d (local rank %d/%d, node %d/%d) on %s, master %s:%d\n",
                e.rank, e.world_size, e.local_rank, e.local_world_size, e.node_rank, e.num_nodes,
                host, e.master_addr.c_str(), e.master_port);
    return 0;
  } catch (const dlaunch::comm::EnvError& err) {
    std::fprintf(stderr, "hello: %s\n", err.what());
    return 1;
  }
}
