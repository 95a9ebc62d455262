#include "store/session.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "store/peer_uid.h"

namespace dlaunch::comm::detail {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

constexpr size_t kReadChunk = 64 << 10;
// Responses queued beyond this stop request handling until the peer reads.
constexpr size_t kMaxQueuedBytes = 8 << 20;
// Larger idle read buffers are given back rather than kept per connection.
constexpr size_t kKeepBufferBytes = 1 << 20;
// Far enough to mean "no deadline" without overflowing steady_clock.
constexpr uint64_t kMaxWaitMs = uint64_t{365} * 24 * 3600 * 1000;

std::string status_frame(Status s) { return Writer(static_cast<uint8_t>(s)).finish(); }

}  // namespace

Session::Session(std::shared_ptr<ServerState> state, asio::generic::stream_protocol::socket socket,
                 std::string source, std::optional<uid_t> local_uid)
    : state_(std::move(state)),
      socket_(std::move(socket)),
      local_uid_(local_uid),
      auth_timer_(state_->io),
      wait_timer_(state_->io) {
  source_ = std::move(source);
}

Session::~Session() {
  if (waiting_) state_->table.cancel(*this);
}

void Session::start() {
  error_code ignored;
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
  // A process of this machine: the job's own ranks when it is this user's,
  // nothing of the job's when it is another user's.
  const auto& uid = local_uid_;
  if (uid && *uid != ::geteuid() && state_->opts.refuse_other_local_users) {
    ++state_->refused_other_users;
    return close();
  }
  // Room for this one among those still in the challenge: the oldest from
  // the same remote address first (this user's local processes share an
  // address, and a burst of them is the job starting), then the oldest of all.
  auto& from = state_->unauthenticated_from[source_];
  if (!uid && from >= state_->opts.max_unauthenticated_per_source) {
    for (Session* s : state_->unauthenticated) {
      if (s->source_ == source_) {
        s->close();
        break;
      }
    }
  }
  if (state_->unauthenticated.size() >= state_->opts.max_unauthenticated &&
      !state_->unauthenticated.empty()) {
    state_->unauthenticated.front()->close();
  }
  unauthenticated_it_ = state_->unauthenticated.insert(state_->unauthenticated.end(), this);
  in_unauthenticated_ = true;
  ++state_->unauthenticated_from[source_];
  if (!random_bytes(nonce_.data(), nonce_.size())) return close();
  std::string greeting(kGreetingMagic);
  greeting.append(reinterpret_cast<const char*>(nonce_.data()), nonce_.size());
  send_raw(std::move(greeting));

  auto self = shared_from_this();
  auth_timer_.expires_after(state_->opts.auth_timeout);
  auth_timer_.async_wait([self](const error_code& ec) {
    if (!ec && !self->authed_) self->close();
  });
  asio::async_read(socket_, asio::buffer(client_nonce_),
                   [self](const error_code& ec, size_t) { self->on_client_nonce(ec); });
}

// The client's nonce: this side proves the secret first (docs/store.md), so
// that a client learns nothing false and gives nothing away to an impostor.
void Session::on_client_nonce(const error_code& ec) {
  if (ec || closed_) return close();
  Handshake h = handshake_values(state_->opts.secret, nonce_, client_nonce_);
  client_proof_ = h.client_proof;
  to_server_.emplace(h.to_server);
  to_client_.emplace(h.to_client);
  send_raw(
      std::string(reinterpret_cast<const char*>(h.server_proof.data()), h.server_proof.size()));
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(answer_),
                   [self](const error_code& ec2, size_t) { self->on_answer(ec2); });
}

void Session::on_answer(const error_code& ec) {
  if (ec || closed_) return close();
  if (!same_mac(client_proof_.data(), answer_.data(), answer_.size())) return close();
  authed_ = true;
  leave_unauthenticated();
  auth_timer_.cancel();
  // The limits let clients refuse oversized requests themselves, keeping the connection.
  send(Writer(static_cast<uint8_t>(Status::ok))
           .u64(state_->opts.max_key_bytes)
           .u64(state_->opts.max_value_bytes)
           .u64(state_->opts.max_frame_bytes)
           .finish());
  pump();
}

void Session::leave_unauthenticated() {
  if (!in_unauthenticated_) return;
  in_unauthenticated_ = false;
  state_->unauthenticated.erase(unauthenticated_it_);
  auto it = state_->unauthenticated_from.find(source_);
  if (it != state_->unauthenticated_from.end() && --it->second == 0) {
    state_->unauthenticated_from.erase(it);
  }
}

