// PmixHost: the agent as a PMIx server, so that Open MPI programs started by
// dlaunch (without mpirun) join one MPI_COMM_WORLD equal to the dlaunch world,
// the way Slurm's `srun --mpi=pmix` direct-launches them.
//
// Each agent registers the job's namespace (node map and process map of the
// whole job, so the PMIx library derives sizes, local peers and ranks), then
// every local worker as a client, and gives each worker the environment
// PMIx_server_setup_fork returns. Fences that span nodes come up to us
// (fence_nb): we send our node's blob to the head, the head concatenates every
// node's blob and sends the result back, and we complete the fence with it.
//
// Published names (MPI_Publish_name, and the port names of
// MPI_Comm_connect/accept) live in the job's store, and a connect or
// disconnect across nodes meets there (pmix_names.cpp, pmix_connect.cpp).
// Spawn and the other calls dlaunch does not serve fail at once with a line
// on stderr that says so (docs/mpi.md).
//
// Threads: PMIx calls us on its own progress thread. Every upcall is copied
// and posted to the agent's io_context; answers (fence results) are handed
// back to PMIx from that loop. One PmixHost per process (PMIx is global).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

namespace dlaunch::agent {

struct PmixJob {
  std::string nspace;                   // unique per job
  std::vector<std::string> node_names;  // logical node names, node order
  std::vector<int> ranks_per_node;      // how many ranks each node has
  // The node of each global rank; empty: ranks are contiguous in node order.
  std::vector<int> node_of_rank;
  int node_rank = 0;   // this node
  std::string tmpdir;  // private to this node's server; removed at the end
  // What mpirun also registers (pmix_job_info.h); empty or 0: not registered.
  std::string map_by;                 // PMIX_MAPBY
  std::string bind_to;                // PMIX_BINDTO
  std::uint64_t physical_memory = 0;  // PMIX_AVAIL_PHYS_MEMORY
  std::map<int, std::string> cpus;    // PMIX_CPUSET of each bound local rank: "0-3,8"
  std::vector<int> app_sizes;         // MPMD: ranks of each app, in app order; empty: one app
};

class PmixHost {
 public:
  struct Callbacks {
    // The k-th fence of this node (k = seq) needs every node's data.
    std::function<void(std::uint32_t seq, std::string data)> fence;
    // A local rank called PMIx_Abort (MPI_Abort).
    std::function<void(int rank, int status, std::string message)> abort;
  };

  PmixHost(boost::asio::io_context& io, Callbacks cb);
  ~PmixHost();
  PmixHost(const PmixHost&) = delete;
  PmixHost& operator=(const PmixHost&) = delete;

  // Starts the server and registers the namespace. Throws dlaunch::Error.
  void start(const PmixJob& job);
  // Registers a local rank and returns the NAME=VALUE entries its
  // environment needs. Throws dlaunch::Error.
  std::vector<std::string> client_environment(int rank);
  // The job's store (Start's DLAUNCH_STORE_*): published names and
  // connects go through it. Until it is known, they fail at once.
  void set_store(const std::string& host, std::uint16_t port, const std::string& secret,
                 const std::string& unix_path);
  // The head's answer to fence seq: every node's data, concatenated.
  void complete_fence(std::uint32_t seq, const std::string& all_data);
  // A local rank ended: the names it published to last while it runs
  // (PMIX_PERSIST_PROC) are removed.
  void rank_exited(int rank);
  // Stops the server and removes its directory. Idempotent.
  void stop();
  // True once a PMIx_server_finalize did not return within its deadline (see
  // stop()): the process must then end with _exit, past libpmix's own exit
  // handlers, or it may never end.
  static bool finalize_hung();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlaunch::agent
