#include "reattach.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "comm/secret_proof.h"
#include "dlaunch/codec.h"

namespace dlaunch::agent {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

namespace {

constexpr char kDoorMagic[4] = {'D', 'L', 'R', 'A'};
constexpr std::size_t kDoorMaxJobId = 256;
// What a relay may hand over besides its descriptors: the bytes it read past
// the Reattach (at most one read of its channel) and the Reattach itself.
constexpr std::uint32_t kDoorMaxUnread = 1u << 20;

std::string door_sys_error(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// What both proofs are over besides the two challenges: the job and node the
// relay asks for.
std::string door_proof_context(const std::string& job_id, std::int32_t node_rank) {
  return job_id + "/node" + std::to_string(node_rank);
}

std::string challenge_bytes(const comm::Challenge& c) {
  return {reinterpret_cast<const char*>(c.data()), c.size()};
}

template <typename A>
void copy_proof_bytes(A& out, std::string_view in) {
  std::memcpy(out.data(), in.data(), out.size());
}

}  // namespace

// ---- the door ----

struct ReattachDoor::State : std::enable_shared_from_this<ReattachDoor::State> {
  State(asio::io_context& io_, Config cfg_, std::function<void(HandedChannel)> taken_,
        std::function<void(const std::string&)> log_)
      : io(io_), cfg(std::move(cfg_)), taken(std::move(taken_)), log(std::move(log_)) {}

  // One connection to the door, from its accept to its hand-over or refusal.
  struct Visit : std::enable_shared_from_this<Visit> {
    explicit Visit(asio::io_context& io) : socket(io), timer(io) {}
    local::socket socket;
    asio::steady_timer timer;
    comm::Challenge door_challenge{};
    std::string buf;
    std::string job_id;
    std::int32_t node_rank = 0;
    comm::Challenge relay_challenge{};
    pid_t pid = 0;
    HandedChannel handed;
    bool done = false;
  };

  asio::io_context& io;
  Config cfg;
  std::function<void(HandedChannel)> taken;
  std::function<void(const std::string&)> log;
  std::unique_ptr<local::acceptor> acceptor;
  std::vector<std::shared_ptr<Visit>> visits;
  // The relay whose channel was taken: open until the agent ends (the relay
  // waits for its EOF).
  std::unique_ptr<local::socket> kept;

  void accept() {
    if (!acceptor) return;
    auto v = std::make_shared<Visit>(io);
    acceptor->async_accept(v->socket, [self = shared_from_this(), v](boost::system::error_code ec) {
      if (ec || !self->acceptor) return;
      self->accept();
      self->visit(v);
    });
  }

  void end(const std::shared_ptr<Visit>& v, const std::string& why) {
    if (v->done) return;
    v->done = true;
    v->timer.cancel();
    boost::system::error_code ignored;
    v->socket.close(ignored);
    std::erase(visits, v);
    if (!why.empty()) log("a new head's agent was turned away at the door: " + why);
  }

  void visit(const std::shared_ptr<Visit>& v) {
    // This user only: another's process gets nothing, not even a challenge.
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(v->socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        cred.uid != ::geteuid()) {
      boost::system::error_code ignored;
      v->socket.close(ignored);
      log("a process of uid " + std::to_string(cred.uid) + " knocked at the door: refused");
      return;
    }
    v->pid = cred.pid;
    visits.push_back(v);
    v->timer.expires_after(kDoorVisit);
    v->timer.async_wait([self = shared_from_this(), v](boost::system::error_code ec) {
      if (!ec)
        self->end(v, "it did not finish within " + std::to_string(kDoorVisit.count()) + " s");
    });
    v->door_challenge = comm::fresh_challenge();
    std::string hello(kDoorMagic, sizeof kDoorMagic);
    codec::Writer w(hello);
    w.u16(proto::kProtocolVersion);
    hello += challenge_bytes(v->door_challenge);
    v->buf = std::move(hello);
    asio::async_write(v->socket, asio::buffer(v->buf),
                      [self = shared_from_this(), v](boost::system::error_code ec, std::size_t) {
                        if (ec) return self->end(v, "");
                        self->read_ask(v);
                      });
  }

