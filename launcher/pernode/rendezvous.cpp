#include "pernode/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/store.h"
#include "dlaunch/error.h"
#include "dlaunch/process.h"
#include "dlaunch/proto/interfaces.h"
#include "dlaunch/text.h"
#include "dlaunch/tunables.h"
#include "hostfile/hostfile.h"

namespace dlaunch {

namespace {

using std::chrono::milliseconds;
// How long a launcher's alive key may be gone before it is lost (a
// reconnect sets it again within a heartbeat period).
constexpr milliseconds kGone{1000};

std::string secs(milliseconds d) {
  return fmt::format("{:g} s", static_cast<double>(d.count()) / 1000.0);
}

// The numeric address of `host` (first IPv4, else first), or empty.
std::string numeric_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return {};
  std::string out;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const std::string text = proto::numeric_address(a->ai_addr);
    if (text.empty()) continue;
    if (out.empty() || a->ai_family == AF_INET) out = text;
    if (a->ai_family == AF_INET) break;
  }
  ::freeaddrinfo(res);
  return out;
}

// A free TCP port of this machine (for MASTER_PORT): node 0's agent reserves
// it again at once when it starts (ControllerConfig::master_port). Picked
// without SO_REUSEADDR, which would let Linux hand out a port another job's
// agent holds reserved (agent/net.h).
std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(ErrorKind::kEnvironment, std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw Error(ErrorKind::kEnvironment, "cannot find a free port for MASTER_PORT: " + why);
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

// What answers at the address is not this job's store (a launcher must not
// join it).
bool not_this_jobs_store(const comm::StoreError& e) {
  using C = comm::StoreError::Cause;
  return e.cause() == C::kPeerUnproven || e.cause() == C::kNotAStore ||
         e.cause() == C::kOtherVersion || e.cause() == C::kOtherUser;
}

// A whole decimal number in [lo, hi], or nothing: values from the store
// are checked like any input from the network.
std::optional<long long> parse_number(std::string_view v, long long lo, long long hi) {
  long long n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < lo || n > hi) return std::nullopt;
  return n;
}

// A round's failure entry: "status\nfinal\ntext". The text is shown as
// the report's, so it is made printable here; a status that is no exit
// status is 1.
PeerFailure parse_failure(const std::string& v) {
  PeerFailure f;
  const auto a = v.find('\n');
  const auto b = a == std::string::npos ? a : v.find('\n', a + 1);
  if (b == std::string::npos) {
    f.message = printable(v);
    return f;
  }
  // "join": not a failure, the host's call to restart with a launcher that
  // waits to join (the restart is not counted).
  f.joining = v.substr(0, a) == "join";
  f.status = static_cast<int>(parse_number(v.substr(0, a), 1, 255).value_or(1));
  f.final = v.substr(a + 1, b - a - 1) == "1";
  f.message = v.substr(b + 1);
  return f;
}

// What the store says a launcher is called: "host pid N" as launchers write
// it, printable and bounded, else the store holds something no launcher
// wrote.
bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 512) return false;
  return std::none_of(name.begin(), name.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
}

// A host name or numeric address as MASTER_ADDR (what workers connect to and
// the banner shows): letters, digits and . - _ : % only.
bool valid_address(std::string_view a) {
  if (a.empty() || a.size() > 253) return false;
  return std::all_of(a.begin(), a.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-' || c == '_' ||
           c == ':' || c == '%';
  });
}

// What a store call's answer says: nothing, or the failure thrown (the
// operation's step() ends the operation with it).
void ok(const rdzv::StoreFailure& f) {
  if (f) throw *f;
}

std::string endpoint_text(const std::string& host, std::uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

}  // namespace

Rendezvous::Rendezvous(RdzvSettings s, rdzv::StoreNetwork& network)
    : own_io_(std::make_unique<boost::asio::io_context>()),
      own_clock_(std::make_unique<AsioClock>(*own_io_)),
      home_(own_io_.get()),
      home_clock_(own_clock_.get()),
      s_(std::move(s)),
      net_(network),
      meeting_port_(s_.port) {
  endpoint_ = endpoint_text(s_.host, s_.port);
}

Rendezvous::Rendezvous(RdzvSettings s, rdzv::StoreNetwork& network, boost::asio::io_context& io,
                       Clock& clock)
    : home_(&io), home_clock_(&clock), s_(std::move(s)), net_(network), meeting_port_(s_.port) {
  endpoint_ = endpoint_text(s_.host, s_.port);
}

Rendezvous::~Rendezvous() {
  stop_watch();
  if (op_live_) *op_live_ = false;  // the operation under way ends unanswered
  if (server_ != nullptr) server_->on_change(nullptr);
  op_timer_.reset();
  store_.reset();
  retired_.reset();
  server_.reset();
}

std::string Rendezvous::key(const std::string& k) const { return "dlaunch/rdzv/" + k; }

std::string Rendezvous::rkey(const std::string& k) const {
  return fmt::format("dlaunch/rdzv/r{}/{}", round_, k);
}

void Rendezvous::begin_op(std::function<void(std::exception_ptr)> end) {
  if (op_live_ && *op_live_) throw std::logic_error("Rendezvous: a join or barrier is under way");
  op_end_ = std::move(end);
  op_live_ = std::make_shared<bool>(true);
  op_timer_ = home_clock_->make_timer();
}

void Rendezvous::end_op(std::exception_ptr e) {
  if (!op_live_ || !*op_live_) return;
  *op_live_ = false;
  op_timer_.reset();
  if (server_ != nullptr && !watching_) server_->on_change(nullptr);
  auto end = std::move(op_end_);
  op_end_ = nullptr;
  end(std::move(e));
}

template <class F>
auto Rendezvous::step(F f) {
  return [this, live = op_live_, f = std::move(f)](auto&&... a) mutable {
    if (!*live) return;  // the operation it was for has ended
    try {
      f(std::forward<decltype(a)>(a)...);
    } catch (...) {
      end_op(std::current_exception());
    }
  };
}

void Rendezvous::run_until(const bool& done) {
  // The store's answers come from its thread: the loop waits for them.
  const auto work = boost::asio::make_work_guard(*home_);
  while (!done) {
    home_->restart();
    home_->run_one();
  }
}

void Rendezvous::on_host_change(Next look) {
  op_look_posted_ = std::make_shared<std::atomic<bool>>(false);
  Next run = step([posted = op_look_posted_, look = std::move(look)] {
    posted->store(false);
    look();
  });
  // On the store's thread: one look posted for a burst of changes.
  server_->on_change([io = home_, posted = op_look_posted_, run = std::move(run)] {
    if (posted->exchange(true)) return;
    boost::asio::post(*io, run);
  });
}

