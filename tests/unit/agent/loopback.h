// Plain socket checks of a TCP port on 127.0.0.1, for the agent's services'
// tests: whether a connect is accepted, whether a bind (no SO_REUSEADDR)
// would get the port.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

#include "dlaunch/unique_fd.h"

namespace dltest {

inline sockaddr_in loopback_address(std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

inline bool loopback_accepts(std::uint16_t port) {
  const dlaunch::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_in a = loopback_address(port);
  return ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
}

inline bool loopback_port_free(std::uint16_t port) {
  const dlaunch::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_in a = loopback_address(port);
  return ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
}

}  // namespace dltest