void Session::close() {
  if (closed_) return;
  closed_ = true;
  if (!authed_) leave_unauthenticated();
  auto self = shared_from_this();  // the sessions map may hold the last reference
  if (waiting_) {
    state_->table.cancel(*this);
    waiting_ = false;
  }
  // What this connection set while connected goes with it (a key set anew
  // since, by anyone, stays).
  for (const auto& [key, value] : owned_) {
    const std::string* now = state_->table.find(key);
    if (now != nullptr && *now == value) state_->table.erase(key);
  }
  owned_.clear();
  error_code ignored;
  socket_.close(ignored);
  auth_timer_.cancel();
  wait_timer_.cancel();
  state_->sessions.erase(this);
}

void Session::pump() {
  if (closed_ || !authed_) return;
  while (!waiting_ && wq_bytes_ < kMaxQueuedBytes && rend_ - rpos_ >= kFrameHeaderBytes) {
    uint32_t len = frame_length(rbuf_.data() + rpos_);
    if (len == 0 || len > state_->opts.max_frame_bytes) return close();
    if (rend_ - rpos_ < kFrameHeaderBytes + size_t{len} + kTagBytes) break;
    const std::string_view frame(rbuf_.data() + rpos_, kFrameHeaderBytes + len);
    const auto* tag = reinterpret_cast<const unsigned char*>(frame.data() + frame.size());
    rpos_ += frame.size() + kTagBytes;
    // Not from the client that proved the secret on this connection (a
    // frame injected, replayed or reordered): nothing of it is looked at.
    if (!to_server_->check(frame, tag)) return close();
    if (!handle(frame.substr(kFrameHeaderBytes))) return close();
    if (closed_) return;
  }
  read_more();
}

void Session::read_more() {
  if (reading_ || closed_) return;
  size_t avail = rend_ - rpos_;
  size_t need = kFrameHeaderBytes;
  if (avail >= kFrameHeaderBytes) {
    uint32_t len = frame_length(rbuf_.data() + rpos_);
    // Checked from the header alone, before a byte of the body is buffered.
    if (len == 0 || len > state_->opts.max_frame_bytes) return close();
    need += len + kTagBytes;
    if (avail >= need) return;  // a whole frame is already waiting its turn
  }
  if (rpos_ > 0) {
    std::memmove(rbuf_.data(), rbuf_.data() + rpos_, avail);
    rpos_ = 0;
    rend_ = avail;
  }
  if (avail == 0 && rbuf_.size() > kKeepBufferBytes) std::vector<char>().swap(rbuf_);
  size_t want = std::max(need, avail + kReadChunk);
  if (rbuf_.size() < want) rbuf_.resize(want);

  reading_ = true;
  auto self = shared_from_this();
  socket_.async_read_some(asio::buffer(rbuf_.data() + rend_, rbuf_.size() - rend_),
                          [self](const error_code& ec, size_t n) {
                            self->reading_ = false;
                            if (ec) return self->close();
                            self->rend_ += n;
                            self->pump();
                          });
}

bool Session::handle(std::string_view body) {
  Reader r(body);
  auto op = static_cast<Op>(r.u8());
  Table& table = state_->table;
  switch (op) {
    case Op::set: {
      auto key = r.bytes();
      auto value = r.bytes();
      if (!r.finish() || !key_ok(key) || !value_ok(value)) return false;
      table.set(key, value);
      send(status_frame(Status::ok));
      return true;
    }
    case Op::set_owned: {
      auto key = r.bytes();
      auto value = r.bytes();
      if (!r.finish() || !key_ok(key) || !value_ok(value)) return false;
      table.set(key, value);
      owned_.insert_or_assign(std::string(key), std::string(value));
      send(status_frame(Status::ok));
      return true;
    }
    case Op::get: {
      uint64_t timeout = r.u64();
      auto key = r.bytes();
      if (!r.finish() || !key_ok(key)) return false;
      return begin_wait(Reply::value, {std::string(key)}, timeout);
    }
    case Op::wait:
    case Op::multi_get:
    case Op::check: {
      uint64_t timeout = op == Op::check ? 0 : r.u64();
      std::vector<std::string> wanted(r.count(kMinStringBytes));
      for (auto& k : wanted) {
        k = r.bytes();
        if (!key_ok(k)) return false;
      }
      if (!r.finish()) return false;
      if (op == Op::check) {
        bool all = table.missing(wanted).empty();
        send(Writer(static_cast<uint8_t>(Status::ok)).u8(all ? 1 : 0).finish());
        return true;
      }
      return begin_wait(op == Op::wait ? Reply::none : Reply::values, std::move(wanted), timeout);
    }
    case Op::add: {
      auto key = r.bytes();
      int64_t delta = r.i64();
      if (!r.finish() || !key_ok(key)) return false;
      if (auto v = table.add(key, delta)) {
        send(Writer(static_cast<uint8_t>(Status::ok)).i64(*v).finish());
      } else {
        send(Writer(static_cast<uint8_t>(Status::error)).str(v.error()).finish());
      }
      return true;
    }
    case Op::compare_set: {
      auto key = r.bytes();
      auto expected = r.bytes();
      auto desired = r.bytes();
      if (!r.finish() || !key_ok(key) || !value_ok(expected) || !value_ok(desired)) return false;
      send(Writer(static_cast<uint8_t>(Status::ok))
               .str(table.compare_set(key, expected, desired))
               .finish());
      return true;
    }
    case Op::erase: {
      auto key = r.bytes();
      if (!r.finish() || !key_ok(key)) return false;
      send(Writer(static_cast<uint8_t>(Status::ok)).u8(table.erase(key) ? 1 : 0).finish());
      return true;
    }
    case Op::num_keys: {
      if (!r.finish()) return false;
      send(Writer(static_cast<uint8_t>(Status::ok)).i64(int64_t(table.size())).finish());
      return true;
    }
    case Op::multi_set: {
      uint32_t n = r.count(kMinStringBytes);
      std::vector<std::pair<std::string_view, std::string_view>> kv(n);
      for (auto& [k, v] : kv) {
        k = r.bytes();
        v = r.bytes();
        if (!key_ok(k) || !value_ok(v)) return false;
      }
      if (!r.finish()) return false;
      for (const auto& [k, v] : kv) table.set(k, v);
      send(status_frame(Status::ok));
      return true;
    }
  }
  return false;  // unknown operation
}

