#include "launcher/transport/ssh/libssh2_handles.h"

#include <stdexcept>

namespace dlaunch::ssh {

void init_library() {
  static const int rc = libssh2_init(0);
  if (rc != 0) throw std::runtime_error("libssh2_init failed");
}

void SessionDeleter::operator()(LIBSSH2_SESSION* s) const {
  // Best effort and never blocking: a dead peer must not stall the event loop.
  libssh2_session_set_blocking(s, 0);
  libssh2_session_disconnect(s, "dlaunch done");
  libssh2_session_free(s);
}

std::string last_error(LIBSSH2_SESSION* s) {
  char* msg = nullptr;
  int len = 0;
  const int code = libssh2_session_last_error(s, &msg, &len, 0);
  return std::to_string(code) + ": " + (msg != nullptr ? std::string(msg, static_cast<std::size_t>(len)) : "");
}

}  // namespace dlaunch::ssh
