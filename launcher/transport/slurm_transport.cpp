#include "transport/slurm_transport.h"

#include <signal.h>

#include <cstdlib>

#include "transport/local_transport.h"

namespace dlaunch {

// One srun per node, not one srun for all nodes with --ntasks-per-node=1:
// the control channel is the agent's stdin/stdout, and one srun has a single
// stdin (which it copies to every task) and a single stdout (where every
// task's output arrives interleaved, in chunks of any size). Binary protocol
// frames from N agents could not be told apart there, and one agent's frames
// could not be addressed to it. One step per node gives each agent a private
// channel, exactly as a pipe or an SSH channel does; a node that fails to start
// fails alone and is named; and srun's stderr (its own errors) stays per node.
// The cost is one srun process on the head per node (a few threads each) and
// one step creation per node in slurmctld, which is what mpirun's Slurm
// launcher avoids by using a daemon tree; for the node counts dlaunch's SSH
// transport handles the same way (one connection per node), this is fine.
//
// The options, and why:
//   --nodes=1 --ntasks=1 --ntasks-per-node=1 --nodelist=NODE: one agent on
//       exactly that node;
//   --overlap: the step shares the allocation's resources with every other
//       step, so it neither waits for the CPUs of a step already running (the
//       batch step, a second logical node on the same host, a user's srun)
//       nor blocks them;
//   no --exact: the step gets all of the node's allocated CPUs (and, Slurm's
//       default for steps, all the GRES the job asked for: the GPUs), which
//       the agent's workers share;
//   --unbuffered: without it slurmstepd holds task output until a newline,
//       which would stall binary frames; with it the agent's stdout is a pty
//       that slurmstepd keeps raw (checked: 3 MB of random bytes arrive
//       intact), and the agent makes it raw itself too;
//   --mpi=none: the agent must not become a PMI client of Slurm's; in --mpi
//       mode it is the PMIx server of its workers itself;
//   --cpu-bind=none: no binding of the agent (and so of all workers) to one CPU;
//   --kill-on-bad-exit=1, --quiet: the step ends with its task; no banner.
std::vector<std::string> srun_command(const std::string& node,
                                      const std::vector<std::string>& command) {
  const char* srun = std::getenv("DLAUNCH_SRUN");
  std::vector<std::string> argv = {(srun != nullptr && *srun != '\0') ? srun : "srun",
                                   "--nodes=1",
                                   "--ntasks=1",
                                   "--ntasks-per-node=1",
                                   "--nodelist=" + node,
                                   "--overlap",
                                   "--unbuffered",
                                   "--mpi=none",
                                   "--cpu-bind=none",
                                   "--kill-on-bad-exit=1",
                                   "--quiet",
                                   "--job-name=dlaunch-agent"};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

bool in_slurm_allocation() {
  const char* id = std::getenv("SLURM_JOB_ID");
  if (id == nullptr || *id == '\0') id = std::getenv("SLURM_JOBID");
  return id != nullptr && *id != '\0';
}

std::unique_ptr<AgentLink> start_slurm_agent(boost::asio::io_context& io, const std::string& node,
                                             const std::string& agent_path, int node_rank,
                                             LinkCallbacks cb) {
  // SIGTERM, not SIGKILL: srun then asks Slurm to signal the step (SIGTERM,
  // KillWait, SIGKILL), so the agent stops its workers in order.
  return start_agent_process(io, srun_command(node, {agent_path}), node_rank, std::move(cb),
                             SIGTERM);
}

}  // namespace dlaunch
