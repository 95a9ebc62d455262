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
#include <string_view>
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without it
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "dlaunch/error.h"
#include "dlaunch/tunables.h"
#include "transport/ssh/known_hosts.h"
#include "transport/ssh/libssh2_handles.h"
#include "transport/ssh/session_memory.h"

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

// Everything needed to reach one host, resolved from the hostfile, the
// command line and the OpenSSH configuration (transport/ssh/host_options.h).
// `ConnectTimeout 0`: no timeout of dlaunch's, as ssh takes it. A year keeps
// the deadline arithmetic finite.
inline constexpr std::chrono::milliseconds kNoConnectTimeout = std::chrono::hours(24 * 365);

struct ConnectOptions {
  std::string alias;  // the name the user gave (messages, %n); empty: same as host
  std::string host;   // what to connect to (HostName)
  int port = 22;
  std::string user;  // empty: the current user
  // Key files to offer, in order: the hostfile's `identity`, then the ssh
  // config's IdentityFile lines. When the config names none, the default
  // keys (~/.ssh/id_ed25519, id_ecdsa, id_rsa) follow.
  std::vector<std::string> identity_files;
  std::string hostfile_identity;  // the one of them the hostfile named (its errors say so)
  bool default_identities = true;
  bool identities_only = false;  // IdentitiesOnly: no ssh-agent keys
  // CertificateFile: libssh2 cannot offer OpenSSH certificates; kept to say
  // so (--dry-run, an authentication failure) and for --ssh openssh.
  std::vector<std::string> certificate_files;
  std::chrono::milliseconds timeout = default_ms(tunables::kConnectTimeout);
  HostKeyPolicy host_key_policy = HostKeyPolicy::kStrict;
  // known_hosts files to check, user files first; an accepted new key goes to
  // the first user file. Empty: ~/.ssh/known_hosts.
  std::vector<std::string> known_hosts;
  std::vector<std::string> global_known_hosts;  // checked after the user files
  std::string host_key_alias;                   // HostKeyAlias: look the key up by this name
  int attempts = 3;                             // for refused or reset connections
  int keepalive_s = 0;                          // SSH keepalive interval; 0: off
  int keepalive_count_max = 3;                  // ServerAliveCountMax (libssh2 counts none)
  std::string timeout_from;                     // what set timeout/keepalive_s, for --dry-run
  std::string keepalive_from;
  // Not empty: dlaunch's ssh_config reader could not follow OpenSSH for this
  // host and the installed `ssh -G` resolved it; says why (--dry-run).
  std::string resolved_by;
  // How the TCP stream is reached: a chain of jump hosts (first hop first,
  // each resolved like a host), or a command whose stdin/stdout is the stream
  // (ProxyCommand, already expanded). At most one of the two.
  std::vector<ConnectOptions> jumps;
  std::string proxy_command;
  std::shared_ptr<ConnectCancel> cancel;  // optional

  // How messages name this host: "alias" or "alias (host:port)".
  std::string display() const;
  // user@host:port for messages.
  std::string where() const;
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
  // What carries the stream when it is no TCP connection of ours (a jump
  // host's channel, a ProxyCommand): released after the session and socket.
  std::shared_ptr<void> tunnel;
  boost::asio::ip::tcp::socket socket;
  SessionPages pages;  // the session's allocator: released after the session
  Session session;
  std::string user;
  std::string peer_address;   // the address we actually connected to
  std::string local_address;  // our address on that route
  std::string auth_method;    // how we got in: "ssh-agent", "~/.ssh/id_ed25519", ...
  std::string host_key_note;  // e.g. what accept-new added

  // Waits until the socket is ready in the direction libssh2 is blocked on.
  boost::asio::awaitable<void> wait();
};

// Makes conn.socket a connected stream to the SSH server some other way than
// a TCP connect of ours (it may assign any stream socket's descriptor), and
// sets conn.tunnel to what keeps that stream alive. Throws ConnectError.
using StreamOpener = std::function<boost::asio::awaitable<void>(
    Connection& conn, std::chrono::steady_clock::time_point deadline)>;

// Connects (TCP, with retries, or through `opener` once), does the SSH
// handshake, checks the host key against `known_hosts`, authenticates.
boost::asio::awaitable<std::unique_ptr<Connection>> connect(boost::asio::io_context& io,
                                                            const ConnectOptions& opts,
                                                            KnownHostsCache& known_hosts,
                                                            StreamOpener opener = {});

// Opens a session channel and runs command on it (an exec request).
boost::asio::awaitable<Channel> exec(Connection& conn, const std::string& command,
                                     const std::shared_ptr<ConnectCancel>& cancel,
                                     std::chrono::steady_clock::time_point deadline);

// Sends all of data on the channel, then EOF.
boost::asio::awaitable<void> send_all(Connection& conn, LIBSSH2_CHANNEL* channel,
                                      std::string_view data,
                                      const std::shared_ptr<ConnectCancel>& cancel,
                                      std::chrono::steady_clock::time_point deadline);

// Reads the channel to its end; its exit status, with at most 4 KiB of what
// it wrote to stderr (and stdout, which such commands do not use).
struct CommandResult {
  int exit_status = -1;
  std::string output;
};
boost::asio::awaitable<CommandResult> wait_command(Connection& conn, LIBSSH2_CHANNEL* channel,
                                                   const std::shared_ptr<ConnectCancel>& cancel,
                                                   std::chrono::steady_clock::time_point deadline);

// Sends an SSH keepalive when one is due, but only when the socket has room
// for it: libssh2 ignores EAGAIN inside libssh2_keepalive_send, so a
// keepalive it could only half send stays pending, and the next, different
// packet (a channel write) then fails with LIBSSH2_ERROR_BAD_USE. Returns
// whether it sent one (or none was due).
bool send_keepalive(LIBSSH2_SESSION* session, int fd);

std::string current_user();

// DLAUNCH_DEBUG=ssh: log each connection's stages with their times to stderr.
bool debug_ssh();

}  // namespace dlaunch::ssh
