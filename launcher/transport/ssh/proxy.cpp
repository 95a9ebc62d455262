#include "transport/ssh/proxy.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "dlaunch/process.h"

namespace dlaunch::ssh {

namespace asio = boost::asio;
using asio::use_awaitable;
using Clock = std::chrono::steady_clock;

namespace {

// What a tunnel holds in each direction before it stops reading that side:
// the SSH window and the socket buffers do the rest of the flow control.
constexpr std::size_t kTunnelBuffer = std::size_t{256} << 10;
// A coroutine waiting on a shared session re-checks its deadline and its
// cancellation at least this often.
constexpr std::chrono::milliseconds kRecheck{200};

// Coroutines waiting for something on a shared session: each waits on a
// timer; notify() wakes them all (they look again), the timer's expiry is
// their deadline.
class Waiters {
 public:
  explicit Waiters(asio::io_context& io) : io_(io) {}
  asio::awaitable<void> wait(Clock::time_point until) {
    auto t = std::make_shared<asio::steady_timer>(io_, std::min(until, Clock::now() + kRecheck));
    timers_.push_back(t);
    boost::system::error_code ec;
    co_await t->async_wait(asio::redirect_error(use_awaitable, ec));
    std::erase(timers_, t);
  }
  void notify() {
    for (auto& t : timers_) t->cancel();
  }

 private:
  asio::io_context& io_;
  std::vector<std::shared_ptr<asio::steady_timer>> timers_;
};

// Errors of the session itself (its connection), not of one channel.
bool session_error(long rc) {
  return rc == LIBSSH2_ERROR_SOCKET_RECV || rc == LIBSSH2_ERROR_SOCKET_SEND ||
         rc == LIBSSH2_ERROR_SOCKET_DISCONNECT || rc == LIBSSH2_ERROR_SOCKET_TIMEOUT ||
         rc == LIBSSH2_ERROR_TIMEOUT;
}

std::pair<int, int> stream_pair(const std::string& what) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) {
    throw ConnectError("connect", what + ": socketpair: " + std::strerror(errno));
  }
  return {fds[0], fds[1]};
}

struct Tunnel;

// Which call on a jump session last stopped half-way through a send, and
// must therefore be repeated before any other call that sends.
enum class Owner { kNone, kTunnel, kOpener };

struct JumpSession : std::enable_shared_from_this<JumpSession> {
  JumpSession(asio::io_context& io_, std::string name_)
      : io(io_), name(std::move(name_)), waiters(io_), keepalive(io_) {}

  asio::io_context& io;
  std::string name;                  // the jump host, for messages
  std::unique_ptr<Connection> conn;  // once connected
  bool connecting = true;
  std::string error;  // why it failed (connecting, or later); empty: fine
  Waiters waiters;    // for it to connect, for the channel opener's turn
  std::vector<std::weak_ptr<Tunnel>> tunnels;
  Owner owner = Owner::kNone;
  std::weak_ptr<Tunnel> owner_tunnel;
  bool opening =
      false;  // a channel is being opened (one at a time: libssh2 keeps that state per session)
  bool read_armed = false;
  bool write_armed = false;
  bool service_posted = false;
  bool keepalive_armed = false;
  asio::steady_timer keepalive;
  // Channels of closed tunnels, freed once no other call must go first
  // (freeing sends a message).
  std::vector<Channel> to_free;

  LIBSSH2_SESSION* session() const { return conn->session.get(); }
  bool outbound_blocked() const {
    return (libssh2_session_block_directions(session()) & LIBSSH2_SESSION_BLOCK_OUTBOUND) != 0;
  }
  bool dead() const { return !error.empty(); }

