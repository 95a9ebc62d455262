#include "transport/ssh/connect.h"

#include <poll.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <utility>  // boost 1.74 awaitable.hpp uses std::exchange without it
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "dlaunch/debug.h"

namespace dlaunch::ssh {

namespace asio = boost::asio;
using asio::use_awaitable;
using Clock = std::chrono::steady_clock;

namespace {

// Closes the socket when the deadline passes, so whatever the coroutine is
// waiting on fails at once; the caller then reports the stage it was in.
class Deadline {
 public:
  Deadline(asio::ip::tcp::socket& sock, Clock::time_point at) : timer_(sock.get_executor()) {
    timer_.expires_at(at);
    timer_.async_wait([&sock, expired = expired_, active = active_](boost::system::error_code ec) {
      // A step that ended just as the deadline passed: the expiry may
      // already be queued when cancel() comes; it must not close the
      // socket of a connection that is done (or gone).
      if (ec || !*active) return;
      *expired = true;
      boost::system::error_code ignored;
      sock.close(ignored);
    });
  }
  ~Deadline() {
    *active_ = false;
    timer_.cancel();
  }
  bool expired() const { return *expired_; }

 private:
  asio::steady_timer timer_;
  std::shared_ptr<bool> expired_ = std::make_shared<bool>(false);
  std::shared_ptr<bool> active_ = std::make_shared<bool>(true);
};

// While alive: a cancel() closes the socket (what connect or exec waits on
// then fails at once). Nothing after it is gone.
class CancelWatch {
 public:
  CancelWatch(std::shared_ptr<ConnectCancel> cancel, asio::ip::tcp::socket& sock)
      : cancel_(std::move(cancel)) {
    if (!cancel_) return;
    cancel_->watch([&sock] {
      boost::system::error_code ignored;
      sock.close(ignored);
    });
  }
  ~CancelWatch() {
    if (cancel_) cancel_->watch(nullptr);
  }
  CancelWatch(const CancelWatch&) = delete;
  CancelWatch& operator=(const CancelWatch&) = delete;
  bool cancelled() const { return cancel_ && cancel_->cancelled(); }

 private:
  std::shared_ptr<ConnectCancel> cancel_;
};

std::chrono::milliseconds backoff(int attempt) {
  static thread_local std::mt19937 rng{std::random_device{}()};
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  return std::chrono::milliseconds(static_cast<long>(100.0 * (1 << attempt) * jitter(rng)));
}

bool retriable(const boost::system::error_code& ec) {
  return ec == asio::error::connection_refused || ec == asio::error::connection_reset ||
         ec == asio::error::eof;
}

// DLAUNCH_DEBUG=ssh: one line per connection stage with its time since the
// start of the connection, to see where start-up time goes.
class StageLog {
 public:
  explicit StageLog(const ConnectOptions& o)
      : on_(debug_ssh()), host_(o.display()), start_(Clock::now()) {}
  void operator()(const char* stage) const {
    if (!on_) return;
    std::fprintf(stderr, "dlaunch: ssh %s: %s at %.1f ms\n", host_.c_str(), stage,
                 std::chrono::duration<double, std::milli>(Clock::now() - start_).count());
  }

