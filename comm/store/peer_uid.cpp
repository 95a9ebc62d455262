#include "store/peer_uid.h"

#include <dirent.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "store/connection.h"

namespace dlaunch::comm::detail {

namespace {

// inet_diag_sockid keeps ports and addresses in network byte order; an IPv4
// address goes in the first word.
void put_address(const boost::asio::ip::address& a, __be32 out[4]) {
  std::memset(out, 0, 4 * sizeof(__be32));
  if (a.is_v4()) {
    const auto bytes = a.to_v4().to_bytes();
    std::memcpy(&out[0], bytes.data(), 4);
  } else {
    const auto bytes = a.to_v6().to_bytes();
    std::memcpy(out, bytes.data(), 16);
  }
}

}  // namespace

namespace {

struct PeerSocket {
  uid_t uid = 0;
  ino_t inode = 0;
};

// The socket at the other end of a TCP connection between `local` (ours) and
// `peer`, both on this machine: the kernel's sock_diag answers for one exact
// 4-tuple (the peer's socket: its source is the peer, its destination us).
std::optional<PeerSocket> peer_socket(const boost::asio::ip::tcp::endpoint& local,
                                      const boost::asio::ip::tcp::endpoint& peer) {
  const int fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return std::nullopt;
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof msg;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = peer.address().is_v4() ? AF_INET : AF_INET6;
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0U;
  msg.req.id.idiag_sport = htons(peer.port());
  msg.req.id.idiag_dport = htons(local.port());
  put_address(peer.address(), msg.req.id.idiag_src);
  put_address(local.address(), msg.req.id.idiag_dst);
  msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  std::optional<PeerSocket> found;
  if (::sendto(fd, &msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) ==
      static_cast<ssize_t>(sizeof msg)) {
    alignas(nlmsghdr) char buf[8192];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    // One answer: a SOCK_DIAG_BY_FAMILY message with the peer's socket, or
    // an NLMSG_ERROR (no such socket).
    constexpr std::size_t kHeader = (sizeof(nlmsghdr) + 3) & ~std::size_t{3};
    nlmsghdr h{};
    if (n >= static_cast<ssize_t>(sizeof h)) std::memcpy(&h, buf, sizeof h);
    if (n >= static_cast<ssize_t>(kHeader + sizeof(inet_diag_msg)) &&
        h.nlmsg_type == SOCK_DIAG_BY_FAMILY && h.nlmsg_len >= kHeader + sizeof(inet_diag_msg)) {
      inet_diag_msg r{};
      std::memcpy(&r, buf + kHeader, sizeof r);
      found = PeerSocket{r.idiag_uid, r.idiag_inode};
    }
  }
  ::close(fd);
  return found;
}

bool from_this_machine(const boost::asio::ip::tcp::endpoint& local,
                       const boost::asio::ip::tcp::endpoint& peer) {
  return peer.address().is_loopback() || peer.address() == local.address();
}

// The first process that holds socket `inode` open, by reading /proc/*/fd
// (all of them as root; a user's own otherwise). 0 when none is visible.
pid_t process_holding(ino_t inode) {
  if (inode == 0) return 0;
  const std::string want = "socket:[" + std::to_string(inode) + "]";
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  pid_t found = 0;
  while (found == 0) {
    const dirent* e = ::readdir(proc);
    if (e == nullptr) break;
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    const std::string fds = std::string("/proc/") + e->d_name + "/fd";
    DIR* d = ::opendir(fds.c_str());
    if (d == nullptr) continue;
    while (const dirent* f = ::readdir(d)) {
      char target[64];
      const std::string link = fds + "/" + f->d_name;
      const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
      if (n > 0 && std::string_view(target, static_cast<size_t>(n)) == want) {
        found = static_cast<pid_t>(pid);
        break;
      }
    }
    ::closedir(d);
  }
  ::closedir(proc);
  return found;
}

std::string describe_uid_pid(uid_t uid, pid_t pid) {
  std::string out = "held by uid " + std::to_string(uid);
  passwd pw{};
  passwd* res = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &res) == 0 && res != nullptr) {
    out = "held by user " + printable(res->pw_name) + " (uid " + std::to_string(uid) + ")";
  }
  if (pid > 0) {
    out += ", pid " + std::to_string(pid);
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    if (std::getline(comm, name) && !name.empty()) out += " (" + printable(name) + ")";
  }
  return out;
}

}  // namespace

std::optional<uid_t> local_peer_uid(const boost::asio::ip::tcp::socket& socket) {
  boost::system::error_code ec;
  const auto peer = socket.remote_endpoint(ec);
  if (ec) return std::nullopt;
  const auto local = socket.local_endpoint(ec);
  if (ec) return std::nullopt;
  if (!from_this_machine(local, peer)) return std::nullopt;
  const auto s = peer_socket(local, peer);
  if (!s) return std::nullopt;
  return s->uid;
}

std::optional<LocalPeer> local_peer(int fd) {
  int domain = 0;
  socklen_t len = sizeof domain;
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) return std::nullopt;
  if (domain == AF_UNIX) {
    ucred cred{};
    len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
    return LocalPeer{cred.uid, cred.pid};
  }
  // TCP: the endpoints through asio's types, as local_peer_uid takes them.
  sockaddr_storage mine{};
  sockaddr_storage theirs{};
  socklen_t mine_len = sizeof mine;
  socklen_t theirs_len = sizeof theirs;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mine_len) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &theirs_len) != 0) {
    return std::nullopt;
  }
  boost::asio::ip::tcp::endpoint local;
  boost::asio::ip::tcp::endpoint peer;
  if (mine_len > local.capacity() || theirs_len > peer.capacity()) return std::nullopt;
  std::memcpy(local.data(), &mine, mine_len);
  local.resize(mine_len);
  std::memcpy(peer.data(), &theirs, theirs_len);
  peer.resize(theirs_len);
  if (!from_this_machine(local, peer)) return std::nullopt;
  const auto s = peer_socket(local, peer);
  if (!s) return std::nullopt;
  return LocalPeer{s->uid, process_holding(s->inode)};
}

std::string describe_local_peer(int fd) {
  const auto p = local_peer(fd);
  return p ? describe_uid_pid(p->uid, p->pid) : std::string();
}

std::optional<uid_t> unix_peer_uid(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
  return cred.uid;
}

}  // namespace dlaunch::comm::detail
