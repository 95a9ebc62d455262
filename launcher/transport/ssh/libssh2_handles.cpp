#include "transport/ssh/libssh2_handles.h"

#include <unistd.h>

#include <stdexcept>

#include "dlaunch/error.h"

namespace dlaunch::ssh {

void init_library() {
  static const int rc = libssh2_init(0);
  if (rc != 0) throw Error(ErrorKind::kEnvironment, "libssh2_init failed");
}

void ChannelDeleter::operator()(LIBSSH2_CHANNEL* c) const {
  // A few ms at most: the close message goes to a socket buffer, or the peer is gone.
  for (int i = 0; i < 50 && libssh2_channel_free(c) == LIBSSH2_ERROR_EAGAIN; ++i) ::usleep(1000);
}

void SessionDeleter::operator()(LIBSSH2_SESSION* s) const {
  // Blocking with a short timeout: the disconnect is best effort, a silent
  // peer costs at most 200 ms, and free must not give up half-way.
  libssh2_session_set_timeout(s, 200);
  libssh2_session_set_blocking(s, 1);
  libssh2_session_disconnect(s, "dlaunch done");
  libssh2_session_free(s);
}

std::string last_error(LIBSSH2_SESSION* s) {
  char* msg = nullptr;
  int len = 0;
  const int code = libssh2_session_last_error(s, &msg, &len, 0);
  return std::to_string(code) + ": " +
         (msg != nullptr ? std::string(msg, static_cast<std::size_t>(len)) : "");
}

}  // namespace dlaunch::ssh