void Rendezvous::start_join(int round, Joined done) {
  stop_watch();
  peer_.reset();
  to_publish_.reset();
  published_ = false;
  settled_ = false;
  round_ = round;
  begin_op([this, done = std::move(done)](std::exception_ptr e) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const comm::StoreError& x) {
        // A store that stops answering mid-way is this launcher's
        // environment, said with where it was meeting; not an internal error.
        e = std::make_exception_ptr(Error(
            ErrorKind::kEnvironment, fmt::format("the rendezvous at {}: {}", endpoint_, x.what())));
      } catch (...) {  // said as it is
      }
    }
    done(e, m_);
  });
  boost::asio::post(*home_, Next(step([this] {
    if (store_lost_) {
      old_endpoint_ = endpoint_;
      old_host_ = m_.names.empty() ? "?" : m_.names.front();
      server_.reset();
      store_.reset();
      tried_.clear();
      // node rank (-1: the old endpoint), address
      candidates_.assign(1, {-1, s_.host});
      for (int k = 1; k < m_.nnodes; ++k)
        candidates_.emplace_back(k, m_.addrs[static_cast<std::size_t>(k)]);
      take_over(0, [this] { join_round(); });
    } else if (!store_) {
      connect([this] { join_round(); });
    } else {
      join_round();
    }
  })));
}

Membership Rendezvous::join(int round) {
  bool done = false;
  std::exception_ptr error;
  start_join(round, [&](std::exception_ptr e, const Membership&) {
    error = std::move(e);
    done = true;
  });
  run_until(done);
  if (error) std::rethrow_exception(error);
  return m_;
}

bool Rendezvous::can_take_over() const {
  // c10d only (a static job's node ranks are given, node 0 among them), in an
  // elastic job, by a launcher that did not host, when enough remain.
  return !s_.is_static && s_.max_restarts > 0 && !m_.hosting && m_.nnodes - 1 >= s_.min_nodes &&
         m_.addrs.size() == static_cast<std::size_t>(m_.nnodes);
}

// The launcher hosting the store is lost: its store went with it. The
// survivors try, in this order, the old endpoint (a host that is not dead
// after all, e.g. a connection the network reset) and then the members of
// the last round by node rank from 1: a launcher whose turn it is hosts the
// store on its own address and the endpoint's port, the others connect. So
// the lowest surviving node rank hosts; one that cannot be reached within a
// few seconds is passed over (the old endpoint, within half a second). The
// next round starts from an empty store (a round's keys stand alone; the
// round number is every survivor's). Candidate `i` on (candidates_).
void Rendezvous::take_over(std::size_t i, const Next& next) {
  for (; i < candidates_.size(); ++i) {
    const int k = candidates_[i].first;
    const std::string addr = candidates_[i].second;
    if (addr.empty()) continue;
    m_.hosting = false;
    if (k == m_.node_rank) {
      comm::StoreServerOptions so;
      so.secret = s_.secret;
      so.port = s_.port;
      so.bind_address = addr;
      // Who hosts it, held from the start: a survivor that finds it at the
      // old endpoint (the successor's address may be the old host's, e.g.
      // launchers sharing a machine) knows it is not the old host back.
      so.initial_keys = {{rkey("successor"), std::to_string(k)}};
      try {
        server_ = net_.host(so);
        m_.hosting = true;
      } catch (const std::system_error& e) {
        tried_ += fmt::format("; hosting at {}:{}: {}", addr, s_.port, e.what());
        continue;
      }
    }
    comm::StoreOptions co;
    co.host = addr;
    co.port = s_.port;
    co.secret = s_.secret;
    // The old endpoint briefly: a host alive after all answers at once.
    co.connect_timeout = k < 0 ? milliseconds(500) : milliseconds(3000);
    co.timeout = s_.read_timeout;
    store_ = net_.connect_async(*home_, co);
    // The first call connects. One that cannot (something there that cannot
    // prove the secret: a process that took the freed port) is passed over,
    // never joined.
    const auto reached = [this, i, addr, next](const rdzv::StoreFailure& f) {
      if (f) {
        tried_ += fmt::format(
            "; {}:{}: {}{}", addr, s_.port,
            not_this_jobs_store(*f) ? "held by something that is not this job's rendezvous: " : "",
            f->what());
        server_.reset();
        retired_ = std::move(store_);  // (not destroyed inside its own answer)
        take_over(i + 1, next);
        return false;
      }
      s_.host = addr;
      endpoint_ = endpoint_text(addr, s_.port);
      client_host_ = addr;
      m_.store_host = addr;
      m_.store_port = s_.port;
      store_lost_ = false;
      return true;
    };
    const auto announce = [this](int host) {
      if (host < 0) {
        write_all(2, fmt::format("dlaunch: the rendezvous at {} answers again\n", endpoint_));
      } else {
        write_all(
            2, fmt::format("dlaunch: node 0 ({}), which hosted the rendezvous, is lost; "
                           "node {} ({}) hosts it now at {}\n",
                           old_host_, host, m_.names[static_cast<std::size_t>(host)], endpoint_));
      }
    };
    // The job's settings, which the first launcher's are.
    const auto settings = [this, next] {
      store_->compare_set(key("conf"), "", settings_text(),
                          step([this, next](const rdzv::StoreFailure& f, const std::string& conf) {
                            ok(f);
                            check_settings(conf);
                            next();
                          }));
    };
    // A candidate that hosts says so itself. At the old endpoint, the
    // successor's store says so for this round; the old host's (back after
    // all) does not, even if it was a successor itself before.
    store_->check(
        {rkey("successor")},
        step([this, k, reached, announce, settings](const rdzv::StoreFailure& f, bool has) {
          if (!reached(f)) return;
          if (k >= 0 || !has) {
            announce(k);
            return settings();
          }
          store_->get(
              rkey("successor"), s_.read_timeout,
              step([this, announce, settings](const rdzv::StoreFailure& g, const std::string& v) {
                ok(g);
                announce(static_cast<int>(parse_number(v, 1, m_.nnodes - 1).value_or(-1)));
                settings();
              }));
        }));
    return;
  }
  throw Error(ErrorKind::kEnvironment,
              fmt::format("the launcher hosting the rendezvous at {} ({}) is lost, and no "
                          "surviving launcher could host it{}",
                          old_endpoint_, old_host_, tried_));
}

