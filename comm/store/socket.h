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

enum class Io { ok, timeout, closed, error };

struct IoResult {
  Io status = Io::ok;
  int err = 0;  // errno for Io::error
  std::string describe() const;
};

// Tries every address of host once, each until deadline at most: the
// connected socket, or why none could be had (the last address's reason).
Result<Fd> connect_tcp(const std::string& host, uint16_t port, Clock::time_point deadline);
// A Unix socket at `path`, or why not.
Result<Fd> connect_unix(const std::string& path, Clock::time_point deadline);
IoResult send_all(int fd, std::string_view data, Clock::time_point deadline);
IoResult recv_exact(int fd, char* buf, size_t n, Clock::time_point deadline);
// One frame into `frame`: its u32 length, that many bytes of body, then
// `trailer` bytes (a tag), all kept. Io::error with EMSGSIZE for a length
// over `max_body` (seen in the header, before anything is allocated for it),
// with EPROTO if more than one frame arrived, which a strict request-answer
// exchange never does. The buffer grows with what arrives, never ahead of it.
IoResult recv_frame(int fd, std::string& frame, size_t max_body, size_t trailer,
                    Clock::time_point deadline);

}  // namespace dlaunch::comm::detail
