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
#include <string_view>
#include <system_error>

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

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr milliseconds kPoll{100};
constexpr int kHeartbeatEvery = 3;  // polls
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

}  // namespace

Rendezvous::Rendezvous(RdzvSettings s) : s_(std::move(s)), meeting_port_(s_.port) {
  endpoint_ = (s_.host.find(':') != std::string::npos ? "[" + s_.host + "]" : s_.host) + ":" +
              std::to_string(s_.port);
}

Rendezvous::~Rendezvous() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (watch_.joinable()) watch_.join();
  store_.reset();
  server_.reset();
}

std::string Rendezvous::key(const std::string& k) const { return "dlaunch/rdzv/" + k; }

std::string Rendezvous::rkey(const std::string& k) const {
  return fmt::format("dlaunch/rdzv/r{}/{}", round_, k);
}

Membership Rendezvous::join(int round) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
    peer_.reset();
    to_publish_.reset();
    published_ = false;
    settled_ = false;
  }
  round_ = round;
  try {
    if (store_lost_) take_over();
    if (!store_) connect();
    return join_round();
  } catch (const comm::StoreError& e) {
    // A store that stops answering mid-way is this launcher's environment,
    // said with where it was meeting; not an internal error.
    throw Error(ErrorKind::kEnvironment,
                fmt::format("the rendezvous at {}: {}", endpoint_, e.what()));
  }
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
// round number is every survivor's).
void Rendezvous::take_over() {
  const std::string old_endpoint = endpoint_;
  const std::string old_host = m_.names.empty() ? "?" : m_.names.front();
  server_.reset();
  store_.reset();
  const milliseconds each{3000};
  std::vector<std::pair<int, std::string>> candidates;  // node rank (-1: the old endpoint), address
  candidates.emplace_back(-1, s_.host);
  for (int k = 1; k < m_.nnodes; ++k)
    candidates.emplace_back(k, m_.addrs[static_cast<std::size_t>(k)]);
  std::string tried;
  for (const auto& [k, addr] : candidates) {
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
        server_ = std::make_unique<comm::ThreadedStoreServer>(so);
        m_.hosting = true;
      } catch (const std::system_error& e) {
        tried += fmt::format("; hosting at {}:{}: {}", addr, s_.port, e.what());
        continue;
      }
    }
    comm::StoreOptions co;
    co.host = addr;
    co.port = s_.port;
    co.secret = s_.secret;
    // The old endpoint briefly: a host alive after all answers at once.
    co.connect_timeout = k < 0 ? milliseconds(500) : each;
    co.timeout = s_.read_timeout;
    try {
      store_ = std::make_unique<comm::Store>(co);
    } catch (const comm::StoreError& e) {
      // Something there that cannot prove the secret (a process that took
      // the freed port) is passed over, never joined.
      tried += fmt::format("; {}:{}: {}{}", addr, s_.port,
                           e.cause() == comm::StoreError::Cause::kOther
                               ? ""
                               : "held by something that is not this job's rendezvous: ",
                           e.what());
      server_.reset();
      continue;
    }
    s_.host = addr;
    endpoint_ = (addr.find(':') != std::string::npos ? "[" + addr + "]" : addr) + ":" +
                std::to_string(s_.port);
    client_host_ = addr;
    m_.store_host = addr;
    m_.store_port = s_.port;
    {
      std::lock_guard<std::mutex> lock(mu_);
      store_lost_ = false;
    }
    int host = k;
    if (k < 0) {
      // The successor's store says so for this round; the old host's (back
      // after all) does not, even if it was a successor itself before.
      host = -1;
      if (store_->check({rkey("successor")})) {
        const std::string v = store_->get(rkey("successor"));
        host = static_cast<int>(parse_number(v, 1, m_.nnodes - 1).value_or(-1));
      }
    }
    if (host < 0) {
      write_all(2, fmt::format("dlaunch: the rendezvous at {} answers again\n", endpoint_));
    } else {
      write_all(2,
                fmt::format("dlaunch: node 0 ({}), which hosted the rendezvous, is lost; node "
                            "{} ({}) hosts it now at {}\n",
                            old_host, host, m_.names[static_cast<std::size_t>(host)], endpoint_));
    }
    check_settings();
    return;
  }
  throw Error(ErrorKind::kEnvironment,
              fmt::format("the launcher hosting the rendezvous at {} ({}) is lost, and no "
                          "surviving launcher could host it{}",
                          old_endpoint, old_host, tried));
}

