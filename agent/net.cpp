#include "net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>

#include "dlaunch/proto/interfaces.h"

namespace dlaunch::agent {

namespace asio = boost::asio;
using asio::ip::tcp;

std::string interface_toward(const std::string& address,
                             const std::vector<proto::Interface>& interfaces) {
  const std::string source = proto::source_address_toward(address);
  if (source.empty()) return {};
  for (const auto& i : interfaces) {
    if (i.address == source) return i.name;
  }
  return {};
}

proto::Env network_interface_env(const std::string& interface, bool mpi,
                                 const std::vector<std::string>& base,
                                 const proto::Env& worker_env) {
  proto::Env out;
  if (interface.empty()) return out;
  const auto set_by_user = [&](const std::string& name) {
    for (const auto& e : base) {
      if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '=')
        return true;
    }
    for (const auto& [k, v] : worker_env) {
      if (k == name) return true;
    }
    return false;
  };
  const auto put = [&](const std::string& name, const std::string& value) {
    if (!set_by_user(name)) out.emplace_back(name, value);
  };
  put("GLOO_SOCKET_IFNAME", interface);
  put("NCCL_SOCKET_IFNAME", "=" + interface);
  if (mpi) {
    put("OMPI_MCA_btl_tcp_if_include", interface);
    put("OMPI_MCA_oob_tcp_if_include", interface);
  }
  return out;
}

Result<ReservedPort> reserve_port(std::uint16_t wanted) {
  // A port of the job's choosing may have connections of an earlier attempt
  // in TIME_WAIT: SO_REUSEADDR lets it be reserved anyway. A free port is
  // picked without: Linux hands a bind(0) with SO_REUSEADDR a port that
  // another such socket holds bound but not listening (another job's
  // reservation), and two jobs got one MASTER_PORT (issue 34). Held without
  // SO_REUSEADDR, a reservation keeps every other bind off its port.
  int one = wanted != 0 ? 1 : 0;
  // IPv6 with IPv4 mapped in (not V6ONLY): one socket holds the port for both.
  UniqueFd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd) {
    int zero = 0;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(wanted);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      socklen_t len = sizeof addr;
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
      return ReservedPort{std::move(fd), ntohs(addr.sin6_port), true};
    }
    if (errno == EADDRINUSE || errno == EACCES) {
      return Result<ReservedPort>::failure("MASTER_PORT " + std::to_string(wanted) +
                                           " is not free on node 0: " + std::strerror(errno));
    }
    fd.reset();  // IPv6 is off here (EADDRNOTAVAIL, EAFNOSUPPORT): IPv4 alone
  }
  fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Result<ReservedPort>::failure(std::string("socket: ") + std::strerror(errno));
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(wanted);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return Result<ReservedPort>::failure("MASTER_PORT " + std::to_string(wanted) +
                                         " is not free on node 0: " + std::strerror(errno));
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  return ReservedPort{std::move(fd), ntohs(addr.sin_port), false};
}

// ---------------------------------------------------------------------------

struct ProbeListener::State {
  explicit State(asio::io_context& io) : acceptor(io) {}
  tcp::acceptor acceptor;

  static void accept_next(const std::shared_ptr<State>& state) {
    state->acceptor.async_accept([state](boost::system::error_code ec, tcp::socket socket) {
      // On an error (out of descriptors), stop: the kernel still completes
      // the handshakes of what waits in the backlog, which is all a probe needs.
      if (ec || !state->acceptor.is_open()) return;
      boost::system::error_code ignored;
      socket.set_option(asio::socket_base::linger(true, 0), ignored);
      socket.close(ignored);
      accept_next(state);
    });
  }
};

ProbeListener::ProbeListener(asio::io_context& io, ReservedPort port)
    : state_(std::make_shared<State>(io)) {
  if (::listen(port.fd.get(), SOMAXCONN) != 0) {
    throw Error(ErrorKind::kEnvironment, "cannot listen on the reserved port " +
                                             std::to_string(port.port) + ": " +
                                             std::strerror(errno));
  }
  boost::system::error_code ec;
  state_->acceptor.assign(port.ipv6 ? tcp::v6() : tcp::v4(), port.fd.get(), ec);
  if (ec) {
    throw Error(ErrorKind::kEnvironment, "cannot listen on the reserved port " +
                                             std::to_string(port.port) + ": " + ec.message());
  }
  static_cast<void>(port.fd.release());  // the acceptor owns it now
  State::accept_next(state_);
}

