#include "bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "dlaunch/error.h"

namespace dlaunch::agent {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr std::size_t kChunk = 256 * 1024;
// A connection that has not shown the token by then is dropped.
constexpr std::chrono::seconds kTokenWait{5};

bool same(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

void drop(tcp::socket& s) {
  boost::system::error_code ignored;
  s.set_option(asio::socket_base::linger(true, 0), ignored);
  s.close(ignored);
}

}  // namespace

// ---------------------------------------------------------------------------

struct BandwidthSink::State : std::enable_shared_from_this<State> {
  State(asio::io_context& context, Clock& loop_clock, std::string secret)
      : clock(loop_clock), acceptor(context), token(std::move(secret)) {}
  Clock& clock;
  tcp::acceptor acceptor;
  std::string token;

  struct Conn {
    explicit Conn(tcp::socket s) : socket(std::move(s)) {}
    tcp::socket socket;
    std::string got;
    std::vector<char> buf;
    std::unique_ptr<Timer> timer;
    bool proved = false;
  };

  void accept_next() {
    acceptor.async_accept([self = shared_from_this()](boost::system::error_code ec, tcp::socket s) {
      if (ec || !self->acceptor.is_open()) return;
      auto c = std::make_shared<Conn>(std::move(s));
      c->got.resize(self->token.size());
      c->timer = self->clock.make_timer();
      self->clock.after(*c->timer, kTokenWait, [c] {
        if (!c->proved) drop(c->socket);
      });
      asio::async_read(c->socket, asio::buffer(c->got),
                       [self, c](boost::system::error_code rec, std::size_t) {
                         if (rec || !same(c->got, self->token)) {
                           drop(c->socket);
                           c->timer->cancel();
                           return;
                         }
                         c->proved = true;
                         c->timer->cancel();
                         c->buf.resize(kChunk);
                         drain(c);
                       });
      self->accept_next();
    });
  }

  // Reads and drops until the sender's end of stream, then acknowledges.
  static void drain(const std::shared_ptr<Conn>& c) {
    c->socket.async_read_some(asio::buffer(c->buf),
                              [c](boost::system::error_code ec, std::size_t /*n*/) {
                                if (!ec) {
                                  drain(c);
                                  return;
                                }
                                if (ec != asio::error::eof) {
                                  drop(c->socket);
                                  return;
                                }
                                static const char kAck = 'k';
                                asio::async_write(c->socket, asio::buffer(&kAck, 1),
                                                  [c](boost::system::error_code, std::size_t) {
                                                    boost::system::error_code ignored;
                                                    c->socket.close(ignored);
                                                  });
                              });
  }
};

BandwidthSink::BandwidthSink(asio::io_context& io, Clock& clock, std::string token)
    : state_(std::make_shared<State>(io, clock, std::move(token))) {
  boost::system::error_code ec;
  auto& a = state_->acceptor;
  a.open(tcp::v6(), ec);
  if (!ec) a.set_option(asio::ip::v6_only(false), ec);
  if (!ec) a.bind(tcp::endpoint(tcp::v6(), 0), ec);
  if (ec) {  // no IPv6 here: IPv4 alone
    boost::system::error_code ignored;
    a.close(ignored);
    ec.clear();
    a.open(tcp::v4(), ec);
    if (!ec) a.bind(tcp::endpoint(tcp::v4(), 0), ec);
  }
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw Error(ErrorKind::kEnvironment, "cannot listen for the network test: " + ec.message());
  }
  port_ = a.local_endpoint().port();
  state_->accept_next();
}

BandwidthSink::~BandwidthSink() { close(); }

void BandwidthSink::close() {
  boost::system::error_code ignored;
  if (state_->acceptor.is_open()) state_->acceptor.close(ignored);
}

// ---------------------------------------------------------------------------

struct BandwidthSender::State : std::enable_shared_from_this<State> {
  State(asio::io_context& context, Clock& loop_clock, Done on_done)
      : socket(context),
        clock(loop_clock),
        timer(loop_clock.make_timer()),
        done(std::move(on_done)) {}
  tcp::socket socket;
  Clock& clock;
  std::unique_ptr<Timer> timer;
  Done done;
  proto::NetSent result;
  std::vector<char> chunk = std::vector<char>(kChunk, 'd');
  std::string token;
  SteadyTime start{};
  SteadyTime stop_sending{};
  char ack = 0;
  bool finished = false;

  void finish(std::string error) {
    if (finished) return;
    finished = true;
    timer->cancel();
    result.error = std::move(error);
    if (result.error.empty()) {
      result.micros = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(clock.now() - start).count());
    }
    boost::system::error_code ignored;
    socket.close(ignored);
    if (done) done(std::move(result));
  }

  void send_more() {
    if (clock.now() >= stop_sending) {
      boost::system::error_code ec;
      socket.shutdown(tcp::socket::shutdown_send, ec);
      if (ec) {
        finish("shutdown: " + ec.message());
        return;
      }
      asio::async_read(socket, asio::buffer(&ack, 1),
                       [self = shared_from_this()](boost::system::error_code rec, std::size_t) {
                         if (rec == asio::error::operation_aborted) return;
                         self->finish(rec ? "no acknowledgement: " + rec.message() : "");
                       });
      return;
    }
    asio::async_write(socket, asio::buffer(chunk),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                        if (ec == asio::error::operation_aborted) return;
                        if (ec) {
                          self->finish("send: " + ec.message());
                          return;
                        }
                        self->result.bytes += n;
                        self->send_more();
                      });
  }
};

BandwidthSender::BandwidthSender(asio::io_context& io, Clock& clock, const proto::NetSend& m,
                                 Done done)
    : state_(std::make_shared<State>(io, clock, std::move(done))) {
  auto& st = *state_;
  st.result.round = m.round;
  st.token = m.token;
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(m.address, ec);
  if (ec) {
    asio::post(io, [s = state_, a = m.address] { s->finish("'" + a + "' is not an IP address"); });
    return;
  }
  const auto timeout = std::chrono::milliseconds(m.timeout_ms);
  const auto duration = std::chrono::milliseconds(m.duration_ms);
  clock.after(*st.timer, timeout, [weak = std::weak_ptr<State>(state_), timeout] {
    if (auto s = weak.lock()) {
      s->finish("timed out after " + std::to_string(timeout.count() / 1000) + " s");
    }
  });
  st.socket.async_connect(
      tcp::endpoint(address, m.port), [s = state_, duration](boost::system::error_code cec) {
        if (cec == asio::error::operation_aborted || s->finished) return;
        if (cec) {
          s->finish("connect: " + cec.message());
          return;
        }
        s->start = s->clock.now();
        s->stop_sending = s->start + duration;
        asio::async_write(s->socket, asio::buffer(s->token),
                          [s](boost::system::error_code wec, std::size_t) {
                            if (wec == asio::error::operation_aborted || s->finished) return;
                            if (wec) {
                              s->finish("send: " + wec.message());
                              return;
                            }
                            s->send_more();
                          });
      });
}

BandwidthSender::~BandwidthSender() {
  state_->done = nullptr;
  state_->finish("cancelled");
}

}  // namespace dlaunch::agent