void Rendezvous::connect() {
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
      server_ = std::make_unique<comm::ThreadedStoreServer>(so);
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
  comm::StoreOptions co;
  client_host_ = client_host;
  co.host = client_host_;
  co.port = s_.port;
  co.secret = s_.secret;
  co.connect_timeout = s_.join_timeout;
  co.timeout = s_.read_timeout;
  try {
    store_ = std::make_unique<comm::Store>(co);
  } catch (const comm::StoreError& e) {
    if (e.cause() != comm::StoreError::Cause::kOther) {
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
  check_settings();
  if (s_.is_static && meeting_port_ != 0) move_to_job_port();
  // Where this launcher can be reached, should it host the store one day.
  own_addr_ = s_.local_addr.empty() ? proto::source_address_toward(numeric_address(s_.host))
                                    : numeric_address(s_.local_addr);
}

// Static: the host says where the job's store is; every launcher (the host
// too) reconnects there before it claims its node rank, so that once every
// rank is claimed nobody uses the meeting port and the host closes it.
void Rendezvous::move_to_job_port() {
  if (m_.hosting) store_->set(key("store_port"), std::to_string(job_port_));
  const std::string v = store_->get(key("store_port"), s_.join_timeout);
  const auto port = parse_number(v, 1, 65535);
  if (!port) malformed("store_port", v);
  comm::StoreOptions co;
  co.host = client_host_;
  co.port = static_cast<std::uint16_t>(*port);
  co.secret = s_.secret;
  co.connect_timeout = s_.join_timeout;
  co.timeout = s_.read_timeout;
  try {
    store_ = std::make_unique<comm::Store>(co);
  } catch (const comm::StoreError& e) {
    throw Error(ErrorKind::kEnvironment,
                fmt::format("the rendezvous at {} moved the job's store to port {}, which this "
                            "launcher cannot reach: {}",
                            endpoint_, *port, e.what()));
  }
  s_.port = co.port;
  m_.store_port = co.port;
}

void Rendezvous::check_settings() {
  comm::Store& st = *store_;
  // The job's settings: the first launcher's are the job's; any other must
  // say the same.
  const std::string mine =
      fmt::format("{}\n{}\n{}\n{}\n{}\n{}\n{}", s_.run_id, s_.is_static ? "static" : "c10d",
                  s_.min_nodes == s_.max_nodes ? std::to_string(s_.max_nodes)
                                               : fmt::format("{}:{}", s_.min_nodes, s_.max_nodes),
                  s_.nproc, s_.max_restarts, s_.mpi ? "on" : "off", s_.me);
  const std::string conf = st.compare_set(key("conf"), "", mine);
  if (conf != mine) {
    const auto a = split(mine, '\n');
    const auto b = split(conf, '\n');
    if (b.size() == 7) {
      const char* names[] = {"--rdzv-id",        "--rdzv-backend", "--nnodes",
                             "--nproc-per-node", "--max-restarts", "--mpi"};
      for (std::size_t i = 0; i < 6; ++i) {
        if (a[i] == b[i]) continue;
        throw InputError({names[i]}, "",
                         fmt::format("the launchers at {} disagree: {} {} here ({}), {} {} on "
                                     "the launcher that came first ({})",
                                     endpoint_, names[i], a[i], s_.me, names[i], printable(b[i]),
                                     printable(b[6])),
                         "give every launcher of the job the same value");
      }
    }
  }
}

Membership Rendezvous::join_round() {
  comm::Store& st = *store_;
  m_.nproc = s_.nproc;
  // The first rendezvous waits for the launchers to start (join_timeout); a
  // re-rendezvous after a failure, for the survivors (close_timeout).
  const auto wait = round_ == 0 ? s_.join_timeout : s_.close_timeout;
  const auto deadline = Clock::now() + wait;
  if (s_.is_static) {
    const std::string k = rkey(fmt::format("static/{}", s_.node_rank));
    const std::string owner = st.compare_set(k, "", s_.me);
    if (owner != s_.me) {
      throw InputError({"--node-rank"}, "",
                       fmt::format("node rank {} is claimed by two launchers: {} and this one ({})",
                                   s_.node_rank, owner, s_.me),
                       "give every launcher its own --node-rank from 0 to --nnodes - 1");
    }
    st.set_while_connected(rkey("alive/" + s_.me), s_.me);  // before anyone can watch it
    m_.nnodes = s_.max_nodes;
    m_.node_rank = s_.node_rank;
    std::vector<std::string> keys;
    keys.reserve(static_cast<std::size_t>(m_.nnodes));
    for (int j = 0; j < m_.nnodes; ++j) keys.push_back(rkey(fmt::format("static/{}", j)));
    for (;;) {
      std::vector<int> missing;
      for (int j = 0; j < m_.nnodes; ++j) {
        if (!st.check({keys[static_cast<std::size_t>(j)]})) missing.push_back(j);
      }
      if (missing.empty()) break;
      if (Clock::now() > deadline) {
        throw Error(ErrorKind::kEnvironment,
                    fmt::format("node rank(s) {} did not join the rendezvous at {} within {} "
                                "(join_timeout)",
                                fmt::join(missing, ", "), endpoint_, secs(s_.join_timeout)));
      }
      std::this_thread::sleep_for(kPoll);
    }
    m_.names = st.multi_get(keys);
    check_names();
    // Everyone has moved to the job's store: the meeting port is MASTER_PORT's.
    if (m_.hosting && round_ == 0 && meeting_port_ != 0) server_->stop_listening_on_first_port();
  } else {
    const long long idx = st.add(rkey("joined"), 1) - 1;
    st.set(rkey(fmt::format("addr/{}", idx)), own_addr_);
    st.set(rkey(fmt::format("join/{}", idx)), s_.me);
    st.set_while_connected(rkey("alive/" + s_.me), s_.me);  // before anyone can watch it
    if (m_.hosting) st.set(rkey("host"), std::to_string(idx));
    Clock::time_point min_seen{};
    bool min_reached = false;
    while (!st.check({rkey("closed")})) {
      const long long joined = st.add(rkey("joined"), 0);
      const bool enough = st.check({rkey("host")}) && joined >= s_.min_nodes;
      if (enough && !min_reached) min_seen = Clock::now();
      min_reached = enough;
      if (enough && (joined >= s_.max_nodes || Clock::now() - min_seen >= s_.last_call)) {
        // Close: the host is node 0, the others in the order they joined.
        const std::string host_value = st.get(rkey("host"));
        const auto parsed = parse_number(host_value, 0, joined - 1);
        if (!parsed) malformed("host", host_value);
        const long long host = *parsed;
        const long long n = std::min<long long>(joined, s_.max_nodes);
        std::vector<std::string> members{std::to_string(host)};
        for (long long i = 0; i < joined && static_cast<long long>(members.size()) < n; ++i) {
          if (i != host) members.push_back(std::to_string(i));
        }
        (void)st.compare_set(rkey("closed"), "", fmt::format("{}", fmt::join(members, ",")));
        break;
      }
      // The deadline is for MIN nodes to come; once they are here, the last
      // call runs its course (it may be longer than close_timeout).
      if (!min_reached && Clock::now() > deadline) {
        throw Error(
            ErrorKind::kEnvironment,
            fmt::format("the rendezvous at {} did not close within {} ({}): "
                        "{} of at least {} node(s) joined",
                        endpoint_, secs(wait), round_ == 0 ? "join_timeout" : "close_timeout",
                        joined, s_.min_nodes));
      }
      std::this_thread::sleep_for(kPoll);
    }
    const std::string closed = st.get(rkey("closed"));
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
    const auto it = std::find(members.begin(), members.end(), std::to_string(idx));
    if (it == members.end() && s_.min_nodes < s_.max_nodes && s_.max_restarts > 0) {
      // A running elastic job: wait for its next round, and ask for one (the
      // nodes there restart to take this one in, as torchrun's do when they
      // see nodes waiting).
      (void)st.compare_set(rkey("waiting"), "", s_.me);
      ++round_;
      return join_round();
    }
    if (it == members.end()) {
      throw Error(ErrorKind::kEnvironment,
                  fmt::format("the rendezvous at {} closed with {} node(s) without this launcher "
                              "({}): it joined too late",
                              endpoint_, members.size(), s_.me));
    }
    m_.nnodes = static_cast<int>(members.size());
    m_.node_rank = static_cast<int>(it - members.begin());
    std::vector<std::string> keys;
    keys.reserve(members.size());
    for (const auto& i : members) keys.push_back(rkey("join/" + i));
    m_.names = st.multi_get(keys);
    keys.clear();
    for (const auto& i : members) keys.push_back(rkey("addr/" + i));
    m_.addrs = st.multi_get(keys);
    check_names();
    for (const auto& a : m_.addrs) {
      if (!a.empty() && !valid_address(a)) malformed("addr", a);
    }
  }

  // MASTER_ADDR and MASTER_PORT: node 0 chooses the port (free on it) and
  // says where it is.
  if (m_.node_rank == 0) {
    std::string addr = s_.local_addr;
    if (addr.empty()) addr = s_.host;
    // torchrun's: the static rendezvous's MASTER_PORT is --master-port.
    const std::uint16_t port = s_.pinned_master_port != 0           ? s_.pinned_master_port
                               : s_.is_static && meeting_port_ != 0 ? meeting_port_
                                                                    : free_port();
    st.set(rkey("master"), fmt::format("{}\n{}", addr, port));
  }
  const std::string master_value = st.get(rkey("master"), s_.join_timeout);
  const auto master = split(master_value, '\n');
  const auto master_port = master.size() == 2 ? parse_number(master[1], 1, 65535) : std::nullopt;
  if (!master_port || !valid_address(master[0])) malformed("master", master_value);
  m_.master_addr = master[0];
  m_.master_port = static_cast<std::uint16_t>(*master_port);
  m_.round = round_;
  return m_;
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

void Rendezvous::start_watch() {
  watch_ = std::thread([this] { watch_loop(); });
}

void Rendezvous::publish_failure(const std::string& report, int status, bool final) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!published_ && !to_publish_) to_publish_ = Failure{report, status, final};
  // The watch says it now, not at its next poll: the first failure published
  // is the job's, and a consequence elsewhere (a peer's rank that died of the
  // broken connection) must not get there first.
  wake_.notify_all();
}

bool Rendezvous::store_lost() {
  std::lock_guard<std::mutex> lock(mu_);
  return store_lost_ && !can_take_over();
}

std::optional<PeerFailure> Rendezvous::agreed_failure(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait_for(lock, wait, [this] { return settled_ || store_lost_; });
  if (!settled_ || published_) return std::nullopt;
  return peer_;
}

std::optional<PeerFailure> Rendezvous::peer_failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return peer_;
}