  // The relay's ask: u16 version, u32 length + job id, i32 node rank, its
  // challenge, its proof.
  void read_ask(const std::shared_ptr<Visit>& v) {
    v->buf.assign(6, '\0');
    asio::async_read(v->socket, asio::buffer(v->buf),
                     [self = shared_from_this(), v](boost::system::error_code ec, std::size_t) {
                       if (ec) return self->end(v, "");
                       codec::Reader r(v->buf);
                       const std::uint16_t version = r.u16();
                       const std::uint32_t n = r.u32();
                       if (version != proto::kProtocolVersion) {
                         return self->refuse(v, "this job's agent speaks protocol " +
                                                    std::to_string(proto::kProtocolVersion) +
                                                    ", the new one " + std::to_string(version));
                       }
                       if (n == 0 || n > kDoorMaxJobId)
                         return self->end(v, "a job id of " + std::to_string(n) + " bytes");
                       v->buf.assign(n + 4 + 2 * comm::kProofBytes, '\0');
                       asio::async_read(v->socket, asio::buffer(v->buf),
                                        [self, v, n](boost::system::error_code ec2, std::size_t) {
                                          if (ec2) return self->end(v, "");
                                          self->judge(v, n);
                                        });
                     });
  }

  void judge(const std::shared_ptr<Visit>& v, std::uint32_t n) {
    const std::string_view in(v->buf);
    v->job_id = std::string(in.substr(0, n));
    codec::Reader r(in.substr(n, 4));
    v->node_rank = r.i32();
    copy_proof_bytes(v->relay_challenge, in.substr(n + 4, comm::kProofBytes));
    comm::Proof theirs{};
    copy_proof_bytes(theirs, in.substr(n + 4 + comm::kProofBytes, comm::kProofBytes));
    if (v->job_id != cfg.job_id || v->node_rank != cfg.node_rank) {
      return refuse(v, "it asked for node " + std::to_string(v->node_rank) + " of job " +
                           v->job_id + "; this is node " + std::to_string(cfg.node_rank) +
                           " of job " + cfg.job_id);
    }
    const std::string context = door_proof_context(cfg.job_id, cfg.node_rank);
    const comm::Proof expected =
        comm::prove_secret(cfg.secret, "relay", v->door_challenge, v->relay_challenge, context);
    if (!comm::same_proof(theirs, expected)) {
      return refuse(v, "it could not prove the job's secret");
    }
    const comm::Proof mine =
        comm::prove_secret(cfg.secret, "door", v->door_challenge, v->relay_challenge, context);
    v->buf.assign(1, '\0');
    v->buf.append(reinterpret_cast<const char*>(mine.data()), mine.size());
    codec::Writer(v->buf).u32(0);
    asio::async_write(v->socket, asio::buffer(v->buf),
                      [self = shared_from_this(), v](boost::system::error_code ec, std::size_t) {
                        if (ec) return self->end(v, "");
                        self->await_channel(v);
                      });
  }

  void refuse(const std::shared_ptr<Visit>& v, const std::string& why) {
    v->buf.assign(1, '\1');
    v->buf.append(comm::kProofBytes, '\0');
    codec::Writer(v->buf).u32(static_cast<std::uint32_t>(why.size()));
    v->buf += why;
    asio::async_write(v->socket, asio::buffer(v->buf),
                      [self = shared_from_this(), v, why](boost::system::error_code, std::size_t) {
                        self->end(v, why);
                      });
  }

