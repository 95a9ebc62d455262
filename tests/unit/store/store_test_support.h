// Helpers for the store tests: default options, a free port, and a raw socket
// client that speaks (or deliberately mis-speaks) the wire protocol.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

#include "comm/store.h"
#include "store/wire.h"

namespace store_test {

inline constexpr const char* kSecret = "test-secret";

inline dlaunch::comm::StoreServerOptions server_options() {
  dlaunch::comm::StoreServerOptions o;
  o.bind_address = "127.0.0.1";
  o.secret = kSecret;
  return o;
}

inline dlaunch::comm::StoreOptions client_options(uint16_t port) {
  dlaunch::comm::StoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.secret = kSecret;
  o.connect_timeout = std::chrono::seconds(10);
  o.timeout = std::chrono::seconds(30);
  return o;
}

inline sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A port nobody listens on right now (the kernel's pick, released again).
inline uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = loopback(0);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("free_port: bind failed");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

class RawClient {
 public:
  explicit RawClient(uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a = loopback(port);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      throw std::runtime_error("RawClient: connect failed");
    }
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  ~RawClient() { close(); }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  void send(const std::string& bytes) {
    // MSG_NOSIGNAL: the server may already have hung up, which is what some tests expect.
    (void)::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }

  // Exactly n bytes, or nullopt on EOF, error or timeout.
  std::optional<std::string> read(size_t n,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (out.size() < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        return std::nullopt;
      char buf[4096];
      ssize_t got = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0) return std::nullopt;
      out.append(buf, static_cast<size_t>(got));
    }
    return out;
  }

  // True when the server hangs up within `timeout` without sending a single byte.
  bool hung_up_silently(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char c;
    return ::recv(fd_, &c, 1, 0) <= 0;
  }

  // The server's greeting (protocol name and version, its nonce).
  std::string greeting() {
    auto g = read(dlaunch::comm::detail::kGreetingBytes);
    if (!g) throw std::runtime_error("RawClient: no greeting");
    std::copy(g->begin() + 8, g->end(), server_nonce_.begin());
    return *g;
  }

  // This client's nonce, then the server's proof (32 bytes), or nullopt.
  std::optional<std::string> send_nonce() {
    send(std::string(reinterpret_cast<const char*>(client_nonce_.data()), client_nonce_.size()));
    return read(dlaunch::comm::detail::kMacBytes);
  }

  // The handshake's values for this connection's nonces and `secret`.
  dlaunch::comm::detail::Handshake values(const std::string& secret) const {
    return dlaunch::comm::detail::handshake_values(secret, server_nonce_, client_nonce_);
  }

  // After greeting(): the nonce, the server's proof checked against
  // `secret`, then this client's proof computed with it.
  void answer(const std::string& secret) {
    auto proof = send_nonce();
    if (!proof) throw std::runtime_error("RawClient: no proof from the server");
    auto h = values(secret);
    if (std::string(reinterpret_cast<const char*>(h.server_proof.data()), h.server_proof.size()) !=
        *proof) {
      throw std::runtime_error("RawClient: the server's proof is wrong");
    }
    send(std::string(reinterpret_cast<const char*>(h.client_proof.data()), h.client_proof.size()));
    to_server_.emplace(h.to_server);
    to_client_.emplace(h.to_client);
  }

  // Greeting, both proofs, and the server's acceptance (with its limits).
  void authenticate(const std::string& secret = kSecret) {
    greeting();
    answer(secret);
    auto ok = read_frame();
    if (!ok || (*ok)[0] != 0) throw std::runtime_error("RawClient: not accepted");
  }

  // `frame` (header and body) with the tag this connection's next frame needs.
  std::string tagged(const std::string& frame) {
    auto tag = to_server_->next(frame);
    return frame + std::string(reinterpret_cast<const char*>(tag.data()), tag.size());
  }
  void send_frame(const std::string& frame) { send(tagged(frame)); }

  // One frame's body (status byte first), its tag checked, or nullopt.
  std::optional<std::string> read_frame(
      std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    auto header = read(4, timeout);
    if (!header) return std::nullopt;
    auto rest =
        read(dlaunch::comm::detail::frame_length(header->data()) + dlaunch::comm::detail::kTagBytes,
             timeout);
    if (!rest) return std::nullopt;
    const size_t body = rest->size() - dlaunch::comm::detail::kTagBytes;
    if (!to_client_ ||
        !to_client_->check(*header + rest->substr(0, body),
                           reinterpret_cast<const unsigned char*>(rest->data()) + body)) {
      throw std::runtime_error("RawClient: an answer failed its tag");
    }
    return rest->substr(0, body);
  }

 private:
  int fd_;
  dlaunch::comm::detail::Nonce server_nonce_{};
  dlaunch::comm::detail::Nonce client_nonce_ = dlaunch::comm::detail::fresh_nonce();
  std::optional<dlaunch::comm::detail::FrameTagger> to_server_;
  std::optional<dlaunch::comm::detail::FrameTagger> to_client_;
};

}  // namespace store_test
