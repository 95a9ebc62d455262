// The agent's own lines, on its stderr: "dlaunch-agent: MESSAGE". The head
// relays the agent's stderr with the node's name in front (transport/).
#pragma once

#include <cstdio>
#include <string>

namespace dlaunch::agent {

inline void log(const std::string& msg) {
  std::fprintf(stderr, "dlaunch-agent: %s\n", msg.c_str());
}

}  // namespace dlaunch::agent