 private:
  bool on_;
  std::string host_;
  Clock::time_point start_;
};

bool file_exists(const std::string& p) { return ::access(p.c_str(), R_OK) == 0; }

// Tries one key file; true if the server accepted it.
asio::awaitable<bool> try_key_file(Connection& c, const std::string& path) {
  for (;;) {
    const int rc = libssh2_userauth_publickey_fromfile_ex(c.session.get(), c.user.c_str(),
                                                          static_cast<unsigned>(c.user.size()),
                                                          nullptr, path.c_str(), nullptr);
    if (rc == 0) co_return true;
    if (rc != LIBSSH2_ERROR_EAGAIN) co_return false;
    co_await c.wait();
  }
}

// ssh-agent authentication runs with libssh2 in blocking mode (bounded by a
// session timeout): the agent protocol is a local socket, and libssh2's
// non-blocking agent path is the least exercised one.
bool try_agent(Connection& c, std::chrono::milliseconds budget, std::string& tried) {
  const char* sock = std::getenv("SSH_AUTH_SOCK");
  if (sock == nullptr || *sock == '\0') return false;
  Agent agent(libssh2_agent_init(c.session.get()));
  if (!agent) return false;
  libssh2_session_set_blocking(c.session.get(), 1);
  libssh2_session_set_timeout(c.session.get(),
                              static_cast<long>(std::max<long>(1, budget.count())));
  bool ok = false;
  int keys = 0;
  if (libssh2_agent_connect(agent.get()) == 0 && libssh2_agent_list_identities(agent.get()) == 0) {
    libssh2_agent_publickey* prev = nullptr;
    libssh2_agent_publickey* id = nullptr;
    while (libssh2_agent_get_identity(agent.get(), &id, prev) == 0) {
      ++keys;
      if (libssh2_agent_userauth(agent.get(), c.user.c_str(), id) == 0) {
        ok = true;
        break;
      }
      prev = id;
    }
  }
  libssh2_session_set_timeout(c.session.get(), 0);
  libssh2_session_set_blocking(c.session.get(), 0);
  tried +=
      fmt::format("{}ssh-agent ({} key{})", tried.empty() ? "" : ", ", keys, keys == 1 ? "" : "s");
  return ok;
}

asio::awaitable<void> authenticate(Connection& c, const ConnectOptions& o,
                                   Clock::time_point deadline) {
  const char* methods = nullptr;
  for (;;) {
    methods = libssh2_userauth_list(c.session.get(), c.user.c_str(),
                                    static_cast<unsigned>(c.user.size()));
    if (methods != nullptr || libssh2_userauth_authenticated(c.session.get())) break;
    if (libssh2_session_last_errno(c.session.get()) != LIBSSH2_ERROR_EAGAIN) {
      throw ConnectError("auth",
                         "cannot list authentication methods: " + last_error(c.session.get()));
    }
    co_await c.wait();
  }
  if (methods == nullptr) {
    c.auth_method = "none";
    co_return;
  }
  const std::string offered = methods;
  std::string tried;
  if (offered.find("publickey") != std::string::npos) {
    const auto budget =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!o.identities_only && try_agent(c, budget, tried)) {
      c.auth_method = "ssh-agent";
      co_return;
    }
    std::vector<std::string> files;
    for (const auto& f : o.identity_files) {
      if (file_exists(f)) {
        files.push_back(f);
      } else if (f == o.hostfile_identity) {
        throw ConnectError("auth",
                           fmt::format("identity file '{}' (from the hostfile) cannot be read", f));
      } else {
        tried += (tried.empty() ? "" : ", ") + f + " (cannot be read)";
      }
    }
    if (o.default_identities) {
      const std::string home = home_directory();
      for (const char* name : {"id_ed25519", "id_ecdsa", "id_rsa"}) {
        const std::string p = home + "/.ssh/" + name;
        if (file_exists(p) && std::find(files.begin(), files.end(), p) == files.end())
          files.push_back(p);
      }
    }
    for (const auto& f : files) {
      tried += (tried.empty() ? "" : ", ") + f;
      if (co_await try_key_file(c, f)) {
        c.auth_method = f;
        co_return;
      }
    }
  }
  throw ConnectError(
      "auth", fmt::format("authentication failed for {}@{}: the server offers [{}]; tried [{}]{}",
                          c.user, o.display(), offered, tried.empty() ? "no keys found" : tried,
                          o.certificate_files.empty()
                              ? ""
                              : " (the ssh config's CertificateFile cannot be offered by libssh2: "
                                "try --ssh openssh)"));
}

}  // namespace

bool debug_ssh() { return debug_enabled("ssh"); }

bool send_keepalive(LIBSSH2_SESSION* session, int fd) {
  if ((libssh2_session_block_directions(session) & LIBSSH2_SESSION_BLOCK_OUTBOUND) != 0)
    return false;
  pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
  if (::poll(&p, 1, 0) != 1 || (p.revents & POLLOUT) == 0) return false;
  int next = 0;
  return libssh2_keepalive_send(session, &next) == 0;
}

