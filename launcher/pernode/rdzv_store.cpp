#include "pernode/rdzv_store.h"

#include <utility>

#include "pernode/async_store.h"

namespace dlaunch::rdzv {

namespace {

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
  void quiet_prefixes(std::vector<std::string> prefixes) override {
    server_.quiet_prefixes(std::move(prefixes));
  }
  void on_change(std::function<void()> fn) override { server_.on_change(std::move(fn)); }

 private:
  comm::ThreadedStoreServer server_;
};

class TcpNetwork final : public StoreNetwork {
 public:
  std::unique_ptr<StoreHost> host(const comm::StoreServerOptions& opts) override {
    return std::make_unique<TcpHost>(opts);
  }
  std::unique_ptr<AsyncStore> connect_async(boost::asio::io_context& io,
                                            const comm::StoreOptions& opts) override {
    return std::make_unique<ThreadedAsyncStore>(io, opts);
  }
};

}  // namespace

StoreNetwork& tcp_rdzv_network() {
  static TcpNetwork network;
  return network;
}

}  // namespace dlaunch::rdzv
