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
// freed nothing; the deleters retry for a bounded time so nothing leaks.
struct ChannelDeleter {
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

// The session's last error as text ("-18: Username/PublicKey combination invalid").
std::string last_error(LIBSSH2_SESSION* s);

}  // namespace dlaunch::ssh