std::string current_user() {
  if (const passwd* pw = ::getpwuid(::getuid())) return pw->pw_name;
  const char* u = std::getenv("USER");
  return u != nullptr ? u : "root";
}

asio::awaitable<void> Connection::wait() {
  const int dirs = libssh2_session_block_directions(session.get());
  if ((dirs & LIBSSH2_SESSION_BLOCK_OUTBOUND) != 0) {
    co_await socket.async_wait(asio::socket_base::wait_write, use_awaitable);
  } else {
    co_await socket.async_wait(asio::socket_base::wait_read, use_awaitable);
  }
}

namespace {

// The SSH handshake on a connected socket: 0, or libssh2's error.
asio::awaitable<int> handshake(Connection& c, const ConnectOptions& o, const StageLog& log,
                               KnownHostsCache& known_hosts, const HostKeyQuery& query) {
  c.session.reset(libssh2_session_init_ex(SessionPages::alloc, SessionPages::free,
                                          SessionPages::realloc, &c.pages));
  if (c.session) SessionPages::install(c.session.get());
  // libssh2 zeroed all of it: a connection being made holds only the pages
  // its handshake and authentication write (the rest after the exec).
  c.pages.release_zero_pages();
  libssh2_session_set_blocking(c.session.get(), 0);
  // As ssh: ask first for the key types on record, so that a host with keys
  // of several types shows the one known_hosts can check.
  const std::string methods =
      known_hosts.preferred_methods(c.session.get(), query, o.host_key_policy);
  if (!methods.empty() &&
      libssh2_session_method_pref(c.session.get(), LIBSSH2_METHOD_HOSTKEY, methods.c_str()) != 0 &&
      debug_ssh()) {
    std::fprintf(stderr, "dlaunch: ssh %s: cannot prefer host key methods %s\n",
                 o.display().c_str(), methods.c_str());
  }
  int rc;
  while ((rc = libssh2_session_handshake(c.session.get(), c.socket.native_handle())) ==
         LIBSSH2_ERROR_EAGAIN) {
    co_await c.wait();
  }
  if (rc == 0) {
    log("handshake done");
    if (debug_ssh()) {
      const char* cipher = libssh2_session_methods(c.session.get(), LIBSSH2_METHOD_CRYPT_SC);
      const char* mac = libssh2_session_methods(c.session.get(), LIBSSH2_METHOD_MAC_SC);
      const char* hostkey = libssh2_session_methods(c.session.get(), LIBSSH2_METHOD_HOSTKEY);
      std::fprintf(stderr, "dlaunch: ssh %s: cipher=%s mac=%s hostkey=%s\n", o.display().c_str(),
                   cipher != nullptr ? cipher : "?", mac != nullptr ? mac : "?",
                   hostkey != nullptr ? hostkey : "?");
    }
  }
  co_return rc;
}

}  // namespace

std::string ConnectOptions::display() const {
  const std::string& name = alias.empty() ? host : alias;
  if (name == host) return port == 22 ? host : fmt::format("{}:{}", host, port);
  return fmt::format("{} ({}:{})", name, host, port);
}

std::string ConnectOptions::where() const {
  return fmt::format("{}@{}:{}", user.empty() ? current_user() : user, host, port);
}