void Rendezvous::connect(const Next& next) {
  // Host: static node 0, or (c10d) whoever can bind the endpoint. A port
  // already taken (another launcher hosts) or an address not of this machine
  // makes this launcher a client. The store listens on the endpoint's
  // address only (a static --master-addr 127.0.0.1 is not reachable from
  // another machine), except where a static MASTER_ADDR is not an address of
  // node 0 itself (a Service in front of it): every address then.
  const bool try_host = s_.is_static ? s_.node_rank == 0 : true;
  std::string client_host = s_.host;
  if (try_host) {
    comm::StoreServerOptions so;
    so.secret = s_.secret;
    so.port = s_.port;
    so.bind_address = numeric_address(s_.host);
    if (so.bind_address.empty()) {
      throw Error(ErrorKind::kEnvironment,
                  fmt::format("{} {}: cannot resolve '{}'",
                              s_.is_static ? "--master-addr" : "--rdzv-endpoint", endpoint_,
                              printable(s_.host)));
    }
    // A port of 0 (--standalone) is any free one; loopback then.
    if (s_.port == 0) so.bind_address = "127.0.0.1";
    const auto host = [&] {
      server_ = net_.host(so);
      m_.hosting = true;
      client_host = so.bind_address;
      // Static: the job's store gets a port of its own on the same address;
      // the meeting port is the workers' MASTER_PORT once all have met.
      if (s_.is_static && meeting_port_ != 0)
        job_port_ = server_->listen_also(so.bind_address, s_.store_port);
      if (s_.port == 0) {
        s_.port = server_->port();
        endpoint_ = s_.host + ":" + std::to_string(s_.port);
      }
    };
    try {
      try {
        host();
      } catch (const std::system_error& e) {
        if (!s_.is_static || e.code() != std::errc::address_not_available) throw;
        so.bind_address = so.bind_address.find(':') != std::string::npos ? "::" : "0.0.0.0";
        host();
        client_host = so.bind_address.find(':') != std::string::npos ? "::1" : "127.0.0.1";
        write_all(2, fmt::format("dlaunch: --master-addr {} is not an address of this machine: "
                                 "the rendezvous listens on every address at port {}\n",
                                 printable(s_.host), s_.port));
      }
    } catch (const std::system_error& e) {
      const auto c = e.code();
      if (c != std::errc::address_in_use && c != std::errc::address_not_available) {
        throw Error(ErrorKind::kEnvironment,
                    fmt::format("cannot host the rendezvous at {}: {}", endpoint_, e.what()));
      }
    }
  }
  if (!s_.authenticated && !m_.hosting) {
    write_all(2, fmt::format("dlaunch: the rendezvous at {} is open: no secret was given, so any "
                             "host that reaches it can join this job or stop it (as with "
                             "torchrun's); set DLAUNCH_RDZV_SECRET to the same random value on "
                             "every node to authenticate it\n",
                             endpoint_));
  } else if (!s_.authenticated) {
    write_all(2, fmt::format("dlaunch: hosting an open rendezvous at {}: no secret was given, so "
                             "any host that reaches it can join this job or stop it (as with "
                             "torchrun's); set DLAUNCH_RDZV_SECRET to the same random value on "
                             "every node to authenticate it\n",
                             endpoint_));
  }
  m_.store_host = m_.hosting && !s_.is_static ? numeric_address(s_.host) : s_.host;
  m_.store_port = s_.port;
  // Where this launcher can be reached, should it host the store one day.
  own_addr_ = s_.local_addr.empty() ? proto::source_address_toward(numeric_address(s_.host))
                                    : numeric_address(s_.local_addr);
  comm::StoreOptions co;
  client_host_ = client_host;
  co.host = client_host_;
  co.port = s_.port;
  co.secret = s_.secret;
  co.connect_timeout = s_.join_timeout;
  co.timeout = s_.read_timeout;
  store_ = net_.connect_async(*home_, co);
  // The first call connects (its failure is the connect's): the job's
  // settings, which the first launcher's are.
  store_->compare_set(key("conf"), "", settings_text(),
                      step([this, next](const rdzv::StoreFailure& f, const std::string& conf) {
                        if (f) connect_failed(*f);
                        check_settings(conf);
                        if (s_.is_static && meeting_port_ != 0) return move_to_job_port(next);
                        next();
                      }));
}

void Rendezvous::connect_failed(const comm::StoreError& e) const {
  if (not_this_jobs_store(e)) {
    // Whatever holds the endpoint could not prove this job's secret (or
    // is no store of this release): never joined, whoever it is.
    throw InputError(
        {s_.is_static ? "--master-port" : "--rdzv-endpoint"}, "",
        fmt::format("the rendezvous endpoint {} is held by something that is not this job's "
                    "rendezvous, and this launcher does not join it: {}",
                    endpoint_, e.what()),
        "if it is a launcher of this job, give every launcher the same secret "
        "(DLAUNCH_RDZV_SECRET or --rdzv-conf secret=...) and the same dlaunch release; "
        "otherwise free that port or choose another");
  }
  if (e.kind() == comm::ErrorKind::kUsage) {
    throw InputError(
        {"--rdzv-conf"}, "secret",
        fmt::format("the rendezvous at {} refused this launcher: {}", endpoint_, e.what()),
        "give every launcher the same secret (DLAUNCH_RDZV_SECRET or --rdzv-conf "
        "secret=...)");
  }
  throw Error(ErrorKind::kEnvironment,
              fmt::format("cannot reach the rendezvous at {} within {} (join_timeout): {}",
                          endpoint_, secs(s_.join_timeout), e.what()));
}

// Static: the host says where the job's store is; every launcher (the host
// too) reconnects there before it claims its node rank, so that once every
// rank is claimed nobody uses the meeting port and the host closes it.
void Rendezvous::move_to_job_port(const Next& next) {
  if (m_.hosting) store_->set(key("store_port"), std::to_string(job_port_), step(ok));
  store_->get(
      key("store_port"), s_.join_timeout,
      step([this, next](const rdzv::StoreFailure& f, const std::string& v) {
        ok(f);
        const auto port = parse_number(v, 1, 65535);
        if (!port) malformed("store_port", v);
        comm::StoreOptions co;
        co.host = client_host_;
        co.port = static_cast<std::uint16_t>(*port);
        co.secret = s_.secret;
        co.connect_timeout = s_.join_timeout;
        co.timeout = s_.read_timeout;
        // (The meeting port's connection is not destroyed inside its own answer.)
        retired_ = std::move(store_);
        store_ = net_.connect_async(*home_, co);
        // The first call there connects: the same store, which says the same.
        store_->get(
            key("store_port"), s_.join_timeout,
            step([this, next, port = co.port](const rdzv::StoreFailure& g, const std::string&) {
              if (g) {
                throw Error(ErrorKind::kEnvironment,
                            fmt::format("the rendezvous at {} moved the job's store to "
                                        "port {}, which this launcher cannot reach: {}",
                                        endpoint_, port, g->what()));
              }
              s_.port = port;
              m_.store_port = port;
              next();
            }));
      }));
}

std::string Rendezvous::settings_text() const {
  return fmt::format("{}\n{}\n{}\n{}\n{}\n{}\n{}", s_.run_id, s_.is_static ? "static" : "c10d",
                     s_.min_nodes == s_.max_nodes
                         ? std::to_string(s_.max_nodes)
                         : fmt::format("{}:{}", s_.min_nodes, s_.max_nodes),
                     s_.nproc, s_.max_restarts, s_.mpi ? "on" : "off", s_.me);
}