  void service();
  void schedule_service() {
    if (service_posted || dead()) return;
    service_posted = true;
    asio::post(io, [self = shared_from_this()] {
      self->service_posted = false;
      self->service();
    });
  }
  void arm();
  void fail(const std::string& why);
  void arm_keepalive();
  // No tunnel left and none opening: stop waiting on the socket and the
  // keepalive timer, so that an io_context with nothing else to do returns.
  void idle_check();
  void release(Channel ch) {
    if (!ch) return;
    if (owner == Owner::kNone || dead()) return;  // ch's deleter frees it now
    to_free.push_back(std::move(ch));
  }
  // Whether any tunnel would read from the channel side now.
  bool wants_input() const;
};

// One node's stream: a direct-tcpip channel of the jump session, pumped to
// `local`, the socketpair end opposite the node's own SSH session.
struct Tunnel : std::enable_shared_from_this<Tunnel> {
  Tunnel(std::shared_ptr<JumpSession> js_, Channel ch_, asio::local::stream_protocol::socket local_)
      : js(std::move(js_)), ch(std::move(ch_)), local(std::move(local_)) {}

  std::shared_ptr<JumpSession> js;
  Channel ch;
  asio::local::stream_protocol::socket local;
  std::string to_local;   // from the channel, for the node's session
  std::string to_remote;  // from the node's session, for the channel
  std::size_t to_remote_off = 0;
  bool local_eof = false;
  bool remote_eof = false;
  bool sent_eof = false;
  bool local_shut = false;
  bool closed = false;
  bool local_read_armed = false;
  bool local_write_armed = false;

  void close() {
    if (closed) return;
    closed = true;
    boost::system::error_code ignored;
    local.close(ignored);  // the node's session sees the stream end
    if (js->owner == Owner::kTunnel && js->owner_tunnel.lock().get() == this) {
      js->owner = Owner::kNone;
    }
    js->release(std::move(ch));
  }

  bool wants_input() const { return !closed && !remote_eof && to_local.size() < kTunnelBuffer; }

  // The three calls a tunnel makes on the session. One that returned EAGAIN
  // with the session blocked on sending may have left a packet half-sent:
  // this tunnel then owns the session, and repeats that same call first.
  enum class Op { kRead, kWrite, kEof };
  enum class Step { kDone, kBlocked, kFailed };
  Op blocked_op = Op::kRead;

  Step blocked_on(Op op) {
    if (!js->outbound_blocked()) return Step::kDone;
    js->owner = Owner::kTunnel;
    js->owner_tunnel = weak_from_this();
    blocked_op = op;
    return Step::kBlocked;
  }

  Step read_channel(bool poll_only, bool& read_socket) {
    LIBSSH2_CHANNEL* c = ch.get();
    if (poll_only && libssh2_poll_channel_read(c, 0) == 0 && libssh2_channel_eof(c) == 0)
      return Step::kDone;
    char buf[32 << 10];
    while (!remote_eof && to_local.size() < kTunnelBuffer) {
      read_socket = read_socket || !poll_only;
      const auto n =
          libssh2_channel_read(c, buf, std::min(sizeof buf, kTunnelBuffer - to_local.size()));
      if (n > 0) {
        to_local.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n == LIBSSH2_ERROR_EAGAIN) return blocked_on(Op::kRead);
      if (n == 0) {
        if (libssh2_channel_eof(c) != 0) remote_eof = true;
        return Step::kDone;
      }
      failed(n);
      return Step::kFailed;
    }
    return Step::kDone;
  }

  Step write_channel() {
    while (to_remote_off < to_remote.size()) {
      const auto n = libssh2_channel_write(ch.get(), to_remote.data() + to_remote_off,
                                           to_remote.size() - to_remote_off);
      if (n > 0) {
        to_remote_off += static_cast<std::size_t>(n);
        continue;
      }
      if (n == LIBSSH2_ERROR_EAGAIN || n == 0) {
        // Blocked on the socket (the call must be repeated first), or the
        // window is full (a read will bring its adjustment).
        return blocked_on(Op::kWrite) == Step::kBlocked ? Step::kBlocked : Step::kDone;
      }
      failed(n);
      return Step::kFailed;
    }
    to_remote.clear();
    to_remote_off = 0;
    return Step::kDone;
  }