asio::awaitable<std::unique_ptr<Connection>> connect(asio::io_context& io, const ConnectOptions& o,
                                                     KnownHostsCache& known_hosts,
                                                     StreamOpener opener) {
  init_library();
  const auto deadline = Clock::now() + o.timeout;
  StageLog log(o);
  auto c = std::make_unique<Connection>(io);
  c->user = o.user.empty() ? current_user() : o.user;
  std::string stage = "connect";
  Deadline guard(c->socket, deadline);
  CancelWatch watch(o.cancel, c->socket);
  if (watch.cancelled()) throw ConnectError("cancelled", "cancelled before connecting");
  // As ssh: the key is looked up under HostKeyAlias when given (without a
  // port), else under the host connected to (HostName), [host]:port off 22.
  const HostKeyQuery query{.name = o.host_key_alias.empty() ? o.host : o.host_key_alias,
                           .port = o.host_key_alias.empty() ? o.port : 22,
                           .user_files = o.known_hosts,
                           .global_files = o.global_known_hosts};
  try {
    if (opener) {
      // Through a jump host or a ProxyCommand: one attempt, the proxy's own
      // connection made its retries.
      co_await opener(*c, deadline);
      if (watch.cancelled()) throw ConnectError("cancelled", "cancelled while connecting");
      log("stream open");
      c->socket.non_blocking(true);
      stage = "handshake";
      const int rc = co_await handshake(*c, o, log, known_hosts, query);
      if (rc != 0) {
        throw ConnectError("handshake", fmt::format("SSH handshake with {} failed: {}", o.display(),
                                                    last_error(c->session.get())));
      }
    } else {
      asio::ip::tcp::resolver resolver(io);
      auto endpoints =
          co_await resolver.async_resolve(o.host, std::to_string(o.port), use_awaitable);
      for (int attempt = 0;; ++attempt) {
        stage = "connect";
        boost::system::error_code ec;
        c->socket = asio::ip::tcp::socket(io);
        for (const auto& ep : endpoints) {
          boost::system::error_code ignored;
          c->socket.close(ignored);
          co_await c->socket.async_connect(ep.endpoint(), asio::redirect_error(use_awaitable, ec));
          if (!ec) break;
          if (guard.expired()) break;
        }
        if (!ec) {
          log("tcp connected");
          c->socket.set_option(asio::ip::tcp::no_delay(true));
          c->socket.non_blocking(true);
          c->peer_address = c->socket.remote_endpoint().address().to_string();
          c->local_address = c->socket.local_endpoint().address().to_string();
          stage = "handshake";
          const int rc = co_await handshake(*c, o, log, known_hosts, query);
          if (rc == 0) break;
          // sshd drops connections past MaxStartups with a reset or a closed banner.
          ec = (rc == LIBSSH2_ERROR_SOCKET_DISCONNECT || rc == LIBSSH2_ERROR_SOCKET_RECV)
                   ? asio::error::connection_reset
                   : boost::system::error_code();
          if (!ec)
            throw ConnectError("handshake", fmt::format("SSH handshake with {} failed: {}",
                                                        o.display(), last_error(c->session.get())));
          c->session.reset();
        }
        if (guard.expired()) break;
        if (!retriable(ec) || attempt + 1 >= o.attempts) {
          throw ConnectError(stage,
                             fmt::format("cannot connect to {}: {} ({} attempt{})", o.display(),
                                         ec.message(), attempt + 1, attempt == 0 ? "" : "s"));
        }
        if (watch.cancelled()) break;
        asio::steady_timer pause(io);
        pause.expires_after(backoff(attempt));
        co_await pause.async_wait(use_awaitable);
        if (watch.cancelled()) break;
      }
      if (watch.cancelled()) throw boost::system::system_error(asio::error::operation_aborted);
      if (guard.expired()) throw boost::system::system_error(asio::error::timed_out);
    }

    stage = "hostkey";
    auto verdict = known_hosts.verify(c->session.get(), query, o.host_key_policy);
    if (!verdict.ok) throw ConnectError("hostkey", verdict.message);
    if (verdict.added) c->host_key_note = verdict.message;

    stage = "auth";
    co_await authenticate(*c, o, deadline);
    log("authenticated");
    if (o.keepalive_s > 0)
      libssh2_keepalive_config(c->session.get(), 1, static_cast<unsigned>(o.keepalive_s));
  } catch (const boost::system::system_error& e) {
    if (watch.cancelled()) throw ConnectError("cancelled", "cancelled (at " + stage + ")");
    if (guard.expired()) {
      throw ConnectError(stage,
                         fmt::format("timed out after {:.1f} s ({} with {})",
                                     static_cast<double>(o.timeout.count()) / 1000.0,
                                     stage == "connect" ? "connecting" : stage, o.display()));
    }
    throw ConnectError(
        stage, fmt::format("{} with {} failed: {}", stage, o.display(), e.code().message()));
  }
  co_return c;
}

