#include "store/connection.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "store/peer_uid.h"

namespace dlaunch::comm::detail {

using std::chrono::milliseconds;

namespace {

// The server answers expired waits itself; this margin only catches a wedged server.
constexpr auto kAnswerGrace = std::chrono::seconds(5);
constexpr milliseconds kMaxWait{int64_t{365} * 24 * 3600 * 1000};
constexpr milliseconds kFirstBackoff{50};
constexpr milliseconds kMaxBackoff{2000};

std::string join_address(const std::string& host, uint16_t port) {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// Bytes from the wire shown in a message: quotes and backslashes escaped
// (when `quotes`), control bytes and non-ASCII as \xNN.
void escape_into(std::string& out, std::string_view s, bool quotes) {
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (quotes && (c == '"' || c == '\\')) {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u >= 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    } else {
      out += c;
    }
  }
}

}  // namespace

std::string quote(std::string_view s) {
  constexpr size_t kShown = 80;
  std::string out = "\"";
  escape_into(out, s.substr(0, kShown), true);
  out += '"';
  if (s.size() > kShown) out += "...";
  return out;
}

std::string printable(std::string_view s) {
  constexpr size_t kShown = 1024;
  std::string out;
  escape_into(out, s.substr(0, kShown), false);
  if (s.size() > kShown) out += "...";
  return out;
}

std::string quote_list(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 4;
  std::string out = "[";
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) out += (i ? ", " : "") + quote(keys[i]);
  if (keys.size() > kShown) out += ", ... " + std::to_string(keys.size()) + " keys";
  return out + "]";
}

std::string seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

milliseconds clamp_wait(milliseconds t) { return std::clamp(t, milliseconds(0), kMaxWait); }

Connection::Connection(StoreOptions options)
    : opts(std::move(options)),
      address(join_address(opts.host, opts.port)),
      wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (!wake_) {
    fail(ErrorKind::kEnvironment, "connect",
         std::string("failed: eventfd: ") + std::strerror(errno));
  }
}

void Connection::interrupt() {
  const std::uint64_t one = 1;
  // Only EAGAIN can fail it (a counter at its maximum): readable still.
  (void)!::write(wake_.get(), &one, sizeof one);
}

void Connection::close() {
  closed_ = true;  // before the wake: a call that starts after reads it
  interrupt();
}