// The job's settings: the first launcher's are the job's (`conf`, what the
// store holds); any other must say the same.
void Rendezvous::check_settings(const std::string& conf) const {
  const std::string mine = settings_text();
  if (conf == mine) return;
  const auto a = split(mine, '\n');
  const auto b = split(conf, '\n');
  if (b.size() != 7) return;
  const char* names[] = {"--rdzv-id",        "--rdzv-backend", "--nnodes",
                         "--nproc-per-node", "--max-restarts", "--mpi"};
  for (std::size_t i = 0; i < 6; ++i) {
    if (a[i] == b[i]) continue;
    throw InputError(
        {names[i]}, "",
        fmt::format("the launchers at {} disagree: {} {} here ({}), {} {} on "
                    "the launcher that came first ({})",
                    endpoint_, names[i], a[i], s_.me, names[i], printable(b[i]), printable(b[6])),
        "give every launcher of the job the same value");
  }
}

void Rendezvous::join_round() {
  m_.nproc = s_.nproc;
  // The first rendezvous waits for the launchers to start (join_timeout); a
  // re-rendezvous after a failure, for the survivors (close_timeout).
  wait_ = round_ == 0 ? s_.join_timeout : s_.close_timeout;
  deadline_ = home_clock_->now() + wait_;
  // Alive before this launcher counts as a member, so that once the round
  // is complete every member's key has been set, and a key absent from then
  // on means its connection closed (look).
  store_->set_while_connected(rkey("alive/" + s_.me), s_.me, step(ok));
  if (s_.is_static) {
    join_static();
  } else {
    join_c10d();
  }
}

milliseconds Rendezvous::time_left() const {
  return std::max(std::chrono::duration_cast<milliseconds>(deadline_ - home_clock_->now()),
                  milliseconds(1));
}

std::vector<std::string> Rendezvous::static_keys() const {
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(m_.nnodes));
  for (int j = 0; j < m_.nnodes; ++j) keys.push_back(rkey(fmt::format("static/{}", j)));
  return keys;
}

void Rendezvous::join_static() {
  store_->compare_set(rkey(fmt::format("static/{}", s_.node_rank)), "", s_.me,
                      step([this](const rdzv::StoreFailure& f, const std::string& owner) {
                        ok(f);
                        if (owner != s_.me) {
                          throw InputError(
                              {"--node-rank"}, "",
                              fmt::format("node rank {} is claimed by two launchers: {} and this "
                                          "one ({})",
                                          s_.node_rank, owner, s_.me),
                              "give every launcher its own --node-rank from 0 to --nnodes - 1");
                        }
                        m_.nnodes = s_.max_nodes;
                        m_.node_rank = s_.node_rank;
                        static_wait();
                      }));
}

// One parked request, answered when the last rank is claimed: no polling,
// whatever the number of launchers.
void Rendezvous::static_wait() {
  store_->wait(static_keys(), time_left(), step([this](const rdzv::StoreFailure& f) {
                 if (f && f->cause() == comm::StoreError::Cause::kTimedOut) return say_missing();
                 ok(f);
                 store_->multi_get(static_keys(), step([this](const rdzv::StoreFailure& g,
                                                              std::vector<std::string> names) {
                                     ok(g);
                                     m_.names = std::move(names);
                                     check_names();
                                     // Everyone has moved to the job's store: the meeting
                                     // port is MASTER_PORT's.
                                     if (m_.hosting && round_ == 0 && meeting_port_ != 0)
                                       server_->stop_listening_on_first_port();
                                     read_master();
                                   }));
               }));
}

// The static round did not complete in time: which node ranks are missing.
void Rendezvous::say_missing() {
  auto missing = std::make_shared<std::vector<int>>();
  const auto keys = static_keys();
  for (std::size_t j = 0; j < keys.size(); ++j) {
    store_->check(
        {keys[j]},
        step([this, missing, j, n = keys.size()](const rdzv::StoreFailure& f, bool claimed) {
          ok(f);
          if (!claimed) missing->push_back(static_cast<int>(j));
          if (j + 1 < n) return;  // (answered in order: this is the last)
          throw Error(ErrorKind::kEnvironment,
                      fmt::format("node rank(s) {} did not join the rendezvous at {} "
                                  "within {} (join_timeout)",
                                  fmt::join(*missing, ", "), endpoint_, secs(s_.join_timeout)));
        }));
  }
}

void Rendezvous::join_c10d() {
  store_->add(rkey("joined"), 1, step([this](const rdzv::StoreFailure& f, std::int64_t n) {
                ok(f);
                join_idx_ = n - 1;
                store_->set(rkey(fmt::format("addr/{}", join_idx_)), own_addr_, step(ok));
                store_->set(rkey(fmt::format("join/{}", join_idx_)), s_.me,
                            step([this](const rdzv::StoreFailure& g) {
                              ok(g);
                              if (!m_.hosting) {
                                close_until_ = deadline_;
                                return await_close();
                              }
                              store_->set(rkey("host"), std::to_string(join_idx_),
                                          step([this](const rdzv::StoreFailure& h) {
                                            ok(h);
                                            close_round();
                                          }));
                            }));
              }));
}

Error Rendezvous::not_closed(long long joined) const {
  return {ErrorKind::kEnvironment,
          fmt::format("the rendezvous at {} did not close within {} ({}): {} of at least {} "
                      "node(s) joined",
                      endpoint_, secs(wait_), round_ == 0 ? "join_timeout" : "close_timeout",
                      joined, s_.min_nodes)};
}

// c10d, the launcher hosting the store: it closes the round, watching the
// join count in its own store (no requests) on its changes and at its
// deadlines: when MAX have joined, or MIN and last_call since. The host is
// node 0, the others in the order they joined.
void Rendezvous::close_round() {
  min_seen_.reset();
  closing_ = false;
  on_host_change([this] { close_look(); });
  close_look();
}

void Rendezvous::close_look() {
  if (closing_) return;
  const auto now = home_clock_->now();
  const auto v = server_->peek({rkey("joined"), rkey("host"), rkey("closed")});
  if (v[2]) return read_closed();  // (a launcher of an earlier release could have)
  const std::string joined_text = v[0].value_or("0");
  const auto joined_n = parse_number(joined_text, 0, limits::kMaxNodesPerJob);
  if (!joined_n) malformed("joined", joined_text);
  const long long joined = *joined_n;
  const bool enough = v[1].has_value() && joined >= s_.min_nodes;
  if (!enough) {
    min_seen_.reset();
  } else if (!min_seen_) {
    min_seen_ = now;
  }
  if (enough && (joined >= s_.max_nodes || now - *min_seen_ >= s_.last_call)) {
    const auto parsed = parse_number(*v[1], 0, joined - 1);
    if (!parsed) malformed("host", *v[1]);
    const long long host = *parsed;
    const long long n = std::min<long long>(joined, s_.max_nodes);
    std::vector<std::string> members{std::to_string(host)};
    for (long long i = 0; i < joined && static_cast<long long>(members.size()) < n; ++i) {
      if (i != host) members.push_back(std::to_string(i));
    }
    closing_ = true;
    op_timer_->cancel();
    store_->compare_set(rkey("closed"), "", fmt::format("{}", fmt::join(members, ",")),
                        step([this](const rdzv::StoreFailure& f, const std::string&) {
                          ok(f);
                          read_closed();
                        }));
    return;
  }
  // The deadline is for MIN nodes to come; once they are here, the last
  // call runs its course (it may be longer than close_timeout).
  if (!min_seen_ && now >= deadline_) throw not_closed(joined);
  // Until a member joins, or the last call or the deadline ends.
  op_timer_->expires_at(min_seen_ ? *min_seen_ + s_.last_call : deadline_,
                        step([this] { close_look(); }));
}