  Step send_eof() {
    if (!local_eof || !to_remote.empty() || sent_eof) return Step::kDone;
    const int rc = libssh2_channel_send_eof(ch.get());
    if (rc == 0) {
      sent_eof = true;
      return Step::kDone;
    }
    if (rc == LIBSSH2_ERROR_EAGAIN) return blocked_on(Op::kEof);
    failed(rc);
    return Step::kFailed;
  }

  // Session side: channel -> to_local, to_remote -> channel, EOF.
  // `poll_only`: look at what libssh2 already holds for this channel without
  // reading the socket (someone else just did). True when it read the socket.
  bool pump_session(bool poll_only) {
    if (closed || js->dead()) return false;
    const bool mine = js->owner == Owner::kTunnel && js->owner_tunnel.lock().get() == this;
    if (js->owner != Owner::kNone && !mine) return false;  // another call goes first
    js->owner = Owner::kNone;
    bool read_socket = false;
    if (mine && blocked_op != Op::kRead) {
      const Step first = blocked_op == Op::kWrite ? write_channel() : send_eof();
      if (first != Step::kDone) return read_socket;
    }
    if (read_channel(poll_only && !mine, read_socket) != Step::kDone) return read_socket;
    if (write_channel() != Step::kDone) return read_socket;
    send_eof();
    return read_socket;
  }

  // A call on the channel failed: the session's connection (every tunnel
  // goes), or this channel alone.
  void failed(long rc) {
    if (session_error(rc)) return js->fail("connection lost: " + last_error(js->session()));
    close();
  }

