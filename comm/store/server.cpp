#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "comm/store.h"
#include "store/peer_uid.h"
#include "store/session.h"

namespace dlaunch::comm {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

std::error_code to_std(const error_code& ec) { return {ec.value(), std::system_category()}; }

void start_session(const std::shared_ptr<detail::ServerState>& state,
                   asio::generic::stream_protocol::socket socket, std::string source,
                   std::optional<uid_t> uid) {
  if (state->sessions.size() >= state->opts.max_connections) return;
  auto session =
      std::make_shared<detail::Session>(state, std::move(socket), std::move(source), uid);
  state->sessions.emplace(session.get(), session);
  session->start();
}

// After an error (out of descriptors and the like): back off instead of
// spinning on it.
template <typename Again>
void retry_later(const std::shared_ptr<detail::ServerState>& state, Again again) {
  state->accept_retry.expires_after(std::chrono::milliseconds(100));
  state->accept_retry.async_wait([state, again](const error_code& wait_ec) {
    if (!wait_ec && !state->closed) again(state);
  });
}

void accept_on(const std::shared_ptr<detail::ServerState>& state,
               asio::ip::tcp::acceptor& acceptor) {
  acceptor.async_accept([state, &acceptor](const error_code& ec, asio::ip::tcp::socket socket) {
    if (state->closed || !acceptor.is_open()) return;  // the store, or this port, closed
    if (ec) {
      return retry_later(state, [&acceptor](const std::shared_ptr<detail::ServerState>& s) {
        if (acceptor.is_open()) accept_on(s, acceptor);
      });
    }
    error_code ignored;
    std::string source = socket.remote_endpoint(ignored).address().to_string();
    const auto uid = detail::local_peer_uid(socket);
    const auto protocol = socket.local_endpoint(ignored).protocol();
    asio::generic::stream_protocol::socket generic(
        state->io, asio::generic::stream_protocol(protocol.family(), protocol.protocol()),
        socket.release());
    start_session(state, std::move(generic), std::move(source), uid);
    accept_on(state, acceptor);
  });
}

void accept_next(const std::shared_ptr<detail::ServerState>& state) {
  accept_on(state, state->acceptor);
}

void accept_next_unix(const std::shared_ptr<detail::ServerState>& state) {
  state->unix_acceptor.async_accept(
      [state](const error_code& ec, asio::local::stream_protocol::socket socket) {
        if (state->closed) return;
        if (ec) return retry_later(state, accept_next_unix);
        const auto uid = detail::unix_peer_uid(socket.native_handle());
        asio::generic::stream_protocol::socket generic(
            state->io, asio::generic::stream_protocol(AF_UNIX, 0), socket.release());
        start_session(state, std::move(generic), "unix", uid);
        accept_next_unix(state);
      });
}

}  // namespace

StoreServer::StoreServer(asio::io_context& io, StoreServerOptions opts) {
  if (opts.secret.empty()) {
    throw std::invalid_argument("store server: refusing to start without a secret");
  }
  if (opts.max_frame_bytes > UINT32_MAX) {
    throw std::invalid_argument("store server: max_frame_bytes must fit in 32 bits");
  }
  std::string where = opts.bind_address + ":" + std::to_string(opts.port);
  error_code ec;
  auto address = asio::ip::make_address(opts.bind_address, ec);
  if (ec) {
    throw std::system_error(to_std(ec),
                            "store server: bad bind address '" + opts.bind_address + "'");
  }
  state_ = std::make_shared<detail::ServerState>(io, std::move(opts));
  for (const auto& [key, value] : state_->opts.initial_keys) state_->table.set(key, value);
  auto& acceptor = state_->acceptor;
  asio::ip::tcp::endpoint endpoint(address, state_->opts.port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) port_ = acceptor.local_endpoint(ec).port();
  if (ec) throw std::system_error(to_std(ec), "store server: cannot listen on " + where);
  if (!state_->opts.unix_path.empty()) {
    const asio::local::stream_protocol::endpoint unix_endpoint(state_->opts.unix_path);
    auto& ua = state_->unix_acceptor;
    ua.open(unix_endpoint.protocol(), ec);
    if (!ec) ua.bind(unix_endpoint, ec);
    if (!ec) ua.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      throw std::system_error(to_std(ec),
                              "store server: cannot listen on " + state_->opts.unix_path);
    }
    accept_next_unix(state_);
  }
  accept_next(state_);
}

StoreServer::~StoreServer() { close(); }

uint16_t StoreServer::port() const { return port_; }

uint16_t StoreServer::listen_also(const std::string& bind_address, uint16_t port) {
  error_code ec;
  const auto address = asio::ip::make_address(bind_address, ec);
  if (ec)
    throw std::system_error(to_std(ec), "store server: bad bind address '" + bind_address + "'");
  auto acceptor = std::make_unique<asio::ip::tcp::acceptor>(state_->io);
  const asio::ip::tcp::endpoint endpoint(address, port);
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  uint16_t bound = 0;
  if (!ec) bound = acceptor->local_endpoint(ec).port();
  if (ec) {
    throw std::system_error(
        to_std(ec), "store server: cannot listen on " + bind_address + ":" + std::to_string(port));
  }
  state_->more_acceptors.push_back(std::move(acceptor));
  accept_on(state_, *state_->more_acceptors.back());
  return bound;
}

