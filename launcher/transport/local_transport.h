// Local transport: the agent runs as a child of dlaunch, in its own process
// group (so a Ctrl-C on the terminal reaches dlaunch alone and dlaunch decides
// what happens), with its stdin/stdout as the control channel. If dlaunch dies,
// the agent reads EOF and stops its workers: the pipe is the lifeline.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>

#include "launcher/transport/transport.h"

namespace dlaunch {

// Throws std::runtime_error when the agent cannot be started.
std::unique_ptr<AgentLink> start_local_agent(boost::asio::io_context& io,
                                             const std::string& agent_path, int node_rank,
                                             LinkCallbacks cb);

// dlaunch-agent next to the running dlaunch executable.
std::string default_agent_path();

}  // namespace dlaunch