void Rendezvous::watch_loop() {
  comm::Store& st = *store_;
  const int me = m_.node_rank;
  const std::string failed = rkey("failed");
  std::vector<long long> last(static_cast<std::size_t>(m_.nnodes), -1);
  std::vector<Clock::time_point> seen(static_cast<std::size_t>(m_.nnodes), Clock::now());
  std::vector<bool> done(static_cast<std::size_t>(m_.nnodes), false);
  // Each launcher holds alive/<its name> while its store connection lasts
  // (Store::set_while_connected): a launcher that exits or is killed loses
  // it at once, long before its heartbeat is missed. A launcher whose key
  // was seen and is gone for kGone, without saying it is done, is lost.
  // (The key is set again every heartbeat: a launcher whose connection the
  // network cut and that reconnected holds it again within kGone.)
  std::vector<bool> alive_seen(static_cast<std::size_t>(m_.nnodes), false);
  std::vector<std::optional<Clock::time_point>> gone_since(static_cast<std::size_t>(m_.nnodes));
  const std::string alive_me = rkey("alive/" + s_.me);
  // The failure entry for a lost node: "status\nfinal\ntext".
  const auto lost = [&](int j, const std::string& why) {
    return fmt::format("1\n0\nnode {} ({}) is lost: {}", j, m_.names[static_cast<std::size_t>(j)],
                       why);
  };
  const auto set_peer = [&](PeerFailure f) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!peer_ && !published_) peer_ = std::move(f);
  };
  for (int tick = 0;; ++tick) {
    std::optional<Failure> publish;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      publish = to_publish_;
      to_publish_.reset();
    }
    try {
      if (publish) {
        const std::string v =
            fmt::format("{}\n{}\n{}", publish->status, publish->final ? 1 : 0, publish->text);
        const std::string first = st.compare_set(failed, "", v);
        std::lock_guard<std::mutex> lock(mu_);
        published_ = first == v;
        if (!published_ && !peer_) peer_ = parse_failure(first);
        settled_ = true;
        wake_.notify_all();
      } else if (st.check({failed})) {
        const std::string v = st.get(failed);
        bool ours = false;
        {
          std::lock_guard<std::mutex> lock(mu_);
          ours = published_;
        }
        if (!ours) set_peer(parse_failure(v));
      }
      if (m_.nnodes < s_.max_nodes && s_.max_restarts > 0 && st.check({rkey("waiting")})) {
        set_peer({fmt::format("to take in the launcher waiting to join ({}): the job restarts "
                              "with it (not a failure)",
                              st.get(rkey("waiting"))),
                  1, false, true});
      }
      if (tick % kHeartbeatEvery == 0) {
        st.add(rkey(fmt::format("hb/{}", me)), 1);
        st.set_while_connected(alive_me, s_.me);
        // The host watches every other launcher (its store is in its own
        // process: the requests stay on this machine) and publishes a lost
        // one in `failed`, which every launcher reads each poll anyway: one
        // launcher's requests grow with the job, not every launcher's. The
        // others find the host lost through their store connections.
        const bool watching = s_.heartbeat_timeout.count() > 0 && m_.hosting;
        // One request when every other launcher holds its key (the usual case).
        std::vector<std::string> alive_keys;
        for (int j = 0; j < m_.nnodes && watching; ++j) {
          if (j != me && !done[static_cast<std::size_t>(j)])
            alive_keys.push_back(rkey("alive/" + m_.names[static_cast<std::size_t>(j)]));
        }
        const bool all_alive = alive_keys.empty() || st.check(alive_keys);
        for (int j = 0; j < m_.nnodes && watching; ++j) {
          const auto uj = static_cast<std::size_t>(j);
          if (j == me || done[uj]) continue;
          if (st.check({rkey(fmt::format("done/{}", j))})) {
            done[uj] = true;
            continue;
          }
          if (all_alive || st.check({rkey("alive/" + m_.names[uj])})) {
            alive_seen[uj] = true;
            gone_since[uj].reset();
          } else if (alive_seen[uj] && !gone_since[uj]) {
            gone_since[uj] = Clock::now();
          } else if (alive_seen[uj] && Clock::now() - *gone_since[uj] > kGone) {
            set_peer(parse_failure(st.compare_set(
                failed, "",
                lost(j,
                     "its launcher's connection to the rendezvous closed (it exited or was "
                     "killed)"))));
            done[uj] = true;
            continue;
          }
          const long long hb = st.add(rkey(fmt::format("hb/{}", j)), 0);
          if (hb != last[uj]) {
            last[uj] = hb;
            seen[uj] = Clock::now();
          } else if (Clock::now() - seen[uj] > s_.heartbeat_timeout) {
            set_peer(parse_failure(st.compare_set(
                failed, "",
                lost(j, fmt::format("its launcher sent no heartbeat to the rendezvous for {} "
                                    "(--heartbeat-timeout)",
                                    secs(s_.heartbeat_timeout))))));
            done[uj] = true;
          }
        }
      }
    } catch (const comm::StoreError& e) {
      // The store is gone: its launcher (node 0) died or its machine is out
      // of reach. Said at once; nothing more to watch.
      {
        std::lock_guard<std::mutex> lock(mu_);
        store_lost_ = true;
      }
      const bool successor = can_take_over();
      set_peer({fmt::format(
                    "lost the rendezvous store at {} hosted by node 0 ({}): {}{}", endpoint_,
                    m_.names.empty() ? "?" : m_.names.front(), e.what(),
                    successor ? " (with a restart left, a surviving launcher hosts it anew)" : ""),
                1, !successor});
      return;
    }
    // Until the next poll, or at once when this node has a failure to say.
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, kPoll, [this] { return stop_ || to_publish_.has_value(); });
  }
}

