// Server side of the store: the state shared by the acceptor and every
// connection (ServerState), and one authenticated connection (Session).
// Everything here runs on the server's io_context thread only.
#pragma once

#include <array>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include "comm/store.h"
#include "store/table.h"
#include "store/wire.h"

namespace dlaunch::comm::detail {

class Session;

struct ServerState {
  ServerState(boost::asio::io_context& io_context, StoreServerOptions options)
      : io(io_context),
        opts(std::move(options)),
        acceptor(io_context),
        unix_acceptor(io_context),
        accept_retry(io_context) {}

  boost::asio::io_context& io;
  StoreServerOptions opts;
  boost::asio::ip::tcp::acceptor acceptor;
  // More TCP ports of the same store (StoreServer::listen_also), each
  // closed on its own or with the store.
  std::vector<std::unique_ptr<boost::asio::ip::tcp::acceptor>> more_acceptors;
  // Processes of this user on this machine may use a Unix socket in a
  // private folder instead (opts.unix_path): other users cannot reach it,
  // so a flood of theirs at the TCP port does not queue in front of them.
  boost::asio::local::stream_protocol::acceptor unix_acceptor;
  boost::asio::steady_timer accept_retry;
  Table table;
  // Owning: a session leaves this map when it closes (and so breaks the cycle
  // session -> state -> session).
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions;
  // Sessions still in the challenge, oldest first, and how many per source.
  std::list<Session*> unauthenticated;
  std::unordered_map<std::string, size_t> unauthenticated_from;
  size_t refused_other_users = 0;  // connections of other local users closed at once
  bool closed = false;
};

class Session final : public std::enable_shared_from_this<Session>, private Waiter {
 public:
  // `source`: the peer's address, "unix" on the Unix socket; `local_uid`:
  // the peer's uid when it is a process of this machine.
  Session(std::shared_ptr<ServerState> state, boost::asio::generic::stream_protocol::socket socket,
          std::string source, std::optional<uid_t> local_uid);
  ~Session() override;
  void start();  // sends the challenge
  void close();
  const std::string& source() const { return source_; }

 private:
  enum class Reply : uint8_t { none, value, values };

  void on_client_nonce(const boost::system::error_code& ec);
  void on_answer(const boost::system::error_code& ec);
  void pump();
  void read_more();
  bool handle(std::string_view body);
  bool key_ok(std::string_view key) const { return key.size() <= state_->opts.max_key_bytes; }
  bool value_ok(std::string_view v) const { return v.size() <= state_->opts.max_value_bytes; }
  bool begin_wait(Reply reply, std::vector<std::string> wanted, uint64_t timeout_ms);
  void on_ready() override;
  void answer_ready();
  void answer_timeout();
  // A frame of the session (header and body): tagged, queued.
  void send(std::string frame);
  // Bytes of the handshake, sent as they are.
  void send_raw(std::string bytes);
  void flush();

  std::shared_ptr<ServerState> state_;
  boost::asio::generic::stream_protocol::socket socket_;
  std::optional<uid_t> local_uid_;
  boost::asio::steady_timer auth_timer_;
  boost::asio::steady_timer wait_timer_;
  Nonce nonce_{};
  Nonce client_nonce_{};
  Mac answer_{};
  Mac client_proof_{};  // what a client that knows the secret answers
  // Each direction's tags, keyed by this connection's handshake.
  std::optional<FrameTagger> to_server_;
  std::optional<FrameTagger> to_client_;
  bool authed_ = false;
  bool closed_ = false;
  std::string source_;                                // the peer's address
  std::list<Session*>::iterator unauthenticated_it_;  // valid while in_unauthenticated_
  bool in_unauthenticated_ = false;
  void leave_unauthenticated();

  // Frames arrive into rbuf_[0, rend_); rbuf_[rpos_, rend_) is not yet handled.
  std::vector<char> rbuf_;
  size_t rpos_ = 0;
  size_t rend_ = 0;
  bool reading_ = false;

  std::deque<std::string> wq_;
  size_t wq_bytes_ = 0;
  size_t writing_ = 0;  // frames of wq_ in the write in flight

  // Keys this connection set with set_owned, and their values: erased when
  // it closes, unless they were set anew since.
  StringMap<std::string> owned_;

  bool waiting_ = false;  // a request is parked: later frames wait their turn
  Reply reply_ = Reply::none;
  uint64_t wait_id_ = 0;
};

}  // namespace dlaunch::comm::detail