bool Connection::woken() const {
  pollfd p{wake_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

void Connection::bad_answer(const std::string& op) {
  fd_.reset();
  fail(ErrorKind::kEnvironment, op, "failed: malformed answer from the store");
}

void Connection::lost(const std::string& op, const IoResult& r, Clock::time_point since) {
  // The connection's state is unknown after a failed exchange: start afresh next call.
  fd_.reset();
  if (r.status == Io::interrupted) fail(ErrorKind::kEnvironment, op, "interrupted");
  if (r.status == Io::timeout) {
    fail(ErrorKind::kEnvironment, op,
         "timed out after " + seconds(Clock::now() - since) + " with no answer from the store",
         StoreError::Cause::kNoAnswer);
  }
  fail(ErrorKind::kEnvironment, op, "failed: connection lost: " + r.describe());
}

void Connection::limit(const std::string& op, const char* what, size_t size, uint64_t max) const {
  if (size > max) {
    fail(ErrorKind::kUsage, op,
         std::string("failed: the ") + what + " is " + std::to_string(size) +
             " bytes, over the store's limit of " + std::to_string(max));
  }
}

void Connection::ensure_connected(const std::string& op) {
  std::uint64_t pending = 0;
  (void)!::read(wake_.get(), &pending, sizeof pending);  // an interrupt between calls
  if (closed_) fail(ErrorKind::kEnvironment, op, "failed: this client was closed");
  if (!fd_) connect();
}

auto Connection::handshake(const Fd& s, Clock::time_point deadline)
    -> Result<Limits, HandshakeFailure> {
  using Cause = StoreError::Cause;
  auto retry = [](std::string message) {
    return failure(HandshakeFailure{true, ErrorKind::kEnvironment, std::move(message)});
  };
  auto fatal = [&s](ErrorKind kind, std::string message, Cause cause) {
    // Who answers there, where this machine can tell: the impostor by name.
    const std::string holder = describe_local_peer(s.get());
    if (!holder.empty()) message += " (" + holder + ")";
    return failure(HandshakeFailure{false, kind, std::move(message), cause});
  };
  if (opts.refuse_other_local_users) {
    const auto peer = local_peer(s.get());
    if (peer && peer->uid != ::geteuid() && peer->uid != 0) {
      return fatal(ErrorKind::kEnvironment,
                   "failed: the store at that address belongs to another user of this machine, "
                   "not to this job",
                   Cause::kOtherUser);
    }
  }
  char greeting[kGreetingBytes];
  IoResult r = recv_exact(s.get(), greeting, sizeof greeting, until(deadline));
  if (r.status != Io::ok) return retry("no greeting from the store: " + r.describe());
  const std::string_view magic(greeting, kGreetingMagic.size());
  if (magic != kGreetingMagic) {
    if (magic.substr(0, kGreetingPrefix.size()) == kGreetingPrefix) {
      // A dlaunch store of another release: the installations do not match.
      return fatal(ErrorKind::kUsage,
                   "failed: the store speaks protocol version " +
                       quote(magic.substr(kGreetingPrefix.size())) + ", this client version " +
                       std::to_string(kProtocolVersion) +
                       " (this program's comm library and the dlaunch that hosts the store "
                       "are from different releases)",
                   Cause::kOtherVersion);
    }
    return fatal(ErrorKind::kEnvironment,
                 "failed: the peer is not a dlaunch store (unexpected greeting)",
                 Cause::kNotAStore);
  }
  Nonce server_nonce{};
  std::copy(greeting + kGreetingMagic.size(), greeting + kGreetingBytes, server_nonce.begin());
  const Nonce client_nonce = fresh_nonce();
  r = send_all(s.get(), {reinterpret_cast<const char*>(client_nonce.data()), client_nonce.size()},
               until(deadline));
  // The server proves the secret first: nothing of ours, and nothing it
  // says, counts before that.
  Mac proof{};
  if (r.status == Io::ok)
    r = recv_exact(s.get(), reinterpret_cast<char*>(proof.data()), proof.size(), until(deadline));
  if (r.status != Io::ok) return retry("no proof from the store: " + r.describe());
  Handshake h = handshake_values(opts.secret, server_nonce, client_nonce);
  if (!same_mac(proof.data(), h.server_proof.data(), proof.size())) {
    return fatal(ErrorKind::kUsage,
                 "failed: the peer could not prove that it knows the job's secret: a store "
                 "given another secret (is DLAUNCH_STORE_SECRET this job's?), or something "
                 "else holding that address; it got nothing but a nonce",
                 Cause::kPeerUnproven);
  }
  r = send_all(s.get(),
               {reinterpret_cast<const char*>(h.client_proof.data()), h.client_proof.size()},
               until(deadline));
  std::string frame;
  if (r.status == Io::ok)
    r = recv_frame(s.get(), frame, kMaxHandshakeFrame, kTagBytes, until(deadline));
  if (r.status != Io::ok) return retry("authentication unanswered: " + r.describe());
  FrameTagger to_server(h.to_server);
  FrameTagger to_client(h.to_client);
  const std::string_view tagged = std::string_view(frame).substr(0, frame.size() - kTagBytes);
  if (!to_client.check(tagged,
                       reinterpret_cast<const unsigned char*>(frame.data()) + tagged.size())) {
    return retry("the store's acceptance failed its tag");
  }
  Reader rd(tagged.substr(kFrameHeaderBytes));
  const bool accepted = rd.u8() == static_cast<uint8_t>(Status::ok);
  Limits limits;
  limits.max_key = rd.u64();
  limits.max_value = rd.u64();
  limits.max_frame = rd.u64();
  if (!accepted || !rd.finish()) return retry("unexpected answer to authentication");
  to_server_.emplace(to_server);
  to_client_.emplace(to_client);
  return limits;
}

void Connection::connect() {
  auto start = Clock::now();
  auto deadline = start + clamp_wait(opts.connect_timeout);
  std::mt19937_64 rng(std::random_device{}());
  milliseconds backoff = kFirstBackoff;
  int attempts = 0;
  std::string error;  // why the last attempt failed
  for (;;) {
    ++attempts;
    // The Unix socket first (a process on the store's machine), else TCP.
    Result<Fd> unix_socket = failure(std::string());
    if (!opts.unix_path.empty()) unix_socket = connect_unix(opts.unix_path, until(deadline));
    if (auto s = unix_socket ? std::move(unix_socket)
                             : connect_tcp(opts.host, opts.port, until(deadline))) {
      auto accepted = handshake(*s, deadline);
      if (accepted) {
        max_key = accepted->max_key;
        max_value = accepted->max_value;
        max_frame = accepted->max_frame;
        fd_ = std::move(*s);
        return;
      }
      if (!accepted.error().retry) {
        fail(accepted.error().kind, "connect", accepted.error().message, accepted.error().cause);
      }
      error = std::move(accepted).error().message;
    } else {
      error = std::move(s).error();
    }
    if (woken()) fail(ErrorKind::kEnvironment, "connect", "interrupted");
    auto now = Clock::now();
    if (now >= deadline) break;
    // Jitter keeps thousands of workers from retrying against one store in lockstep.
    std::uniform_int_distribution<int64_t> pick(backoff.count() / 2, backoff.count());
    const auto wake = std::min<Clock::time_point>(now + milliseconds(pick(rng)), deadline);
    if (pause(until(wake)).status == Io::interrupted) {
      fail(ErrorKind::kEnvironment, "connect", "interrupted");
    }
    backoff = std::min(backoff * 2, kMaxBackoff);
    if (Clock::now() >= deadline) break;
  }
  fail(ErrorKind::kEnvironment, "connect",
       "failed after " + std::to_string(attempts) + " attempts in " +
           seconds(Clock::now() - start) + ": " + error);
}

Answer Connection::call(const std::string& op, const std::string& frame,
                        Clock::time_point deadline) {
  limit(op, "request", frame.size() - kFrameHeaderBytes, max_frame);
  auto start = Clock::now();
  const Tag tag = to_server_->next(frame);
  IoResult r = send_all(fd_.get(), frame, until(deadline));
  if (r.status == Io::ok)
    r = send_all(fd_.get(), {reinterpret_cast<const char*>(tag.data()), tag.size()},
                 until(deadline));
  Answer a;
  if (r.status == Io::ok)
    r = recv_frame(fd_.get(), a.frame, opts.max_answer_bytes, kTagBytes, until(deadline));
  if (r.status == Io::error && r.err == EMSGSIZE) {
    fd_.reset();
    fail(ErrorKind::kEnvironment, op,
         "failed: the store announced an answer of " +
             std::to_string(frame_length(a.frame.data())) + " bytes, over this client's limit of " +
             std::to_string(opts.max_answer_bytes) + " (StoreOptions::max_answer_bytes)");
  }
  if (r.status != Io::ok) lost(op, r, start);
  const std::string_view tagged = std::string_view(a.frame).substr(0, a.frame.size() - kTagBytes);
  if (!to_client_->check(tagged,
                         reinterpret_cast<const unsigned char*>(a.frame.data()) + tagged.size())) {
    fd_.reset();
    fail(ErrorKind::kEnvironment, op,
         "failed: an answer failed its tag (not from the store this connection authenticated)");
  }
  if (a.body().empty()) bad_answer(op);
  a.status = static_cast<Status>(a.body()[0]);
  if (a.status == Status::error) {
    auto rd = a.reader();
    std::string message(rd.bytes());
    if (!rd.finish()) bad_answer(op);
    // The store refused a well-formed request (add() on a value that is not a
    // number, say): the request's fault, and the connection stays.
    fail(ErrorKind::kUsage, op, "failed: " + printable(message));
  }
  if (a.status != Status::ok && a.status != Status::timeout) bad_answer(op);
  return a;
}

Answer Connection::await(const std::string& op, Op code, const std::vector<std::string>& keys,
                         milliseconds timeout) {
  timeout = clamp_wait(timeout);
  Writer w(static_cast<uint8_t>(code));
  w.u64(static_cast<uint64_t>(timeout.count()));
  if (code != Op::get) w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    limit(op, "key", k.size(), max_key);
    w.str(k);
  }
  return call(op, w.finish(), Clock::now() + timeout + kAnswerGrace);
}

void Connection::timed_out(const std::string& op, const Answer& a, milliseconds timeout,
                           size_t asked) {
  auto rd = a.reader();
  std::vector<std::string> missing(rd.count(kMinStringBytes));
  for (auto& k : missing) k = rd.bytes();
  if (!rd.finish()) bad_answer(op);
  std::string what = "timed out after " + seconds(timeout);
  if (asked > 1) what += "; still missing: " + quote_list(missing);
  fail(ErrorKind::kEnvironment, op, what, StoreError::Cause::kTimedOut);
}

}  // namespace dlaunch::comm::detail
