#include "store/peer_uid.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

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

std::optional<uid_t> local_peer_uid(const boost::asio::ip::tcp::socket& socket) {
  boost::system::error_code ec;
  const auto peer = socket.remote_endpoint(ec);
  if (ec) return std::nullopt;
  const auto local = socket.local_endpoint(ec);
  if (ec) return std::nullopt;
  // From this machine: a loopback source, or the very address it connected to.
  if (!peer.address().is_loopback() && peer.address() != local.address()) return std::nullopt;

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
  // The peer's socket: its source is the peer, its destination is us.
  msg.req.id.idiag_sport = htons(peer.port());
  msg.req.id.idiag_dport = htons(local.port());
  put_address(peer.address(), msg.req.id.idiag_src);
  put_address(local.address(), msg.req.id.idiag_dst);
  msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  std::optional<uid_t> uid;
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
      uid = r.idiag_uid;
    }
  }
  ::close(fd);
  return uid;
}

std::optional<uid_t> unix_peer_uid(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
  return cred.uid;
}

}  // namespace dlaunch::comm::detail