// c10d, every other launcher: one parked request for the round's close. If
// it is not answered by the deadline, the round may still be in its last
// call (MIN are here): it waits that out; else MIN did not come.
void Rendezvous::await_close() {
  const auto left = std::max(
      std::chrono::duration_cast<milliseconds>(close_until_ - home_clock_->now()), milliseconds(1));
  store_->get(
      rkey("closed"), left, step([this](const rdzv::StoreFailure& f, const std::string&) {
        if (!f) return read_closed();
        if (f->cause() != comm::StoreError::Cause::kTimedOut) throw *f;
        store_->add(
            rkey("joined"), 0, step([this](const rdzv::StoreFailure& g, std::int64_t joined) {
              ok(g);
              store_->check({rkey("host")},
                            step([this, joined](const rdzv::StoreFailure& h, bool hosted) {
                              ok(h);
                              if (!hosted || joined < s_.min_nodes || close_until_ > deadline_)
                                throw not_closed(joined);
                              close_until_ = home_clock_->now() + s_.last_call + milliseconds(5000);
                              await_close();
                            }));
            }));
      }));
}

// c10d: who the round's members are, and this launcher's place among them.
void Rendezvous::read_closed() {
  if (server_ != nullptr && !watching_) server_->on_change(nullptr);
  store_->get(
      rkey("closed"), s_.read_timeout,
      step([this](const rdzv::StoreFailure& f, const std::string& closed) {
        ok(f);
        const auto members = split(closed, ',');
        // Node ranks are join numbers, each once, at most MAX of them.
        if (members.empty() || members.size() > static_cast<std::size_t>(s_.max_nodes))
          malformed("closed", closed);
        for (std::size_t i = 0; i < members.size(); ++i) {
          if (!parse_number(members[i], 0, limits::kMaxNodesPerJob) ||
              std::find(members.begin(), members.begin() + static_cast<std::ptrdiff_t>(i),
                        members[i]) != members.begin() + static_cast<std::ptrdiff_t>(i)) {
            malformed("closed", closed);
          }
        }
        const auto it = std::find(members.begin(), members.end(), std::to_string(join_idx_));
        if (it == members.end() && s_.min_nodes < s_.max_nodes && s_.max_restarts > 0) {
          // A running elastic job: wait for its next round, and ask for one
          // (the nodes there restart to take this one in, as torchrun's do
          // when they see nodes waiting).
          store_->compare_set(rkey("waiting"), "", s_.me,
                              step([this](const rdzv::StoreFailure& g, const std::string&) {
                                ok(g);
                                ++round_;
                                join_round();
                              }));
          return;
        }
        if (it == members.end()) {
          throw Error(ErrorKind::kEnvironment,
                      fmt::format("the rendezvous at {} closed with {} node(s) without this "
                                  "launcher ({}): it joined too late",
                                  endpoint_, members.size(), s_.me));
        }
        m_.nnodes = static_cast<int>(members.size());
        m_.node_rank = static_cast<int>(it - members.begin());
        std::vector<std::string> names;
        std::vector<std::string> addrs;
        names.reserve(members.size());
        addrs.reserve(members.size());
        for (const auto& i : members) {
          names.push_back(rkey("join/" + i));
          addrs.push_back(rkey("addr/" + i));
        }
        store_->multi_get(std::move(names),
                          step([this](const rdzv::StoreFailure& g, std::vector<std::string> v) {
                            ok(g);
                            m_.names = std::move(v);
                            check_names();
                          }));
        store_->multi_get(std::move(addrs),
                          step([this](const rdzv::StoreFailure& g, std::vector<std::string> v) {
                            ok(g);
                            m_.addrs = std::move(v);
                            for (const auto& a : m_.addrs) {
                              if (!a.empty() && !valid_address(a)) malformed("addr", a);
                            }
                            read_master();
                          }));
      }));
}

// MASTER_ADDR and MASTER_PORT: node 0 chooses the port (free on it) and says
// where it is.
void Rendezvous::read_master() {
  // A job of this node alone with no port asked for (--standalone): its
  // agent reserves a free one itself (0), as the head-node mode's does. A
  // port found free here and reserved later could be found free by another
  // job meanwhile (1024 concurrent jobs: two reserved one port).
  if (m_.nnodes == 1 && s_.pinned_master_port == 0 && meeting_port_ == 0) {
    m_.master_addr = s_.local_addr.empty() ? s_.host : s_.local_addr;
    m_.master_port = 0;
    m_.round = round_;
    end_op(nullptr);
    return;
  }
  if (m_.node_rank == 0) {
    std::string addr = s_.local_addr;
    if (addr.empty()) addr = s_.host;
    // torchrun's: the static rendezvous's MASTER_PORT is --master-port.
    const std::uint16_t port = s_.pinned_master_port != 0           ? s_.pinned_master_port
                               : s_.is_static && meeting_port_ != 0 ? meeting_port_
                                                                    : free_port();
    store_->set(rkey("master"), fmt::format("{}\n{}", addr, port), step(ok));
  }
  store_->get(rkey("master"), s_.join_timeout,
              step([this](const rdzv::StoreFailure& f, const std::string& value) {
                ok(f);
                const auto master = split(value, '\n');
                const auto port =
                    master.size() == 2 ? parse_number(master[1], 1, 65535) : std::nullopt;
                if (!port || !valid_address(master[0])) malformed("master", value);
                m_.master_addr = master[0];
                m_.master_port = static_cast<std::uint16_t>(*port);
                m_.round = round_;
                end_op(nullptr);
              }));
}

void Rendezvous::malformed(const std::string& k, const std::string& value) const {
  throw Error(ErrorKind::kEnvironment,
              fmt::format("the rendezvous at {} holds a malformed value at {}: {} (no launcher "
                          "of this release writes that; not used)",
                          endpoint_, rkey(k), printable(value.substr(0, 200))));
}

void Rendezvous::check_names() const {
  for (const auto& n : m_.names) {
    if (!valid_name(n)) malformed("join", n);
  }
}

