#include "store/socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "store/wire.h"

namespace dlaunch::comm::detail {

namespace {

// Waits for `events` on fd (none: -1); Io::ok when ready, Io::interrupted
// when the wake descriptor is readable first.
IoResult wait_for(int fd, short events, const Until& until) {
  for (;;) {
    // Polled even when the deadline has passed: an answer already there still counts.
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until.deadline - Clock::now());
    std::array<pollfd, 2> p{pollfd{until.wake, POLLIN, 0}, pollfd{fd, events, 0}};
    int n =
        ::poll(p.data(), p.size(), static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30)));
    if (n > 0 && p[0].revents != 0) return {Io::interrupted};
    if (n > 0) return {Io::ok};
    if (n < 0 && errno != EINTR) return {Io::error, errno};
    if (n == 0 && left.count() <= 0) return {Io::timeout};
  }
}

// A non-blocking connect, finished within the deadline. A Unix socket whose
// listener's backlog is full answers EAGAIN: wait as for EINPROGRESS (for TCP,
// EAGAIN means no local port is left, an error).
IoResult connect_by(int fd, const sockaddr* addr, socklen_t len, const Until& until) {
  if (::connect(fd, addr, len) == 0) return {Io::ok};
  if (errno != EINPROGRESS && !(errno == EAGAIN && addr->sa_family == AF_UNIX))
    return {Io::error, errno};
  IoResult r = wait_for(fd, POLLOUT, until);
  if (r.status != Io::ok) return r;
  int so_error = 0;
  socklen_t so_len = sizeof so_error;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &so_len);
  if (so_error != 0) return {Io::error, so_error};
  return r;
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string IoResult::describe() const {
  switch (status) {
    case Io::ok:
      return "ok";
    case Io::timeout:
      return "timed out";
    case Io::closed:
      return "the store closed the connection";
    case Io::interrupted:
      return "interrupted";
    case Io::error:
      break;
  }
  return std::strerror(err);
}

Result<Fd> connect_tcp(const std::string& host, uint16_t port, const Until& until) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list); rc != 0) {
    return failure(std::string("cannot resolve host: ") + ::gai_strerror(rc));
  }
  std::string error = "no address";
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      error = std::strerror(errno);
      continue;
    }
    const IoResult r = connect_by(fd.get(), ai->ai_addr, ai->ai_addrlen, until);
    if (r.status == Io::ok) {
      // Requests are small and synchronous: Nagle would add a delay to each.
      int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::freeaddrinfo(list);
      return fd;
    }
    error = r.describe();
    if (r.status == Io::interrupted) break;
  }
  ::freeaddrinfo(list);
  return failure(std::move(error));
}

Result<Fd> connect_unix(const std::string& path, const Until& until) {
  sockaddr_un a{};
  if (path.size() >= sizeof a.sun_path) return failure("socket path too long: " + path);
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return failure(std::strerror(errno));
  const IoResult r = connect_by(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a, until);
  if (r.status != Io::ok) return failure(path + ": " + r.describe());
  return fd;
}

IoResult send_all(int fd, std::string_view data, const Until& until) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return {Io::error, errno};
    if (auto r = wait_for(fd, POLLOUT, until); r.status != Io::ok) return r;
  }
  return {Io::ok};
}

IoResult recv_exact(int fd, char* buf, size_t n, const Until& until) {
  while (n > 0) {
    ssize_t got = ::recv(fd, buf, n, 0);
    if (got > 0) {
      buf += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return {Io::closed};
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) return {Io::closed};
    if (errno != EAGAIN && errno != EWOULDBLOCK) return {Io::error, errno};
    if (auto r = wait_for(fd, POLLIN, until); r.status != Io::ok) return r;
  }
  return {Io::ok};
}

IoResult recv_frame(int fd, std::string& frame, size_t max_body, size_t trailer,
                    const Until& until) {
  // Waits first and reads greedily: the answer is never there the instant the
  // request has left, and a small one then arrives in a single recv.
  char buf[16384];
  size_t have = 0;
  while (have < kFrameHeaderBytes) {
    if (auto r = wait_for(fd, POLLIN, until); r.status != Io::ok) return r;
    ssize_t got = ::recv(fd, buf + have, sizeof buf - have, 0);
    if (got == 0 || (got < 0 && errno == ECONNRESET)) return {Io::closed};
    if (got < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return {Io::error, errno};
    }
    if (got > 0) have += static_cast<size_t>(got);
  }
  frame.assign(buf, have);
  const size_t len = frame_length(buf);
  // Checked from the header alone, before anything is allocated for it.
  if (len > max_body) return {Io::error, EMSGSIZE};
  const size_t total = kFrameHeaderBytes + len + trailer;
  if (have > total) return {Io::error, EPROTO};
  // Grown as the bytes come, not to what the header claims: a peer must send
  // what it announces before it costs this process that much memory.
  while (have < total) {
    const size_t step = std::min(total - have, std::max<size_t>(have, 1 << 16));
    frame.resize(have + step);
    if (auto r = recv_exact(fd, frame.data() + have, step, until); r.status != Io::ok) return r;
    have += step;
  }
  return {Io::ok};
}

IoResult pause(const Until& until) { return wait_for(-1, 0, until); }

}  // namespace dlaunch::comm::detail
