// Who is at the other end of a TCP connection that comes from this machine.
//
// The store refuses connections from other users of the machine at once:
// nothing of a job is theirs, and a flood of their connections must not hold
// the descriptors and the queue the job's own clients need. A loopback TCP
// connection carries no credentials (unlike a Unix socket's SO_PEERCRED),
// but the kernel knows the owner of the peer's socket: the sock_diag netlink
// interface answers for one exact 4-tuple.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>

namespace dlaunch::comm::detail {

// The uid owning the peer's socket when the peer is on this machine (its
// address is a loopback address or the address it connected to, i.e. one of
// ours); nullopt for a remote peer or when the kernel does not say.
std::optional<uid_t> local_peer_uid(const boost::asio::ip::tcp::socket& socket);

// The process at the other end of connected socket `fd` (TCP or Unix) when
// it is on this machine: its uid, and its pid where /proc shows it (else 0).
struct LocalPeer {
  uid_t uid = 0;
  pid_t pid = 0;
};
std::optional<LocalPeer> local_peer(int fd);

// Who holds the other end of connected socket `fd` when it is on this machine
// ("held by user mallory (uid 1001), pid 4242 (fake_store)"; the pid where
// /proc shows it), for a message about a peer that is not what it should
// be; empty for a remote peer or when the kernel does not say.
std::string describe_local_peer(int fd);

// The peer's uid on a Unix socket (SO_PEERCRED); nullopt when unknown.
std::optional<uid_t> unix_peer_uid(int fd);

}  // namespace dlaunch::comm::detail
