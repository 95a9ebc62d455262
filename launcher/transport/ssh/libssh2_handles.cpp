#include "transport/ssh/libssh2_handles.h"

#include <cerrno>
#include <stdexcept>

#include "dlaunch/error.h"

namespace dlaunch::ssh {

void init_library() {
  static const int rc = libssh2_init(0);
  if (rc != 0) throw Error(ErrorKind::kEnvironment, "libssh2_init failed");
}

void ChannelDeleter::operator()(LIBSSH2_CHANNEL* c) const {
  if (libssh2_channel_free(c) != LIBSSH2_ERROR_EAGAIN || session == nullptr) return;
  // The close message waits for the socket: let libssh2 wait on it, briefly
  // (it goes to a socket buffer, or the peer is gone), then the session goes
  // back to the event loop's non-blocking mode.
  const long timeout = libssh2_session_get_timeout(session);
  libssh2_session_set_timeout(session, 50);
  libssh2_session_set_blocking(session, 1);
  (void)libssh2_channel_free(c);
  libssh2_session_set_blocking(session, 0);
  libssh2_session_set_timeout(session, timeout);
}

namespace {

// I/O that fails at once, as on a reset connection.
ssize_t fail_send(libssh2_socket_t /*fd*/, const void* /*buf*/, size_t /*len*/, int /*flags*/,
                  void** /*abstract*/) {
  return -ECONNRESET;
}
ssize_t fail_recv(libssh2_socket_t /*fd*/, void* /*buf*/, size_t /*len*/, int /*flags*/,
                  void** /*abstract*/) {
  return -ECONNRESET;
}

}  // namespace

void SessionDeleter::operator()(LIBSSH2_SESSION* s) const {
  // Blocking with a short timeout: the disconnect is best effort, a silent
  // peer costs at most 200 ms, and free must not give up half-way.
  libssh2_session_set_timeout(s, 200);
  libssh2_session_set_blocking(s, 1);
  libssh2_session_disconnect(s, "dlaunch done");
  if (libssh2_session_free(s) == 0) return;
  // It gave up (a peer cut off by the network never answers the channels'
  // close, and the wait times out) having freed nothing: with I/O that fails
  // at once, the closes fail instead of waiting, and the free completes.
  libssh2_session_callback_set(s, LIBSSH2_CALLBACK_SEND,
                               reinterpret_cast<void*>(&fail_send));  // NOLINT
  libssh2_session_callback_set(s, LIBSSH2_CALLBACK_RECV,
                               reinterpret_cast<void*>(&fail_recv));  // NOLINT
  for (int i = 0; i < 3 && libssh2_session_free(s) != 0; ++i) {
  }
}

std::string last_error(LIBSSH2_SESSION* s) {
  char* msg = nullptr;
  int len = 0;
  const int code = libssh2_session_last_error(s, &msg, &len, 0);
  return std::to_string(code) + ": " +
         (msg != nullptr ? std::string(msg, static_cast<std::size_t>(len)) : "");
}

}  // namespace dlaunch::ssh