  // Socket side: the node's session -> to_remote, to_local -> the node's
  // session. True when it took in bytes the session side should send.
  bool pump_local() {
    if (closed) return false;
    boost::system::error_code ec;
    while (!to_local.empty()) {
      const std::size_t n = local.write_some(asio::buffer(to_local), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      if (ec) {
        close();
        return false;
      }
      to_local.erase(0, n);
    }
    if (remote_eof && to_local.empty() && !local_shut) {
      local_shut = true;
      local.shutdown(asio::socket_base::shutdown_send, ec);
    }
    bool took = false;
    char buf[32 << 10];
    while (!local_eof && to_remote.size() < kTunnelBuffer) {
      const std::size_t n = local.read_some(asio::buffer(buf), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      if (ec) {
        local_eof = true;  // the node's session closed its end (or it broke)
        took = true;
        break;
      }
      to_remote.append(buf, n);
      took = true;
    }
    if (local_eof && remote_eof && to_local.empty() && to_remote.empty()) {
      close();
      return false;
    }
    arm_local();
    return took;
  }

  void arm_local() {
    if (closed) return;
    if (!local_read_armed && !local_eof && to_remote.size() < kTunnelBuffer) {
      local_read_armed = true;
      local.async_wait(asio::socket_base::wait_read,
                       [self = shared_from_this()](boost::system::error_code ec) {
                         self->local_read_armed = false;
                         if (self->closed) return;
                         if (ec) return self->close();
                         self->js->schedule_service();
                       });
    }
    if (!local_write_armed && !to_local.empty()) {
      local_write_armed = true;
      local.async_wait(asio::socket_base::wait_write,
                       [self = shared_from_this()](boost::system::error_code ec) {
                         self->local_write_armed = false;
                         if (self->closed) return;
                         if (ec) return self->close();
                         self->js->schedule_service();
                       });
    }
  }
};

void JumpSession::service() {
  if (!conn || dead()) return;
  waiters.notify();  // the opener, if waiting, looks again
  if (owner == Owner::kOpener) return arm();
  if (owner == Owner::kTunnel) {
    if (auto t = owner_tunnel.lock(); t && !t->closed) {
      t->pump_session(false);
      t->pump_local();
      if (dead()) return;
      if (owner != Owner::kNone) return arm();
    } else {
      owner = Owner::kNone;
    }
  }
  // Every tunnel: the first reads the socket (which queues what came for
  // all channels), the others look at what is queued for them. Whatever a
  // tunnel took in from its node goes out in a second pass.
  std::erase_if(tunnels, [](const std::weak_ptr<Tunnel>& w) {
    auto t = w.lock();
    return !t || t->closed;
  });
  if (tunnels.empty() && owner == Owner::kNone) {
    to_free.clear();
    return idle_check();
  }
  if (owner == Owner::kNone) to_free.clear();  // their deleters send the close
  const auto live = tunnels;                   // a tunnel may close while pumping
  bool read = false;
  bool again = false;
  for (const auto& w : live) {
    auto t = w.lock();
    if (!t) continue;
    if (t->pump_session(read)) read = true;
    if (dead()) return;
    if (t->pump_local()) again = true;
    if (owner != Owner::kNone) break;
  }
  if (again && owner == Owner::kNone) {
    for (const auto& w : live) {
      if (auto t = w.lock(); t && !t->to_remote.empty()) {
        t->pump_session(true);
        t->pump_local();
        if (owner != Owner::kNone) break;
      }
    }
  }
  arm();
}

bool JumpSession::wants_input() const {
  if (opening) return true;
  return std::any_of(tunnels.begin(), tunnels.end(), [](const std::weak_ptr<Tunnel>& w) {
    auto t = w.lock();
    return t && t->wants_input();
  });
}

void JumpSession::arm() {
  if (!conn || dead()) return;
  // Read only while someone takes what comes: libssh2 reads the socket only
  // for a call on a channel (or the opener's), so a readable socket that
  // nobody reads would wake the loop forever. A tunnel that drains its
  // buffer asks for a service, which arms this again.
  if (!read_armed && (wants_input() || owner != Owner::kNone)) {
    read_armed = true;
    conn->socket.async_wait(asio::socket_base::wait_read,
                            [self = shared_from_this()](boost::system::error_code ec) {
                              self->read_armed = false;
                              if (self->dead() || ec == asio::error::operation_aborted) return;
                              if (ec) return self->fail("connection lost: " + ec.message());
                              self->service();
                            });
  }
  if (!write_armed && outbound_blocked()) {
    write_armed = true;
    conn->socket.async_wait(asio::socket_base::wait_write,
                            [self = shared_from_this()](boost::system::error_code ec) {
                              self->write_armed = false;
                              if (self->dead() || ec == asio::error::operation_aborted) return;
                              if (ec) return self->fail("connection lost: " + ec.message());
                              self->service();
                            });
  }
}

void JumpSession::fail(const std::string& why) {
  if (dead()) return;
  error = "jump host " + name + ": " + why;
  if (debug_ssh()) write_all(2, "dlaunch: ssh " + error + "\n");
  keepalive.cancel();
  for (auto& w : tunnels) {
    if (auto t = w.lock()) t->close();
  }
  tunnels.clear();
  waiters.notify();
  if (conn) {
    boost::system::error_code ignored;
    conn->socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  }
}

void JumpSession::idle_check() {
  if (!tunnels.empty() || opening || connecting || !conn || dead()) return;
  keepalive.cancel();
  boost::system::error_code ignored;
  conn->socket.cancel(ignored);
}

void JumpSession::arm_keepalive() {
  if (keepalive_armed) return;
  keepalive_armed = true;
  keepalive.expires_after(timing::kSshKeepalivePoll);
  keepalive.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    self->keepalive_armed = false;
    if (ec || self->dead() || !self->conn) return;
    if (self->owner == Owner::kNone && !self->opening) {
      send_keepalive(self->session(), self->conn->socket.native_handle());
      self->service();
    }
    self->arm_keepalive();
  });
}

