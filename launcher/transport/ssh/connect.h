// One SSH connection from the head to a node, made without blocking the
// event loop: libssh2 runs in non-blocking mode on an Asio socket, and every
// EAGAIN waits on the socket in the direction libssh2 asks for
// (libssh2_session_block_directions).
//
// connect() resolves, connects (retrying refused/reset connections with
// jittered exponential backoff), does the SSH handshake, checks the host key,
// and authenticates (ssh-agent, then the hostfile's identity, then
// ~/.ssh/id_ed25519, id_ecdsa, id_rsa), all within one deadline. Failures throw
// ConnectError naming the host, the stage and what the server said.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without it

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "dlaunch/error.h"
#include "dlaunch/tunables.h"
#include "transport/ssh/known_hosts.h"
#include "transport/ssh/libssh2_handles.h"

namespace dlaunch::ssh {

// Cancels a connect() or exec() in progress, at once: what it waits on is
// closed and it throws ConnectError (stage "cancelled"). Shared by the link
// that started the connection and the coroutine that makes it.
class ConnectCancel {
 public:
  void cancel() {
    cancelled_ = true;
    if (interrupt_) interrupt_();
  }
  bool cancelled() const { return cancelled_; }
  // What cancel() closes while a step waits (nothing when empty).
  void watch(std::function<void()> interrupt) { interrupt_ = std::move(interrupt); }

 private:
  bool cancelled_ = false;
  std::function<void()> interrupt_;
};

struct ConnectOptions {
  std::string host;
  int port = 22;
  std::string user;      // empty: the current user
  std::string identity;  // hostfile `identity`; empty: none
  std::chrono::milliseconds timeout = default_ms(tunables::kConnectTimeout);
  HostKeyPolicy host_key_policy = HostKeyPolicy::kStrict;
  std::string known_hosts;                // empty: ~/.ssh/known_hosts
  int attempts = 3;                       // for refused or reset connections
  int keepalive_s = 0;                    // SSH keepalive interval; 0: off
  std::shared_ptr<ConnectCancel> cancel;  // optional
};

// A host that could not be reached, or refused us (ErrorKind::kEnvironment).
class ConnectError : public Error {
 public:
  ConnectError(std::string stage, const std::string& message)
      : Error(ErrorKind::kEnvironment, message), stage_(std::move(stage)) {}
  const std::string& stage() const { return stage_; }  // connect, handshake, hostkey, auth, exec

 private:
  std::string stage_;
};

struct Connection {
  explicit Connection(boost::asio::io_context& io) : socket(io) {}
  boost::asio::ip::tcp::socket socket;
  Session session;
  std::string user;
  std::string peer_address;   // the address we actually connected to
  std::string local_address;  // our address on that route
  std::string auth_method;    // how we got in: "ssh-agent", "~/.ssh/id_ed25519", ...
  std::string host_key_note;  // e.g. what accept-new added

  // Waits until the socket is ready in the direction libssh2 is blocked on.
  boost::asio::awaitable<void> wait();
};

boost::asio::awaitable<std::unique_ptr<Connection>> connect(boost::asio::io_context& io,
                                                            const ConnectOptions& opts);

// Opens a session channel and runs command on it (an exec request).
boost::asio::awaitable<Channel> exec(Connection& conn, const std::string& command,
                                     const std::shared_ptr<ConnectCancel>& cancel,
                                     std::chrono::steady_clock::time_point deadline);

std::string current_user();

// DLAUNCH_DEBUG=ssh: log each connection's stages with their times to stderr.
bool debug_ssh();

}  // namespace dlaunch::ssh