bool Session::begin_wait(Reply reply, std::vector<std::string> wanted, uint64_t timeout_ms) {
  keys = std::move(wanted);
  reply_ = reply;
  if (state_->table.park(*this)) {
    answer_ready();
    return true;
  }
  if (timeout_ms == 0) {
    state_->table.cancel(*this);
    answer_timeout();
    return true;
  }
  waiting_ = true;
  uint64_t id = ++wait_id_;
  wait_timer_.expires_after(std::chrono::milliseconds(std::min(timeout_ms, kMaxWaitMs)));
  auto self = shared_from_this();
  wait_timer_.async_wait([self, id](const error_code& ec) {
    if (ec || self->closed_ || !self->waiting_ || id != self->wait_id_) return;
    self->state_->table.cancel(*self);
    self->waiting_ = false;
    self->answer_timeout();
    self->pump();
  });
  return true;
}

void Session::on_ready() {
  if (!waiting_) return;
  waiting_ = false;
  wait_timer_.cancel();
  answer_ready();
  // Deferred: we are inside another request's update of the table.
  asio::post(state_->io, [self = shared_from_this()] { self->pump(); });
}

void Session::answer_ready() {
  const Table& table = state_->table;
  Writer w(static_cast<uint8_t>(Status::ok));
  if (reply_ == Reply::value) {
    w.str(*table.find(keys[0]));
  } else if (reply_ == Reply::values) {
    for (const auto& k : keys) w.str(*table.find(k));
  }
  if (w.body_size() > std::numeric_limits<uint32_t>::max()) {
    send(Writer(static_cast<uint8_t>(Status::error))
             .str("the values together exceed the 4 GiB frame limit")
             .finish());
    return;
  }
  send(w.finish());
}

void Session::answer_timeout() {
  auto missing = state_->table.missing(keys);
  Writer w(static_cast<uint8_t>(Status::timeout));
  w.u32(static_cast<uint32_t>(missing.size()));
  for (const auto& k : missing) w.str(k);
  send(w.finish());
}

void Session::send(std::string frame) {
  if (closed_) return;
  const Tag tag = to_client_->next(frame);
  frame.append(reinterpret_cast<const char*>(tag.data()), tag.size());
  send_raw(std::move(frame));
}

void Session::send_raw(std::string bytes) {
  if (closed_) return;
  wq_bytes_ += bytes.size();
  wq_.push_back(std::move(bytes));
  flush();
}

void Session::flush() {
  if (writing_ > 0 || wq_.empty() || closed_) return;
  std::vector<asio::const_buffer> bufs;
  for (const auto& f : wq_) bufs.push_back(asio::buffer(f));
  writing_ = wq_.size();
  asio::async_write(socket_, bufs, [self = shared_from_this()](const error_code& ec, size_t) {
    if (ec) return self->close();
    for (; self->writing_ > 0; --self->writing_) {
      self->wq_bytes_ -= self->wq_.front().size();
      self->wq_.pop_front();
    }
    self->flush();
    self->pump();
  });
}

}  // namespace dlaunch::comm::detail