comm::StoreOptions Rendezvous::client_options(milliseconds timeout) const {
  comm::StoreOptions co;
  co.host = client_host_;
  co.port = s_.port;
  co.secret = s_.secret;
  co.connect_timeout = timeout;
  co.timeout = timeout;
  return co;
}

std::unique_ptr<rdzv::AsyncStore> Rendezvous::connect_async(boost::asio::io_context& io,
                                                            milliseconds timeout) const {
  return net_.connect_async(io, client_options(timeout));
}

std::string Rendezvous::encode(const Failure& f) {
  return fmt::format("{}\n{}\n{}", f.status, f.final ? 1 : 0, f.text);
}

// Each launcher heartbeats (a counter) every heartbeat period and says this
// node's failure the moment there is one. Every launcher but the host parks
// one get on this round's failure entry, answered the moment one is
// published (or failing the moment the host's store goes). The host watches
// every other member in its own store with memory reads, not requests
// (look). Each on a connection of its own. A launcher is alive while either
// of its connection-scoped keys is there: alive/ (the join's connection,
// store_, which lasts as long as the launcher) or walive/ (the watch's,
// set again each heartbeat): so neither the watch's end before this
// launcher says it is done, nor a watch connection cut and made again, is
// taken for a loss.
void Rendezvous::start_watch(boost::asio::io_context& io, Clock& clock) {
  stop_watch();
  io_ = &io;
  clock_ = &clock;
  watching_ = std::make_shared<bool>(true);
  beat_unanswered_ = false;
  store_heard_ = clock.now();
  watch_store_ = connect_async(io, s_.read_timeout);
  beat_timer_ = clock.make_timer();
  beat();
  if (to_publish_) send_failure();
  if (m_.hosting && server_ != nullptr) {
    start_host_watch();
  } else if (!m_.hosting) {
    failure_store_ = connect_async(io, s_.read_timeout);
    await_failure();
  }
}

void Rendezvous::stop_watch() {
  if (!watching_) return;
  *watching_ = false;
  if (server_ != nullptr) server_->on_change(nullptr);
  look_timer_.reset();
  beat_timer_.reset();
  failure_store_.reset();
  watch_store_.reset();
  watching_.reset();
  io_ = nullptr;
  clock_ = nullptr;
}

void Rendezvous::beat() {
  // The store is gone: a beat now would only retry the connect, for the
  // whole connect timeout, on the watch's thread.
  if (store_lost_) return;
  beat_timer_->expires_at(clock_->now() + heartbeat_period(), [this] { beat(); });
  // A store slow to answer gets no second beat queued behind the first.
  if (beat_unanswered_) return;
  beat_unanswered_ = true;
  // A store too slow to answer (host_slow) is asked again at the next beat.
  watch_store_->add(rkey(fmt::format("hb/{}", m_.node_rank)), 1,
                    [this](const rdzv::StoreFailure& f, std::int64_t) {
                      if (!f) store_heard_ = clock_->now();
                      if (f && !host_slow(*f)) store_gone(*f);
                    });
  // The watch's own alive key, set again every heartbeat: a watch whose
  // connection the network cut and that reconnected holds it again.
  watch_store_->set_while_connected(rkey("walive/" + s_.me), s_.me,
                                    [this](const rdzv::StoreFailure& f) {
                                      beat_unanswered_ = false;
                                      if (!f) store_heard_ = clock_->now();
                                      if (f && !host_slow(*f)) store_gone(*f);
                                    });
}

void Rendezvous::publish_failure(const std::string& report, int status, bool final) {
  if (published_ || to_publish_) return;
  to_publish_ = Failure{report, status, final};
  // Said now, not at the next look: the first failure published is the
  // job's, and a consequence elsewhere (a peer's rank that died of the broken
  // connection) must not get there first.
  if (watch_store_) send_failure();
}

void Rendezvous::send_failure() {
  const std::string v = encode(*to_publish_);
  watch_store_->compare_set(rkey("failed"), "", v,
                            [this, v](const rdzv::StoreFailure& f, const std::string& first) {
                              if (f) return store_gone(*f);
                              to_publish_.reset();
                              published_ = first == v;
                              set_peer(parse_failure(first));
                              settled_ = true;
                            });
}

void Rendezvous::await_failure() {
  // A day at a time (a job may run for weeks): nothing is sent meanwhile.
  failure_store_->get(rkey("failed"), std::chrono::hours(24),
                      [this](const rdzv::StoreFailure& f, const std::string& v) {
                        if (f && f->cause() == comm::StoreError::Cause::kTimedOut) {
                          return await_failure();
                        }
                        if (f) return store_gone(*f);
                        // This node's own, answered before its publishing
                        // was: not another's.
                        if (to_publish_ && encode(*to_publish_) == v) return;
                        set_peer(parse_failure(v));
                      });
}

bool Rendezvous::store_lost() const { return store_lost_ && !can_take_over(); }

std::optional<PeerFailure> Rendezvous::agreed_failure(std::chrono::milliseconds wait) {
  if (io_ != nullptr && !settled_ && !store_lost_) {
    const auto until = clock_->now() + wait;
    while (!settled_ && !store_lost_) {
      const auto now = clock_->now();
      if (now >= until) break;
      io_->restart();
      if (io_->run_one_for(until - now) == 0) break;
    }
  }
  if (!settled_ || published_) return std::nullopt;
  return peer_;
}

// The store is gone: its launcher died or its machine is out of reach. Said
// at once, by whichever of the watch's calls saw it first.
void Rendezvous::store_gone(const comm::StoreError& e) {
  if (!watching_ || store_lost_) return;  // said already
  store_lost_ = true;
  const bool successor = can_take_over();
  set_peer(
      {fmt::format("lost the rendezvous store at {} hosted by node 0 ({}): {}{}", endpoint_,
                   m_.names.empty() ? "?" : m_.names.front(), e.what(),
                   successor ? " (with a restart left, a surviving launcher hosts it anew)" : ""),
       1, !successor});
}

void Rendezvous::set_peer(PeerFailure f) {
  if (peer_ || published_) return;
  peer_ = std::move(f);
  if (on_peer_) on_peer_();
}

void Rendezvous::on_peer_failure(std::function<void()> fn) {
  on_peer_ = std::move(fn);
  if (on_peer_ && peer_) on_peer_();
}

// The host wakes on what its members say (a failure, a joiner, done, a
// connection closed) and on its own deadlines, not on each heartbeat
// counted: those it reads when one would be late.
void Rendezvous::start_host_watch() {
  const auto n = static_cast<std::size_t>(m_.nnodes);
  members_.assign(n, Member{.seen = clock_->now()});
  ended_said_ = false;
  // What the host looks at, made once: the failure entry, a joiner, and
  // each member's done key, alive keys and counter.
  look_keys_ = {rkey("failed"), rkey("waiting")};
  for (std::size_t j = 0; j < n; ++j) {
    look_keys_.push_back(rkey(fmt::format("done/{}", j)));
    look_keys_.push_back(rkey("alive/" + m_.names[j]));
    look_keys_.push_back(rkey("walive/" + m_.names[j]));
    look_keys_.push_back(rkey(fmt::format("hb/{}", j)));
  }
  look_timer_ = clock_->make_timer();
  look_posted_ = std::make_shared<std::atomic<bool>>(false);
  server_->quiet_prefixes({rkey("hb/")});
  // On the store's thread: one look posted for a burst of changes.
  server_->on_change([this, io = io_, watching = watching_, posted = look_posted_] {
    if (posted->exchange(true)) return;
    boost::asio::post(*io, [this, watching] {
      if (*watching) look();
    });
  });
  look();
}

