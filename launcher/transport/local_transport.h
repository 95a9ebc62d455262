// Local transport: the agent runs as a child of dlaunch, in its own process
// group (so a Ctrl-C on the terminal reaches dlaunch alone and dlaunch decides
// what happens), with its stdin/stdout as the control channel. If dlaunch dies,
// the agent reads EOF and stops its workers: the pipe is the lifeline.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "transport/transport.h"

namespace dlaunch {

// Throws dlaunch::Error when the agent cannot be started.
std::unique_ptr<AgentLink> start_local_agent(boost::asio::io_context& io,
                                             const std::string& agent_path, int node_rank,
                                             LinkCallbacks cb);

// Any command that ends in a dlaunch-agent speaking on its stdin/stdout (the
// Slurm transport's `srun ... dlaunch-agent`), run the same way: a child in its
// own process group, pipes for stdin/stdout, stderr inherited. A non-zero
// parent_death_signal is sent to the child when dlaunch dies.
std::unique_ptr<AgentLink> start_agent_process(boost::asio::io_context& io,
                                               std::vector<std::string> argv, int node_rank,
                                               LinkCallbacks cb, int parent_death_signal = 0);

// dlaunch-agent next to the running dlaunch executable.
std::string default_agent_path();

}  // namespace dlaunch