asio::awaitable<Channel> exec(Connection& c, const std::string& command,
                              const std::shared_ptr<ConnectCancel>& cancel,
                              Clock::time_point deadline) {
  Deadline guard(c.socket, deadline);
  CancelWatch watch(cancel, c.socket);
  try {
    Channel ch = channel_of(c.session.get());
    for (;;) {
      ch.reset(libssh2_channel_open_session(c.session.get()));
      if (ch) break;
      if (libssh2_session_last_errno(c.session.get()) != LIBSSH2_ERROR_EAGAIN) {
        throw ConnectError("exec", "cannot open a channel: " + last_error(c.session.get()));
      }
      co_await c.wait();
    }
    int rc;
    while ((rc = libssh2_channel_exec(ch.get(), command.c_str())) == LIBSSH2_ERROR_EAGAIN)
      co_await c.wait();
    if (rc != 0) throw ConnectError("exec", "cannot run the agent: " + last_error(c.session.get()));
    co_return ch;
  } catch (const boost::system::system_error& e) {
    if (watch.cancelled()) throw ConnectError("cancelled", "cancelled while starting the agent");
    throw ConnectError("exec",
                       guard.expired() ? "timed out starting the agent" : e.code().message());
  }
}

asio::awaitable<void> send_all(Connection& c, LIBSSH2_CHANNEL* ch, std::string_view data,
                               const std::shared_ptr<ConnectCancel>& cancel,
                               Clock::time_point deadline) {
  Deadline guard(c.socket, deadline);
  CancelWatch watch(cancel, c.socket);
  try {
    std::size_t off = 0;
    while (off < data.size()) {
      const auto n = libssh2_channel_write(ch, data.data() + off,
                                           std::min<std::size_t>(data.size() - off, 1 << 16));
      if (n > 0) {
        off += static_cast<std::size_t>(n);
      } else if (n == LIBSSH2_ERROR_EAGAIN || n == 0) {
        co_await c.wait();
      } else {
        throw ConnectError("exec", "sending failed: " + last_error(c.session.get()));
      }
    }
    int rc;
    while ((rc = libssh2_channel_send_eof(ch)) == LIBSSH2_ERROR_EAGAIN) co_await c.wait();
    if (rc != 0) throw ConnectError("exec", "sending EOF failed: " + last_error(c.session.get()));
  } catch (const boost::system::system_error& e) {
    if (watch.cancelled()) throw ConnectError("cancelled", "cancelled while sending");
    throw ConnectError("exec", guard.expired() ? "timed out sending" : e.code().message());
  }
}

asio::awaitable<CommandResult> wait_command(Connection& c, LIBSSH2_CHANNEL* ch,
                                            const std::shared_ptr<ConnectCancel>& cancel,
                                            Clock::time_point deadline) {
  Deadline guard(c.socket, deadline);
  CancelWatch watch(cancel, c.socket);
  CommandResult r;
  try {
    char buf[4096];
    for (;;) {
      bool progress = false;
      bool again = false;
      for (int stream : {0, SSH_EXTENDED_DATA_STDERR}) {
        const auto n = libssh2_channel_read_ex(ch, stream, buf, sizeof buf);
        if (n > 0) {
          if (r.output.size() < 4096) r.output.append(buf, static_cast<std::size_t>(n));
          progress = true;
        } else if (n == LIBSSH2_ERROR_EAGAIN) {
          again = true;
        } else if (n < 0) {
          throw ConnectError("exec", "reading failed: " + last_error(c.session.get()));
        }
      }
      if (progress) continue;
      if (!again && libssh2_channel_eof(ch) != 0) break;
      co_await c.wait();
    }
    int rc;
    while ((rc = libssh2_channel_wait_closed(ch)) == LIBSSH2_ERROR_EAGAIN) co_await c.wait();
    r.exit_status = libssh2_channel_get_exit_status(ch);
  } catch (const boost::system::system_error& e) {
    if (watch.cancelled()) throw ConnectError("cancelled", "cancelled while waiting");
    throw ConnectError(
        "exec", guard.expired() ? "timed out waiting for the command to end" : e.code().message());
  }
  while (!r.output.empty() && (r.output.back() == '\n' || r.output.back() == '\r'))
    r.output.pop_back();
  co_return r;
}

}  // namespace dlaunch::ssh
