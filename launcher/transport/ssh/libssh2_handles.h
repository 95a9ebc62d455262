// Move-only owners of libssh2 handles, and the library's one-time init.
#pragma once

#include <memory>
#include <string>

#include <libssh2.h>

namespace dlaunch::ssh {

// libssh2_init once per process (thread-safe via a function-local static).
void init_library();

struct SessionDeleter {
  void operator()(LIBSSH2_SESSION* s) const;
};
// In non-blocking mode libssh2's free functions may return EAGAIN having
// freed nothing. The channel's deleter knows its session (a Channel is made
// with channel_of), and frees in blocking mode for a bounded time, libssh2
// waiting on the socket, so nothing leaks.
struct ChannelDeleter {
  LIBSSH2_SESSION* session = nullptr;
  void operator()(LIBSSH2_CHANNEL* c) const;
};
struct AgentDeleter {
  void operator()(LIBSSH2_AGENT* a) const {
    libssh2_agent_disconnect(a);
    libssh2_agent_free(a);
  }
};

using Session = std::unique_ptr<LIBSSH2_SESSION, SessionDeleter>;
using Channel = std::unique_ptr<LIBSSH2_CHANNEL, ChannelDeleter>;
using Agent = std::unique_ptr<LIBSSH2_AGENT, AgentDeleter>;

// An empty Channel of `session`, to reset() with its channels.
inline Channel channel_of(LIBSSH2_SESSION* session) {
  return Channel(nullptr, ChannelDeleter{session});
}

// The session's last error as text ("-18: Username/PublicKey combination invalid").
std::string last_error(LIBSSH2_SESSION* s);

}  // namespace dlaunch::ssh