// The stream to host:port through `js`: a direct-tcpip channel and a
// socketpair; c.socket gets the socketpair's other end.
asio::awaitable<void> open_tunnel(std::shared_ptr<JumpSession> js, Connection& c, std::string host,
                                  int port, Clock::time_point deadline,
                                  std::shared_ptr<ConnectCancel> cancel) {
  auto check = [&] {
    if (js->dead()) throw ConnectError("connect", js->error + " (on the way to " + host + ")");
    if (cancel && cancel->cancelled())
      throw ConnectError("cancelled", "cancelled while connecting");
    if (Clock::now() >= deadline) {
      throw ConnectError("connect",
                         fmt::format("timed out opening a connection to {}:{} through jump host {}",
                                     host, port, js->name));
    }
  };
  check();
  while (js->opening) {
    co_await js->waiters.wait(deadline);
    check();
  }
  js->opening = true;
  struct Release {
    JumpSession& j;
    ~Release() {
      j.opening = false;
      if (j.owner == Owner::kOpener) j.owner = Owner::kNone;
      j.waiters.notify();
      j.idle_check();
    }
  } release{*js};
  Channel ch = channel_of(js->session());
  for (;;) {
    if (js->owner == Owner::kNone || js->owner == Owner::kOpener) {
      js->owner = Owner::kNone;
      ch.reset(libssh2_channel_direct_tcpip_ex(js->session(), host.c_str(), port, "127.0.0.1", 22));
      if (ch) break;
      const int err = libssh2_session_last_errno(js->session());
      if (session_error(err)) js->fail("connection lost: " + last_error(js->session()));
      if (err != LIBSSH2_ERROR_EAGAIN) {
        check();
        throw ConnectError("connect", fmt::format("jump host {} cannot connect to {}:{}: {}",
                                                  js->name, host, port, last_error(js->session())));
      }
      if (js->outbound_blocked()) js->owner = Owner::kOpener;
      js->arm();
    }
    co_await js->waiters.wait(deadline);
    check();
  }
  const auto [mine, theirs] = stream_pair("tunnel to " + host);
  c.socket.assign(asio::ip::tcp::v4(), mine);
  asio::local::stream_protocol::socket local(js->io);
  local.assign(asio::local::stream_protocol(), theirs);
  local.non_blocking(true);  // read_some/write_some: would_block, never a wait
  auto t = std::make_shared<Tunnel>(js, std::move(ch), std::move(local));
  js->tunnels.push_back(t);
  c.tunnel = t;
  c.peer_address = host;
  t->arm_local();
  js->arm_keepalive();
  js->schedule_service();
}

// A ProxyCommand's process: gone with the connection it carries.
class ProxyProcess {
 public:
  explicit ProxyProcess(pid_t pid) : pid_(pid) {}
  ~ProxyProcess() {
    // Its stream is closed by now, and a proxy like `ssh -W` ends on that;
    // one that does not is killed. The controller may have reaped it already.
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != 0) return;
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  ProxyProcess(const ProxyProcess&) = delete;
  ProxyProcess& operator=(const ProxyProcess&) = delete;

 private:
  pid_t pid_;
};

asio::awaitable<void> open_proxy_command(Connection& c, std::string command, std::string host) {
  const auto [mine, theirs] = stream_pair("ProxyCommand for " + host);
  UniqueFd their_end(theirs);
  SpawnOptions opts;
  opts.argv = {"/bin/sh", "-c", "exec " + command};
  opts.env = current_environment();
  opts.new_process_group = true;  // a Ctrl-C reaches dlaunch, which decides
  opts.parent_death_signal = SIGTERM;
  opts.stdin_fd = their_end.get();
  opts.stdout_fd = their_end.get();
  SpawnResult r = spawn(opts);
  if (!r) {
    ::close(mine);
    throw ConnectError("connect", "ProxyCommand for " + host + " (" + command + "): " + r.error());
  }
  c.tunnel = std::make_shared<ProxyProcess>(*r);
  c.socket.assign(asio::ip::tcp::v4(), mine);
  c.peer_address = host;
  co_return;
}