  // One byte with the descriptors, then u32 length + unread bytes, u32
  // length + the Reattach frame.
  void await_channel(const std::shared_ptr<Visit>& v) {
    v->socket.async_wait(
        local::socket::wait_read, [self = shared_from_this(), v](boost::system::error_code ec) {
          if (ec) return self->end(v, "");
          char byte = 0;
          iovec iov{&byte, 1};
          alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))] = {};
          msghdr msg{};
          msg.msg_iov = &iov;
          msg.msg_iovlen = 1;
          msg.msg_control = control;
          msg.msg_controllen = sizeof control;
          const ssize_t got =
              ::recvmsg(v->socket.native_handle(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
          if (got < 0 && (errno == EAGAIN || errno == EINTR)) return self->await_channel(v);
          if (got != 1)
            return self->end(v, got == 0 ? "it left before handing its channel over" : "");
          std::vector<int> fds;
          for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
            const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (std::size_t k = 0; k < count; ++k) {
              int fd = -1;
              std::memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof fd);
              fds.push_back(fd);
            }
          }
          std::vector<UniqueFd> owned;
          owned.reserve(fds.size());
          for (int fd : fds) owned.emplace_back(fd);
          if (owned.size() != 3 || (msg.msg_flags & MSG_CTRUNC) != 0) {
            return self->end(v, "it handed over " + std::to_string(owned.size()) +
                                    " descriptor(s), not its stdin, stdout and stderr");
          }
          v->handed.in = std::move(owned[0]);
          v->handed.out = std::move(owned[1]);
          v->handed.err = std::move(owned[2]);
          self->read_part(v, 0);
        });
  }

  // Part 0: the unread bytes; part 1: the Reattach frame.
  void read_part(const std::shared_ptr<Visit>& v, int part) {
    v->buf.assign(4, '\0');
    asio::async_read(
        v->socket, asio::buffer(v->buf),
        [self = shared_from_this(), v, part](boost::system::error_code ec, std::size_t) {
          if (ec) return self->end(v, "it left while handing its channel over");
          const std::uint32_t n = codec::Reader(v->buf).u32();
          if (n > (part == 0 ? kDoorMaxUnread : proto::kMaxFrameBytes + proto::kHeaderBytes)) {
            return self->end(v, "it handed over " + std::to_string(n) + " bytes");
          }
          v->buf.assign(n, '\0');
          asio::async_read(v->socket, asio::buffer(v->buf),
                           [self, v, part](boost::system::error_code ec2, std::size_t) {
                             if (ec2) return self->end(v, "it left while handing its channel over");
                             if (part == 0) {
                               v->handed.unread = std::move(v->buf);
                               return self->read_part(v, 1);
                             }
                             proto::Decoder d;
                             d.feed(v->buf);
                             std::optional<proto::Message> m;
                             try {
                               m = d.next();
                             } catch (const proto::ProtocolError&) {
                             }
                             auto* reattach = m ? std::get_if<proto::Reattach>(&*m) : nullptr;
                             if (reattach == nullptr)
                               return self->end(v, "it handed over no Reattach");
                             v->handed.reattach = std::move(*reattach);
                             v->handed.relay_pid = v->pid;
                             self->hand_over(v);
                           });
        });
  }

  void hand_over(const std::shared_ptr<Visit>& v) {
    v->done = true;
    v->timer.cancel();
    std::erase(visits, v);
    kept = std::make_unique<local::socket>(std::move(v->socket));
    close_door();
    taken(std::move(v->handed));
  }

  void close_door() {
    if (acceptor) {
      boost::system::error_code ignored;
      acceptor->close(ignored);
      acceptor.reset();
      ::unlink(cfg.path.c_str());
    }
    const auto left = visits;
    for (const auto& v : left) end(v, "");
  }
};

ReattachDoor::ReattachDoor(asio::io_context& io, Config cfg,
                           std::function<void(HandedChannel)> taken,
                           std::function<void(const std::string&)> log)
    : state_(std::make_shared<State>(io, std::move(cfg), std::move(taken), std::move(log))) {}

ReattachDoor::~ReattachDoor() { state_->close_door(); }

std::string ReattachDoor::open() {
  State& s = *state_;
  if (s.acceptor) return {};
  if (s.cfg.path.size() >= sizeof(sockaddr_un::sun_path)) {
    return "its path '" + s.cfg.path + "' is too long for a Unix socket (" +
           std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes at most; a shorter TMPDIR)";
  }
  ::unlink(s.cfg.path.c_str());  // the last door's, in the agent's own private folder
  auto acceptor = std::make_unique<local::acceptor>(s.io);
  boost::system::error_code ec;
  acceptor->open(local(), ec);
  if (!ec) acceptor->bind(local::endpoint(s.cfg.path), ec);
  if (!ec) acceptor->listen(8, ec);
  if (ec) return "'" + s.cfg.path + "': " + ec.message();
  ::chmod(s.cfg.path.c_str(), 0600);
  s.acceptor = std::move(acceptor);
  s.accept();
  return {};
}

void ReattachDoor::close() { state_->close_door(); }

bool ReattachDoor::is_open() const { return state_->acceptor != nullptr; }

// ---- the relay ----

namespace {

using RelayClock = std::chrono::steady_clock;

// Waits for `events` on fd until `deadline`; false on timeout or error.
bool await_fd(int fd, short events, RelayClock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RelayClock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

std::string relay_read_exactly(int fd, std::string& out, std::size_t n,
                               RelayClock::time_point deadline) {
  out.assign(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    if (!await_fd(fd, POLLIN, deadline)) return "the job's agent did not answer in time";
    const ssize_t r = ::read(fd, out.data() + got, n - got);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return r == 0 ? "the job's agent closed its door" : door_sys_error("read");
    got += static_cast<std::size_t>(r);
  }
  return {};
}

std::string relay_write_all(int fd, std::string_view data, RelayClock::time_point deadline) {
  while (!data.empty()) {
    if (!await_fd(fd, POLLOUT, deadline)) return "the job's agent did not read in time";
    const ssize_t r = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return door_sys_error("send");
    data.remove_prefix(static_cast<std::size_t>(r));
  }
  return {};
}

}  // namespace

std::vector<std::string> job_node_dirs(const std::string& base, const std::string& job_id,
                                       std::int32_t node_rank) {
  // The agent names them dlaunch-<job>-node<N>-XXXXXX (mkdtemp's six).
  const std::string prefix = "dlaunch-" + job_id + "-node" + std::to_string(node_rank) + "-";
  std::vector<std::string> out;
  DIR* d = ::opendir(base.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() != prefix.size() + 6 || !name.starts_with(prefix)) continue;
    const std::string path = base + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
        (st.st_mode & 07777) != 0700) {
      continue;
    }
    out.push_back(path);
  }
  ::closedir(d);
  return out;
}