void StoreServer::stop_listening_on_first_port() {
  error_code ignored;
  state_->acceptor.close(ignored);
}

size_t StoreServer::connections() const { return state_->sessions.size(); }

detail::Table& StoreServer::table() { return state_->table; }

void StoreServer::close() {
  if (state_->closed) return;
  state_->closed = true;
  error_code ignored;
  state_->acceptor.close(ignored);
  for (auto& a : state_->more_acceptors) a->close(ignored);
  if (state_->unix_acceptor.is_open()) {
    state_->unix_acceptor.close(ignored);
    ::unlink(state_->opts.unix_path.c_str());
  }
  state_->accept_retry.cancel();
  std::vector<std::shared_ptr<detail::Session>> sessions;
  for (auto& [raw, session] : state_->sessions) sessions.push_back(session);
  for (auto& s : sessions) s->close();
}

struct ThreadedStoreServer::Impl {
  asio::io_context io;
  std::unique_ptr<StoreServer> server;
  std::thread thread;
  // The table's change count, written on the server's thread.
  mutable std::mutex mu;
  mutable std::condition_variable changed;
  uint64_t changes = 0;
  std::vector<std::string> quiet;   // quiet_prefixes
  std::function<void()> on_change;  // under mu
};

ThreadedStoreServer::ThreadedStoreServer(StoreServerOptions opts)
    : impl_(std::make_unique<Impl>()) {
  impl_->server = std::make_unique<StoreServer>(impl_->io, std::move(opts));
  impl_->server->table().on_change([impl = impl_.get()](std::string_view key) {
    {
      const std::lock_guard<std::mutex> lock(impl->mu);
      for (const auto& q : impl->quiet) {
        if (key.starts_with(q)) return;
      }
      ++impl->changes;
      if (impl->on_change) impl->on_change();
    }
    impl->changed.notify_all();
  });
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

ThreadedStoreServer::~ThreadedStoreServer() {
  // close() cancels every pending operation, so run() returns once they have drained.
  asio::post(impl_->io, [impl = impl_.get()] { impl->server->close(); });
  impl_->thread.join();
}

uint16_t ThreadedStoreServer::port() const { return impl_->server->port(); }

uint16_t ThreadedStoreServer::listen_also(const std::string& bind_address, uint16_t port) {
  std::promise<uint16_t> answer;
  auto result = answer.get_future();
  asio::post(impl_->io, [&] {
    try {
      answer.set_value(impl_->server->listen_also(bind_address, port));
    } catch (...) {
      answer.set_exception(std::current_exception());
    }
  });
  return result.get();
}

void ThreadedStoreServer::stop_listening_on_first_port() {
  std::promise<void> done;
  auto result = done.get_future();
  asio::post(impl_->io, [&] {
    impl_->server->stop_listening_on_first_port();
    done.set_value();
  });
  result.get();
}

std::vector<std::optional<std::string>> ThreadedStoreServer::peek(
    const std::vector<std::string>& keys) const {
  std::promise<std::vector<std::optional<std::string>>> answer;
  auto result = answer.get_future();
  asio::post(impl_->io, [&] {
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    for (const auto& k : keys) {
      const std::string* v = impl_->server->table().find(k);
      out.push_back(v != nullptr ? std::optional<std::string>(*v) : std::nullopt);
    }
    answer.set_value(std::move(out));
  });
  return result.get();
}

void ThreadedStoreServer::set(const std::string& key, const std::string& value) {
  std::promise<void> done;
  auto result = done.get_future();
  asio::post(impl_->io, [&] {
    impl_->server->table().set(key, value);
    done.set_value();
  });
  result.get();
}

size_t ThreadedStoreServer::connections() const {
  std::promise<size_t> answer;
  auto result = answer.get_future();
  asio::post(impl_->io, [&] { answer.set_value(impl_->server->connections()); });
  return result.get();
}

uint64_t ThreadedStoreServer::changes() const {
  const std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->changes;
}

void ThreadedStoreServer::quiet_prefixes(std::vector<std::string> prefixes) {
  const std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->quiet = std::move(prefixes);
}

void ThreadedStoreServer::wake_watchers() {
  {
    const std::lock_guard<std::mutex> lock(impl_->mu);
    ++impl_->changes;
    if (impl_->on_change) impl_->on_change();
  }
  impl_->changed.notify_all();
}

void ThreadedStoreServer::on_change(std::function<void()> fn) {
  const std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->on_change = std::move(fn);
}

uint64_t ThreadedStoreServer::wait_change(uint64_t seen,
                                          std::chrono::steady_clock::time_point until) const {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->changed.wait_until(lock, until, [&] { return impl_->changes != seen; });
  return impl_->changes;
}

}  // namespace dlaunch::comm
