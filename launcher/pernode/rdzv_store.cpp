#include "pernode/rdzv_store.h"

#include <utility>

#include "pernode/async_store.h"

namespace dlaunch::rdzv {

namespace {

class TcpClient final : public StoreClient {
 public:
  explicit TcpClient(comm::StoreOptions opts) : store_(std::move(opts)) {}
  void set(const std::string& key, const std::string& value) override { store_.set(key, value); }
  void set_while_connected(const std::string& key, const std::string& value) override {
    store_.set_while_connected(key, value);
  }
  std::string get(const std::string& key) override { return store_.get(key); }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    return store_.get(key, timeout);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return store_.add(key, delta);
  }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    return store_.compare_set(key, expected, desired);
  }
  bool check(const std::vector<std::string>& keys) override { return store_.check(keys); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    store_.wait(keys, timeout);
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override {
    return store_.multi_get(keys);
  }
  void interrupt() override { store_.interrupt(); }

 private:
  comm::Store store_;
};

class TcpHost final : public StoreHost {
 public:
  explicit TcpHost(comm::StoreServerOptions opts) : server_(std::move(opts)) {}
  std::uint16_t port() const override { return server_.port(); }
  std::uint16_t listen_also(const std::string& bind_address, std::uint16_t port) override {
    return server_.listen_also(bind_address, port);
  }
  void stop_listening_on_first_port() override { server_.stop_listening_on_first_port(); }
  std::vector<std::optional<std::string>> peek(
      const std::vector<std::string>& keys) const override {
    return server_.peek(keys);
  }
  void set(const std::string& key, const std::string& value) override { server_.set(key, value); }
  std::uint64_t changes() const override { return server_.changes(); }
  std::uint64_t wait_change(std::uint64_t seen,
                            std::chrono::steady_clock::time_point until) const override {
    return server_.wait_change(seen, until);
  }
  void quiet_prefixes(std::vector<std::string> prefixes) override {
    server_.quiet_prefixes(std::move(prefixes));
  }
  void wake_watchers() override { server_.wake_watchers(); }
  void on_change(std::function<void()> fn) override { server_.on_change(std::move(fn)); }

 private:
  comm::ThreadedStoreServer server_;
};

class TcpNetwork final : public StoreNetwork {
 public:
  std::unique_ptr<StoreHost> host(const comm::StoreServerOptions& opts) override {
    return std::make_unique<TcpHost>(opts);
  }
  std::unique_ptr<StoreClient> connect(const comm::StoreOptions& opts) override {
    return std::make_unique<TcpClient>(opts);
  }
  std::unique_ptr<AsyncStore> connect_async(boost::asio::io_context& io,
                                            const comm::StoreOptions& opts) override {
    return std::make_unique<ThreadedAsyncStore>(
        io, [opts] { return std::make_unique<TcpClient>(opts); });
  }
};

}  // namespace

StoreNetwork& tcp_rdzv_network() {
  static TcpNetwork network;
  return network;
}

}  // namespace dlaunch::rdzv