std::string chain_key(const std::vector<ConnectOptions>& chain) {
  std::string key;
  for (const auto& h : chain)
    key += h.where() + "|" + h.proxy_command + "|" + h.host_key_alias + ";";
  return key;
}

}  // namespace

struct Connector::State {
  explicit State(asio::io_context& io_) : io(io_) {}
  asio::io_context& io;
  KnownHostsCache known_hosts;
  std::map<std::string, std::shared_ptr<JumpSession>> jumps;
  int jump_connections = 0;
};

namespace {

StreamOpener through(const std::shared_ptr<JumpSession>& js, const ConnectOptions& o) {
  return [js, host = o.host, port = o.port, cancel = o.cancel](Connection& c,
                                                               Clock::time_point deadline) {
    return open_tunnel(js, c, host, port, deadline, cancel);
  };
}

StreamOpener proxy_command(const ConnectOptions& o) {
  return [command = o.proxy_command, host = o.host](Connection& c, Clock::time_point) {
    return open_proxy_command(c, command, host);
  };
}

// The session of the last host of `chain`, reached through the ones before
// it: made once, shared by everyone behind it.
asio::awaitable<std::shared_ptr<JumpSession>> jump_session(std::shared_ptr<Connector::State> st,
                                                           std::vector<ConnectOptions> chain) {
  const std::string key = chain_key(chain);
  if (auto it = st->jumps.find(key); it != st->jumps.end() && !it->second->dead()) {
    auto js = it->second;
    while (js->connecting) co_await js->waiters.wait(Clock::time_point::max());
    if (js->dead()) throw ConnectError("connect", js->error);
    co_return js;
  }
  ConnectOptions hop = std::move(chain.back());
  chain.pop_back();
  hop.cancel = nullptr;  // shared: no single node's link may cancel it
  auto js = std::make_shared<JumpSession>(st->io, hop.display());
  st->jumps[key] = js;
  try {
    std::unique_ptr<Connection> conn;
    if (!chain.empty()) {
      auto parent = co_await jump_session(st, chain);
      conn = co_await connect(st->io, hop, st->known_hosts, through(parent, hop));
    } else if (!hop.proxy_command.empty()) {
      conn = co_await connect(st->io, hop, st->known_hosts, proxy_command(hop));
    } else {
      conn = co_await connect(st->io, hop, st->known_hosts);
    }
    js->conn = std::move(conn);
    ++st->jump_connections;
  } catch (const ConnectError& e) {
    js->error = "jump host " + js->name + ": " + e.what();
    js->connecting = false;
    js->waiters.notify();
    throw ConnectError(e.stage(), js->error);
  }
  js->connecting = false;
  js->waiters.notify();
  if (!js->conn->host_key_note.empty()) write_all(2, "dlaunch: " + js->conn->host_key_note + "\n");
  if (debug_ssh()) {
    write_all(2, fmt::format("dlaunch: ssh {}: jump host connected ({})\n", js->name,
                             js->conn->auth_method));
  }
  co_return js;
}

}  // namespace

Connector::Connector(asio::io_context& io) : state_(std::make_shared<State>(io)) {}

Connector::~Connector() {
  for (auto& [key, js] : state_->jumps) js->fail("dlaunch is done with it");
}

KnownHostsCache& Connector::known_hosts() { return state_->known_hosts; }

int Connector::jump_connections() const { return state_->jump_connections; }

asio::awaitable<std::unique_ptr<Connection>> Connector::connect(const ConnectOptions& o) {
  auto st = state_;  // the coroutine keeps what it uses alive
  if (!o.jumps.empty()) {
    auto js = co_await jump_session(st, o.jumps);
    co_return co_await ssh::connect(st->io, o, st->known_hosts, through(js, o));
  }
  if (!o.proxy_command.empty()) {
    co_return co_await ssh::connect(st->io, o, st->known_hosts, proxy_command(o));
  }
  co_return co_await ssh::connect(st->io, o, st->known_hosts);
}

}  // namespace dlaunch::ssh
