// Blocking-with-deadline TCP I/O for the store client: non-blocking sockets
// driven by poll(), so every wait has an end.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "src/result.h"

namespace dlaunch::comm::detail {

using Clock = std::chrono::steady_clock;

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

enum class Io { ok, timeout, closed, error, interrupted };

// How long a wait may last: until `deadline`, or until `wake` (an eventfd,
// -1 for none) is readable, whichever comes first (Io::interrupted). The
// store client's interrupt() and close() write that eventfd: a blocked call,
// a connect's included, then ends at once.
struct Until {
  Clock::time_point deadline;
  int wake = -1;
};

struct IoResult {
  Io status = Io::ok;
  int err = 0;  // errno for Io::error
  std::string describe() const;
};

// Tries every address of host once, each until the deadline at most: the
// connected socket, or why none could be had (the last address's reason).
// Resolving the name is not interruptible (getaddrinfo).
Result<Fd> connect_tcp(const std::string& host, uint16_t port, const Until& until);
// A Unix socket at `path`, or why not.
Result<Fd> connect_unix(const std::string& path, const Until& until);
IoResult send_all(int fd, std::string_view data, const Until& until);
IoResult recv_exact(int fd, char* buf, size_t n, const Until& until);
// Io::timeout at the deadline, or Io::interrupted once `until.wake` is
// readable: the pause between two connect attempts.
IoResult pause(const Until& until);
// One frame into `frame`: its u32 length, that many bytes of body, then
// `trailer` bytes (a tag), all kept. Io::error with EMSGSIZE for a length
// over `max_body` (seen in the header, before anything is allocated for it),
// with EPROTO if more than one frame arrived, which a strict request-answer
// exchange never does. The buffer grows with what arrives, never ahead of it.
IoResult recv_frame(int fd, std::string& frame, size_t max_body, size_t trailer,
                    const Until& until);

}  // namespace dlaunch::comm::detail