RelayOutcome reattach_to_job(const std::string& base, const proto::Reattach& r, int in, int out,
                             const std::string& unread) {
  if (r.job_id.empty() || r.job_id.size() > kDoorMaxJobId ||
      r.job_id.find('/') != std::string::npos) {
    return {.error = "no job id to look for"};
  }
  if (unread.size() > kDoorMaxUnread) return {.error = "too much read past the Reattach"};
  const auto dirs = job_node_dirs(base, r.job_id, r.node_rank);
  std::string tried;
  for (const auto& dir : dirs) {
    const std::string path = dir + "/" + kDoorName;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!sock) return {.error = door_sys_error("socket")};
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) continue;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      tried += (tried.empty() ? "" : "; ") + path + ": " + std::strerror(errno);
      continue;
    }
    const auto deadline = RelayClock::now() + kRelayStep;
    std::string buf;
    if (auto e = relay_read_exactly(sock.get(), buf, 4 + 2 + comm::kProofBytes, deadline);
        !e.empty())
      return {.error = e};
    if (std::memcmp(buf.data(), kDoorMagic, sizeof kDoorMagic) != 0) {
      return {.error = path + " is not a dlaunch agent's door"};
    }
    const std::uint16_t version = codec::Reader(std::string_view(buf).substr(4, 2)).u16();
    if (version != proto::kProtocolVersion) {
      return {.error = "the job's agent speaks protocol " + std::to_string(version) +
                       ", this one " + std::to_string(proto::kProtocolVersion)};
    }
    comm::Challenge door{};
    copy_proof_bytes(door, std::string_view(buf).substr(6, comm::kProofBytes));
    const comm::Challenge mine = comm::fresh_challenge();
    const std::string context = door_proof_context(r.job_id, r.node_rank);
    const comm::Proof proof = comm::prove_secret(r.secret, "relay", door, mine, context);
    std::string ask;
    codec::Writer w(ask);
    w.u16(proto::kProtocolVersion);
    w.bytes(r.job_id);
    w.i32(r.node_rank);
    ask += challenge_bytes(mine);
    ask.append(reinterpret_cast<const char*>(proof.data()), proof.size());
    if (auto e = relay_write_all(sock.get(), ask, deadline); !e.empty()) return {.error = e};
    if (auto e = relay_read_exactly(sock.get(), buf, 1 + comm::kProofBytes + 4, deadline);
        !e.empty())
      return {.error = e};
    const bool ok = buf[0] == 0;
    comm::Proof theirs{};
    copy_proof_bytes(theirs, std::string_view(buf).substr(1, comm::kProofBytes));
    const std::uint32_t why_len =
        codec::Reader(std::string_view(buf).substr(1 + comm::kProofBytes, 4)).u32();
    if (!ok) {
      std::string why;
      if (why_len <= 4096) (void)relay_read_exactly(sock.get(), why, why_len, deadline);
      return {.error = "the job's agent refused: " + why};
    }
    if (!comm::same_proof(theirs, comm::prove_secret(r.secret, "door", door, mine, context))) {
      return {.error = path + ": its agent could not prove the job's secret"};
    }
    // The channel, then what goes with it.
    char byte = 'F';
    iovec iov{&byte, 1};
    const int fds[3] = {in, out, 2};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fds);
    std::memcpy(CMSG_DATA(c), fds, sizeof fds);
    if (!await_fd(sock.get(), POLLOUT, deadline)) return {.error = "the job's agent did not read"};
    if (::sendmsg(sock.get(), &msg, MSG_NOSIGNAL) != 1) return {.error = door_sys_error("sendmsg")};
    std::string rest;
    codec::Writer rw(rest);
    rw.bytes(unread);
    rw.bytes(proto::encode(r));
    if (auto e = relay_write_all(sock.get(), rest, deadline); !e.empty()) return {.error = e};
    return {.connection = std::move(sock)};
  }
  if (!tried.empty()) return {.error = "no door of the job's agent answered (" + tried + ")"};
  return {.error = "no agent of job " + r.job_id + " runs node " + std::to_string(r.node_rank) +
                   " here (it ended, or its --head-grace passed)"};
}

}  // namespace dlaunch::agent
