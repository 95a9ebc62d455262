// Fuzzes the store server's request handling (comm/store/session.cpp over the
// wire format of comm/store/wire.h, dlaunch/codec.h underneath): framing, every operation's
// decoding, limits, parked waits and the table behind them.
//
// Two real Sessions run on an io_context, each against one end of a
// socketpair; the harness plays both clients on the other ends: each makes
// the handshake as a client with the secret does, sends its share of the
// input as the frames that follow (each complete frame with its right tag),
// closes its side and reads every answer. The server must not crash, leak or
// hang, and everything it sends must be well-formed frames (u32 length, status byte).
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "store/session.h"
#include "store/wire.h"

namespace asio = boost::asio;
namespace detail = dlaunch::comm::detail;

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "store_fuzz: %s\n", what);
  std::abort();
}

// Reads whatever the server has sent so far; returns the number of bytes read.
std::size_t drain(int fd, std::string& got) {
  std::size_t total = 0;
  char buf[64 << 10];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      got.append(buf, static_cast<std::size_t>(n));
      total += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return total;  // EAGAIN, EOF or an error: nothing more now
  }
}

// The greeting, then frames of u32 length + body whose first byte is a status.
void check_answers(std::string_view got) {
  if (got.size() < detail::kGreetingBytes ||
      got.substr(0, detail::kGreetingMagic.size()) != detail::kGreetingMagic) {
    broken("no greeting");
  }
  got.remove_prefix(detail::kGreetingBytes);
  if (got.size() < detail::kMacBytes) broken("no proof of the server's");
  got.remove_prefix(detail::kMacBytes);
  while (!got.empty()) {
    if (got.size() < detail::kFrameHeaderBytes) broken("truncated answer header");
    const std::uint32_t len = detail::frame_length(got.data());
    got.remove_prefix(detail::kFrameHeaderBytes);
    if (len == 0 || len + detail::kTagBytes > got.size()) broken("answer frame of a bad length");
    const auto status = static_cast<std::uint8_t>(got[0]);
    if (status > static_cast<std::uint8_t>(detail::Status::error)) broken("unknown answer status");
    got.remove_prefix(len + detail::kTagBytes);
  }
}

// A client's share of the input as the frames it sends: each complete frame
// (by the length in its header) gets the tag the server expects, so that
// the fuzzer reaches the request handling behind the tag check; a frame the
// share cuts short goes as it is.
std::string tagged_frames(std::string_view share, detail::FrameTagger& tagger) {
  std::string out;
  while (share.size() >= detail::kFrameHeaderBytes) {
    const std::size_t len = detail::frame_length(share.data());
    if (len > share.size() - detail::kFrameHeaderBytes) break;
    const std::string_view frame = share.substr(0, detail::kFrameHeaderBytes + len);
    out.append(frame);
    const detail::Tag tag = tagger.next(frame);
    out.append(reinterpret_cast<const char*>(tag.data()), tag.size());
    share.remove_prefix(frame.size());
  }
  out.append(share);
  return out;
}

// One client connection: the harness's end of a socketpair.
struct Client {
  int fd = -1;
  std::string out;  // its nonce, then its proof and its share of the input
  std::size_t sent = 0;
  bool shut = false;
  std::string got;  // everything the server sent

  // Writes what the socket takes; returns how much happened.
  std::size_t push() {
    std::size_t progress = 0;
    if (sent < out.size()) {
      const ssize_t n = ::write(fd, out.data() + sent, out.size() - sent);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        progress += static_cast<std::size_t>(n);
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        sent = out.size();  // the server hung up: the rest goes nowhere
      }
    }
    if (sent == out.size() && !shut) {
      ::shutdown(fd, SHUT_WR);
      shut = true;
      ++progress;
    }
    return progress;
  }
};

}  // namespace

// Input: one byte that says where to cut the rest, then the bytes of two
// clients, so that one can wake a request the other has parked.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  asio::io_context io;
  dlaunch::comm::StoreServerOptions opts;
  opts.secret = "fuzz-secret";
  // Small limits, so that inputs of a few KiB reach them.
  opts.max_key_bytes = 32;
  opts.max_value_bytes = 256;
  opts.max_frame_bytes = 1024;
  auto state = std::make_shared<detail::ServerState>(io, opts);

  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string_view rest = input.empty() ? input : input.substr(1);
  const std::size_t cut = input.empty() ? 0 : rest.size() * data[0] / 255;
  const std::string_view shares[] = {rest.substr(0, cut), rest.substr(cut)};

  Client clients[2];
  for (auto& c : clients) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) broken("socketpair failed");
    c.fd = sv[1];
    ::fcntl(c.fd, F_SETFL, ::fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    asio::generic::stream_protocol::socket socket(io);
    socket.assign(asio::generic::stream_protocol(AF_UNIX, 0), sv[0]);
    auto session =
        std::make_shared<detail::Session>(state, std::move(socket), "fuzz", std::nullopt);
    state->sessions.emplace(session.get(), session);
    session->start();
  }
  while (io.poll() > 0) {
  }
  // The handshake, as a client that knows the secret makes it.
  detail::Nonce client_nonce{};
  for (std::size_t i = 0; i < client_nonce.size(); ++i)
    client_nonce[i] = static_cast<unsigned char>(i);
  for (auto& c : clients) {
    drain(c.fd, c.got);
    if (c.got.size() < detail::kGreetingBytes) broken("no greeting");
    (void)::write(c.fd, client_nonce.data(), client_nonce.size());
  }
  while (io.poll() > 0) {
  }
  for (std::size_t i = 0; i < 2; ++i) {
    Client& c = clients[i];
    drain(c.fd, c.got);
    if (c.got.size() < detail::kGreetingBytes + detail::kMacBytes) broken("no proof");
    detail::Nonce server_nonce{};
    std::copy(c.got.begin() + detail::kGreetingMagic.size(), c.got.begin() + detail::kGreetingBytes,
              server_nonce.begin());
    const detail::Handshake h = detail::handshake_values(opts.secret, server_nonce, client_nonce);
    if (!detail::same_mac(
            h.server_proof.data(),
            reinterpret_cast<const unsigned char*>(c.got.data()) + detail::kGreetingBytes,
            detail::kMacBytes)) {
      broken("the server's proof is wrong");
    }
    detail::FrameTagger to_server(h.to_server);
    c.out.assign(reinterpret_cast<const char*>(h.client_proof.data()), h.client_proof.size());
    c.out.append(tagged_frames(shares[i], to_server));
  }

  for (;;) {
    std::size_t progress = 0;
    for (auto& c : clients) progress += c.push();
    progress += io.poll();
    for (auto& c : clients) progress += drain(c.fd, c.got);
    if (progress == 0) break;
  }

  // Quiet now: a session may still be parked on a wait. Close what is left,
  // as the server does on shutdown, and let every handler finish.
  std::vector<std::shared_ptr<detail::Session>> left;
  for (auto& [raw, s] : state->sessions) left.push_back(s);
  for (auto& s : left) s->close();
  left.clear();
  while (io.poll() > 0) {
  }
  for (auto& c : clients) {
    drain(c.fd, c.got);
    ::close(c.fd);
    check_answers(c.got);
  }
  if (!state->sessions.empty()) broken("a closed session is still listed");
  return 0;
}