void Rendezvous::finish(bool last) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (watch_.joinable()) watch_.join();
  if (!store_ || store_lost_) return;  // a reconnect would wait out join_timeout
  try {
    // A failure of this node the watch had no time to publish goes now,
    // before this node says it is done.
    if (to_publish_) {
      const Failure& f = *to_publish_;
      (void)store_->compare_set(rkey("failed"), "",
                                fmt::format("{}\n{}\n{}", f.status, f.final ? 1 : 0, f.text));
      to_publish_.reset();
    }
    store_->set(rkey(fmt::format("done/{}", m_.node_rank)), "1");
    if (!last) return;
    // The host keeps the store up until every other launcher has left it.
    if (m_.hosting) {
      (void)wait_for_others(false);
    } else {
      store_->set(rkey(fmt::format("left/{}", m_.node_rank)), "1");
    }
  } catch (const comm::StoreError&) {
    // Nothing more to tell anyone.
  }
}

std::optional<PeerFailure> Rendezvous::finish_succeeded() {
  finish(false);
  if (!store_ || store_lost_) return std::nullopt;
  try {
    return wait_for_others(true);
  } catch (const comm::StoreError& e) {
    // The host is gone: it failed (its report went to its own console) or
    // its machine is out of reach. This node's part succeeded; the job's end
    // cannot be known any more.
    {
      std::lock_guard<std::mutex> lock(mu_);
      store_lost_ = true;
    }
    return PeerFailure{fmt::format("lost the rendezvous store at {} hosted by node 0 ({}) "
                                   "while waiting for the other nodes to finish: {}",
                                   endpoint_, m_.names.empty() ? "?" : m_.names.front(), e.what()),
                       1, true};
  }
}