ProbeListener::~ProbeListener() { close(); }

void ProbeListener::close() {
  boost::system::error_code ignored;
  if (state_->acceptor.is_open()) state_->acceptor.close(ignored);
}

// ---------------------------------------------------------------------------

struct ReachProbe::State {
  explicit State(Clock& clock) : timer(clock.make_timer()) {}
  std::unique_ptr<Timer> timer;
  std::vector<std::unique_ptr<tcp::socket>> sockets;  // null: answered
  proto::ProbeResult result;
  std::size_t pending = 0;
  Route route;
  Done done;
  bool finished = false;

  void answer(std::size_t i, bool reached, std::string error) {
    if (finished || !sockets[i]) return;
    boost::system::error_code ignored;
    sockets[i]->set_option(asio::socket_base::linger(true, 0), ignored);
    sockets[i]->close(ignored);
    sockets[i].reset();
    auto& o = result.outcomes[i];
    o.reached = reached;
    o.error = std::move(error);
    if (--pending == 0) finish();
  }
  void finish() {
    if (finished) return;
    finished = true;
    timer->cancel();
    for (auto& o : result.outcomes) {
      if (o.interface.empty() && route) o.interface = route(o.address);
    }
    if (done) done(std::move(result));
  }
  void cancel() {
    finished = true;
    timer->cancel();
    boost::system::error_code ignored;
    for (auto& s : sockets) {
      if (s) s->close(ignored);
    }
  }
};

ReachProbe::ReachProbe(asio::io_context& io, Clock& clock, const proto::Probe& probe, Route route,
                       Done done)
    : state_(std::make_shared<State>(clock)) {
  auto& st = *state_;
  st.route = std::move(route);
  st.done = std::move(done);
  st.sockets.resize(probe.addresses.size());
  st.result.outcomes.resize(probe.addresses.size());
  for (std::size_t i = 0; i < probe.addresses.size(); ++i) {
    auto& o = st.result.outcomes[i];
    o.address = probe.addresses[i];
    if (i >= proto::kMaxProbeAddresses) {
      o.error = "not tried (over the limit of " + std::to_string(proto::kMaxProbeAddresses) +
                " addresses)";
      continue;
    }
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(o.address, ec);
    if (ec) {
      o.error = "not an IP address";
      continue;
    }
    auto socket = std::make_unique<tcp::socket>(io);
    socket->open(address.is_v4() ? tcp::v4() : tcp::v6(), ec);
    if (ec) {
      o.error = ec.message();
      continue;
    }
    st.sockets[i] = std::move(socket);
    ++st.pending;
  }
  if (st.pending == 0) {
    // Nothing to wait for; answer from the loop, never from inside the constructor.
    asio::post(io, [state = state_] { state->finish(); });
    return;
  }
  char timed_out[64];
  std::snprintf(timed_out, sizeof timed_out, "timed out after %.1f s",
                static_cast<double>(probe.timeout_ms) / 1000.0);
  clock.after(*st.timer, std::chrono::milliseconds(probe.timeout_ms),
              [weak = std::weak_ptr<State>(state_), why = std::string(timed_out)] {
                const auto s = weak.lock();
                if (!s) return;
                for (std::size_t i = 0; i < s->sockets.size(); ++i) {
                  if (s->sockets[i]) s->answer(i, false, why);
                }
              });
  for (std::size_t i = 0; i < st.sockets.size(); ++i) {
    if (!st.sockets[i]) continue;
    const tcp::endpoint endpoint(asio::ip::make_address(probe.addresses[i]), probe.port);
    st.sockets[i]->async_connect(endpoint, [state = state_, i](boost::system::error_code ec) {
      if (ec == asio::error::operation_aborted) return;
      // Reset: node 0 accepted (the handshake completed) and reset the
      // connection before this side looked; it was reached all the same.
      // (A refused connect is ECONNREFUSED.)
      const bool reached = !ec || ec == asio::error::connection_reset;
      state->answer(i, reached, reached ? "" : ec.message());
    });
  }
}

ReachProbe::~ReachProbe() { cancel(); }

void ReachProbe::cancel() {
  if (state_) state_->cancel();
}

}  // namespace dlaunch::agent
