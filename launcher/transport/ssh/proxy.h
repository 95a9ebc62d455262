// Reaching SSH servers that the head cannot reach directly.
//
// Connector::connect makes one SSH connection the way its ConnectOptions say:
// straight over TCP, through a ProxyCommand (the command's stdin/stdout are
// the stream), or through a chain of jump hosts (ProxyJump). Jump hosts are
// spoken to with libssh2 on the same event loop: the node's stream is a
// `direct-tcpip` channel of the jump host's session, pumped to one end of a
// socketpair whose other end carries the node's own SSH session. One
// connection to a jump host carries every node behind it; in a chain a -> b,
// b's connection is a channel of a's.
//
// A jump host's session is shared by many channels. libssh2 requires that a
// call that returned EAGAIN with a packet half-sent be repeated before any
// other call sends on that session (any other fails with
// LIBSSH2_ERROR_BAD_USE, which would fail that channel's node); the jump
// session lets the one call that blocked go first, and nobody else send
// until it has.
//
// Thread safety: none; everything runs on the io_context's one thread.
#pragma once

#include <memory>
#include <string>
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "transport/ssh/connect.h"
#include "transport/ssh/known_hosts.h"

namespace dlaunch::ssh {

class Connector {
 public:
  explicit Connector(boost::asio::io_context& io);
  ~Connector();
  Connector(const Connector&) = delete;
  Connector& operator=(const Connector&) = delete;

  // Throws ConnectError; a jump host that fails fails every node behind it
  // with a message naming the jump host.
  boost::asio::awaitable<std::unique_ptr<Connection>> connect(const ConnectOptions& o);

  KnownHostsCache& known_hosts();
  // Jump-host connections made so far (tests: one per jump host).
  int jump_connections() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace dlaunch::ssh