// With `failures` (this node's ranks succeeded): until every other node's
// ranks are done too, and a failure published meanwhile ends the wait and is
// returned. Without (the host, about to exit): until every other launcher has
// left the store. Either way a node that is gone (its connection closed, or
// silent for the heartbeat timeout) is not waited for. A launcher waiting
// here heartbeats, so that the others' waits see it.
std::optional<PeerFailure> Rendezvous::wait_for_others(bool failures) {
  const char* const until = failures ? "done" : "left";
  const std::string my_hb = rkey(fmt::format("hb/{}", m_.node_rank));
  const milliseconds limit =
      s_.heartbeat_timeout.count() > 0 ? s_.heartbeat_timeout : milliseconds(30'000);
  std::vector<long long> last_hb(static_cast<std::size_t>(m_.nnodes), -1);
  std::vector<Clock::time_point> seen(static_cast<std::size_t>(m_.nnodes), Clock::now());
  for (;;) {
    if (failures && store_->check({rkey("failed")})) {
      const std::string v = store_->get(rkey("failed"));
      return parse_failure(v);
    }
    store_->add(my_hb, 1);
    bool waiting = false;
    for (int j = 0; j < m_.nnodes; ++j) {
      const auto uj = static_cast<std::size_t>(j);
      if (j == m_.node_rank || store_->check({rkey(fmt::format("{}/{}", until, j))})) continue;
      // One whose connection closed (killed) will not come back to say so.
      if (!store_->check({rkey("alive/" + m_.names[uj])})) continue;
      const long long hb = store_->add(rkey(fmt::format("hb/{}", j)), 0);
      if (hb != last_hb[uj]) {
        last_hb[uj] = hb;
        seen[uj] = Clock::now();
      }
      if (Clock::now() - seen[uj] <= limit) waiting = true;
    }
    if (!waiting) return std::nullopt;
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace dlaunch