// The host: a member whose alive keys went with their connections, or whose
// counter stopped for --heartbeat-timeout, is lost; a published failure or
// a launcher waiting to join ends the round for everyone (the others learn
// it from their parked get on `failed`).
//
// Each launcher holds alive/<its name> and walive/<its name> while its
// connections last (Store::set_while_connected): a launcher that exits or is
// killed loses both at once, long before its heartbeat is missed. Every
// member set alive/ before it counted as one (join_round): both absent for
// kGone, from the first look on, without a word that the member is done,
// means it is lost, even if its connections closed before this watch began.
void Rendezvous::look() {
  look_posted_->store(false);
  const auto now = clock_->now();
  auto next_look = SteadyTime::max();
  // The counters are read a tenth of the timeout apart (0.1-3 s): a silent
  // member is lost within 1.1 timeouts, one look for all of them.
  if (s_.heartbeat_timeout.count() > 0) {
    next_look = now + std::clamp(s_.heartbeat_timeout / 10, milliseconds(100), milliseconds(3000));
  }
  const auto v = server_->peek(look_keys_);
  if (v[0]) {
    // (This node's own, seen before its publishing was answered, is not another's.)
    if (!to_publish_ || encode(*to_publish_) != *v[0]) set_peer(parse_failure(*v[0]));
    // The others waiting at the exit barrier learn it too.
    if (!ended_said_) server_->set(rkey("ended"), "failed");
    ended_said_ = true;
  } else if (v[1] && m_.nnodes < s_.max_nodes && s_.max_restarts > 0) {
    // A launcher waits to join: the round ends for everyone, to take it in
    // (not a failure: the restart is not counted).
    const std::string entry = fmt::format(
        "join\n0\nto take in the launcher waiting to join ({}): the job "
        "restarts with it (not a failure)",
        *v[1]);
    watch_store_->compare_set(rkey("failed"), "", entry,
                              [this](const rdzv::StoreFailure& f, const std::string& first) {
                                if (f) return store_gone(*f);
                                set_peer(parse_failure(first));
                              });
  }
  const int me = m_.node_rank;
  for (std::size_t j = 0; j < members_.size() && s_.heartbeat_timeout.count() > 0; ++j) {
    Member& mj = members_[j];
    if (static_cast<int>(j) == me || mj.done) continue;
    const std::size_t at = 2 + 4 * j;  // done, alive, walive, hb
    if (v[at]) {
      mj.done = true;
      continue;
    }
    if (v[at + 1] || v[at + 2]) {
      mj.gone_since.reset();
    } else if (!mj.gone_since) {
      mj.gone_since = now;
    } else if (now - *mj.gone_since > kGone) {
      lost_member(j,
                  "its launcher's connection to the rendezvous closed (it exited or was killed)");
      continue;
    }
    if (mj.gone_since) next_look = std::min(next_look, *mj.gone_since + kGone + milliseconds(1));
    const auto hb = parse_number(v[at + 3].value_or("0"), 0, INT64_MAX);
    if (hb && *hb != mj.last) {
      mj.last = *hb;
      mj.seen = now;
    }
    if (now - mj.seen > s_.heartbeat_timeout) {
      lost_member(j, fmt::format("its launcher sent no heartbeat to the rendezvous for {} "
                                 "(--heartbeat-timeout)",
                                 secs(s_.heartbeat_timeout)));
    }
  }
  if (next_look != SteadyTime::max()) look_timer_->expires_at(next_look, [this] { look(); });
}

// The failure entry for a lost member: "status\nfinal\ntext".
void Rendezvous::lost_member(std::size_t j, const std::string& why) {
  members_[j].done = true;
  watch_store_->compare_set(rkey("failed"), "",
                            fmt::format("1\n0\nnode {} ({}) is lost: {}", j, m_.names[j], why),
                            [this](const rdzv::StoreFailure& f, const std::string& first) {
                              if (f) return store_gone(*f);
                              set_peer(parse_failure(first));
                            });
}

std::chrono::milliseconds Rendezvous::heartbeat_period() const {
  // Three a timeout, as the control channel's: a member is lost after
  // missing two or three. At least every 10 s.
  if (s_.heartbeat_timeout.count() <= 0) return milliseconds(10'000);
  return std::clamp(s_.heartbeat_timeout / 3, milliseconds(100), milliseconds(10'000));
}

void Rendezvous::start_finish(bool last, std::function<void()> done) {
  stop_watch();
  begin_op([done = std::move(done)](const std::exception_ptr& e) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const comm::StoreError&) {  // nothing more to tell anyone
      }
    }
    done();
  });
  boost::asio::post(*home_, Next(step([this, last] {
    say_finished(false, [this, last] {
      if (!last) return end_op(nullptr);
      // The host keeps the store up until every other
      // launcher has left it.
      if (m_.hosting) return wait_for_others(false);
      store_->set(rkey(fmt::format("left/{}", m_.node_rank)), "1",
                  step([this](const rdzv::StoreFailure&) { end_op(nullptr); }));
    });
  })));
}

void Rendezvous::finish(bool last) {
  bool done = false;
  start_finish(last, [&] { done = true; });
  run_until(done);
}

void Rendezvous::start_finish_succeeded(Barrier done) {
  stop_watch();
  barrier_result_.reset();
  barrier_waiting_ = false;
  begin_op([this, done = std::move(done)](const std::exception_ptr& e) {
    std::optional<PeerFailure> out = std::move(barrier_result_);
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const comm::StoreError& x) {
        // The host is gone while this node waited: it failed (its report
        // went to its own console) or its machine is out of reach. This
        // node's part succeeded; the job's end cannot be known any more.
        if (barrier_waiting_) {
          store_lost_ = true;
          out = PeerFailure{
              fmt::format("lost the rendezvous store at {} hosted by node 0 ({}) "
                          "while waiting for the other nodes to finish: {}",
                          endpoint_, m_.names.empty() ? "?" : m_.names.front(), x.what()),
              1, true};
        }
      }
    }
    done(std::move(out));
  });
  boost::asio::post(*home_, Next(step([this] {
    say_finished(true, [this] {
      if (!store_ || store_lost_) return end_op(nullptr);
      wait_for_others(true);
    });
  })));
}

