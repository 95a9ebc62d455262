#include "store/connection.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>

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

}  // namespace

std::string quote(std::string_view s) {
  constexpr size_t kShown = 80;
  std::string out = "\"";
  for (char c : s.substr(0, kShown)) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
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
  out += '"';
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
    : opts(std::move(options)), address(join_address(opts.host, opts.port)) {}

void Connection::bad_answer(const std::string& op) {
  fd_.reset();
  fail(ErrorKind::kEnvironment, op, "failed: malformed answer from the store");
}

void Connection::lost(const std::string& op, const IoResult& r, Clock::time_point since) {
  // The connection's state is unknown after a failed exchange: start afresh next call.
  fd_.reset();
  if (r.status == Io::timeout) {
    fail(ErrorKind::kEnvironment, op,
         "timed out after " + seconds(Clock::now() - since) + " with no answer from the store");
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

void Connection::ensure_connected() {
  if (!fd_) connect();
}

auto Connection::handshake(const Fd& s, Clock::time_point deadline)
    -> Result<Limits, HandshakeFailure> {
  auto retry = [](std::string message) {
    return failure(HandshakeFailure{true, ErrorKind::kEnvironment, std::move(message)});
  };
  auto fatal = [](ErrorKind kind, std::string message) {
    return failure(HandshakeFailure{false, kind, std::move(message)});
  };
  char greeting[kGreetingBytes];
  IoResult r = recv_exact(s.get(), greeting, sizeof greeting, deadline);
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
                       "are from different releases)");
    }
    return fatal(ErrorKind::kEnvironment,
                 "failed: the peer is not a dlaunch store (unexpected greeting)");
  }
  auto mac = auth_mac(opts.secret,
                      reinterpret_cast<const unsigned char*>(greeting) + kGreetingMagic.size());
  r = send_all(s.get(), {reinterpret_cast<const char*>(mac.data()), mac.size()}, deadline);
  char header[kFrameHeaderBytes];
  if (r.status == Io::ok) r = recv_exact(s.get(), header, sizeof header, deadline);
  if (r.status == Io::closed) {
    return fatal(ErrorKind::kUsage,
                 "failed: authentication rejected, the store closed the connection "
                 "(is DLAUNCH_STORE_SECRET this job's secret?)");
  }
  if (r.status != Io::ok) return retry("authentication unanswered: " + r.describe());
  std::string body(frame_length(header), '\0');
  if (body.size() != 1 + 3 * 8)
    return fatal(ErrorKind::kEnvironment, "failed: unexpected answer to authentication");
  r = recv_exact(s.get(), body.data(), body.size(), deadline);
  Reader rd(body);
  bool accepted = r.status == Io::ok && rd.u8() == static_cast<uint8_t>(Status::ok);
  Limits limits;
  limits.max_key = rd.u64();
  limits.max_value = rd.u64();
  limits.max_frame = rd.u64();
  if (!accepted || !rd.finish()) return retry("authentication unanswered: " + r.describe());
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
    if (!opts.unix_path.empty()) unix_socket = connect_unix(opts.unix_path, deadline);
    if (auto s =
            unix_socket ? std::move(unix_socket) : connect_tcp(opts.host, opts.port, deadline)) {
      auto accepted = handshake(*s, deadline);
      if (accepted) {
        max_key = accepted->max_key;
        max_value = accepted->max_value;
        max_frame = accepted->max_frame;
        fd_ = std::move(*s);
        return;
      }
      if (!accepted.error().retry) fail(accepted.error().kind, "connect", accepted.error().message);
      error = std::move(accepted).error().message;
    } else {
      error = std::move(s).error();
    }
    auto now = Clock::now();
    if (now >= deadline) break;
    // Jitter keeps thousands of workers from retrying against one store in lockstep.
    std::uniform_int_distribution<int64_t> pick(backoff.count() / 2, backoff.count());
    std::this_thread::sleep_for(std::min<Clock::duration>(milliseconds(pick(rng)), deadline - now));
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
  IoResult r = send_all(fd_.get(), frame, deadline);
  Answer a;
  if (r.status == Io::ok) r = recv_frame(fd_.get(), a.frame, deadline);
  if (r.status != Io::ok) lost(op, r, start);
  if (a.frame.empty()) bad_answer(op);
  a.status = static_cast<Status>(a.frame[0]);
  if (a.status == Status::error) {
    auto rd = a.reader();
    std::string message(rd.bytes());
    if (!rd.finish()) bad_answer(op);
    // The store refused a well-formed request (add() on a value that is not a
    // number, say): the request's fault, and the connection stays.
    fail(ErrorKind::kUsage, op, "failed: " + message);
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
  fail(ErrorKind::kEnvironment, op, what);
}

}  // namespace dlaunch::comm::detail