std::optional<PeerFailure> Rendezvous::finish_succeeded() {
  bool done = false;
  std::optional<PeerFailure> out;
  start_finish_succeeded([&](std::optional<PeerFailure> f) {
    out = std::move(f);
    done = true;
  });
  run_until(done);
  return out;
}

// This node's part of the round is over: its failure the watch had no time
// to publish, then `done`. A failure to say it ends the operation (nothing
// more to tell anyone), except at the exit barrier, which goes on to wait
// (and learns there that the store is gone).
void Rendezvous::say_finished(bool barrier, const Next& next) {
  if (!store_ || store_lost_) return end_op(nullptr);  // a reconnect would wait out join_timeout
  // A round another launcher ended with a failure: the host does not wait
  // for this one (it learns that it left when its connection closes), and
  // the store may be gone already (a host that ended while this launcher
  // was cut off, its failure entry delivered when the link came back): a
  // reconnect would wait out connect_timeout for nothing.
  if (!m_.hosting && peer_ && !published_) return barrier ? next() : end_op(nullptr);
  const auto on_failure = [this, barrier, next] { return barrier ? next() : end_op(nullptr); };
  const auto say_done = [this, next, on_failure] {
    store_->set(rkey(fmt::format("done/{}", m_.node_rank)), "1",
                step([next, on_failure](const rdzv::StoreFailure& f) {
                  if (f) return on_failure();
                  next();
                }));
  };
  if (!to_publish_) return say_done();
  const std::string v = encode(*to_publish_);
  to_publish_.reset();
  store_->compare_set(rkey("failed"), "", v,
                      step([say_done, on_failure](const rdzv::StoreFailure& f, const std::string&) {
                        if (f) return on_failure();
                        say_done();
                      }));
}

// With `failures` (this node's ranks succeeded): until every other node's
// ranks are done too, and a failure published meanwhile ends the wait and is
// the operation's (barrier_result_). Without (the host, about to exit): until
// every other launcher has left the store. Either way a node that is gone
// (its connection closed, or silent for the heartbeat timeout) is not
// waited for.
//
// The host decides, from its own store (memory reads, on its changes and at
// its deadlines), and says it in `ended` ("ok", or "failed": the failure
// entry says which); every other launcher parks one request on `ended` per
// heartbeat period, heartbeating between, so that the host can tell it is
// still there.
void Rendezvous::wait_for_others(bool failures) {
  barrier_failures_ = failures;
  barrier_waiting_ = true;
  store_heard_ = home_clock_->now();
  if (!m_.hosting || server_ == nullptr) {
    if (!failures) return end_op(nullptr);
    return barrier_beat();
  }
  const char* const until = failures ? "done" : "left";
  const auto n = static_cast<std::size_t>(m_.nnodes);
  barrier_hb_.assign(n, -1);
  barrier_seen_.assign(n, home_clock_->now());
  server_->quiet_prefixes({rkey("hb/")});  // read at their deadlines (others_look)
  barrier_keys_ = {rkey("failed")};
  for (std::size_t j = 0; j < n; ++j) {
    barrier_keys_.push_back(rkey(fmt::format("{}/{}", until, j)));
    barrier_keys_.push_back(rkey("alive/" + m_.names[j]));
    barrier_keys_.push_back(rkey(fmt::format("hb/{}", j)));
  }
  on_host_change([this] { others_look(); });
  others_look();
}

void Rendezvous::barrier_beat() {
  store_->add(rkey(fmt::format("hb/{}", m_.node_rank)), 1,
              step([this](const rdzv::StoreFailure& f, std::int64_t) {
                if (!f) store_heard_ = home_clock_->now();
                if (f && host_slow(*f)) return;  // the get below says what comes of it
                ok(f);
              }));
  store_->get(rkey("ended"), heartbeat_period(),
              step([this](const rdzv::StoreFailure& f, const std::string& v) {
                if (!f || f->cause() == comm::StoreError::Cause::kTimedOut) {
                  store_heard_ = home_clock_->now();
                }
                if (f && f->cause() == comm::StoreError::Cause::kTimedOut) return barrier_beat();
                // A host too slow to answer in time (a saturated machine) is
                // not lost before the heartbeat timeout: the next beat
                // reconnects and asks again.
                if (f && host_slow(*f)) return barrier_beat();
                ok(f);
                if (v != "failed") return end_op(nullptr);
                store_->get(rkey("failed"), s_.read_timeout,
                            step([this](const rdzv::StoreFailure& g, const std::string& failed) {
                              ok(g);
                              barrier_result_ = parse_failure(failed);
                              end_op(nullptr);
                            }));
              }));
}

// No answer in time (a saturated machine), yet the store answered within
// the heartbeat timeout, or it is this launcher's own: not lost.
bool Rendezvous::host_slow(const comm::StoreError& e) const {
  if (e.cause() != comm::StoreError::Cause::kNoAnswer) return false;
  if (m_.hosting) return true;
  const milliseconds limit =
      s_.heartbeat_timeout.count() > 0 ? s_.heartbeat_timeout : milliseconds(30'000);
  return home_clock_->now() - store_heard_ < limit;
}

void Rendezvous::others_look() {
  const milliseconds limit =
      s_.heartbeat_timeout.count() > 0 ? s_.heartbeat_timeout : milliseconds(30'000);
  const auto now = home_clock_->now();
  const auto v = server_->peek(barrier_keys_);
  if (barrier_failures_ && v[0]) {
    server_->set(rkey("ended"), "failed");
    barrier_result_ = parse_failure(*v[0]);
    return end_op(nullptr);
  }
  bool waiting = false;
  auto lost_at = SteadyTime::max();
  for (std::size_t j = 0; j < barrier_hb_.size(); ++j) {
    if (static_cast<int>(j) == m_.node_rank || v[1 + 3 * j]) continue;
    // One whose connection closed (killed) will not come back to say so.
    if (!v[2 + 3 * j]) continue;
    const auto hb = parse_number(v[3 + 3 * j].value_or("0"), 0, INT64_MAX);
    if (hb && *hb != barrier_hb_[j]) {
      barrier_hb_[j] = *hb;
      barrier_seen_[j] = now;
    }
    if (now - barrier_seen_[j] <= limit) {
      waiting = true;
      lost_at = std::min(lost_at, barrier_seen_[j] + limit);
    }
  }
  if (!waiting) {
    if (barrier_failures_) server_->set(rkey("ended"), "ok");
    return end_op(nullptr);
  }
  // Until a member's word (done, a failure, its connection closed), the
  // first heartbeat to go missing, or the next read of the counters (a tenth
  // of the timeout apart: a silent member is lost within 1.1 of it).
  const auto next_read = now + std::clamp(limit / 10, milliseconds(100), milliseconds(3000));
  op_timer_->expires_at(std::min(lost_at + milliseconds(1), next_read),
                        step([this] { others_look(); }));
}

}  // namespace dlaunch
