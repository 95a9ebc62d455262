#include "store_service.h"

#include <system_error>

namespace dlaunch::agent {

StoreService::~StoreService() { stop(); }

std::optional<std::string> StoreService::prepare(const proto::Setup& setup, proto::Ready& ready) {
  if (setup.store_secret.empty()) return std::nullopt;  // not node 0, or no store
  comm::StoreServerOptions so{
      .bind_address = setup.store_bind, .port = setup.store_port, .secret = setup.store_secret};
  // sockaddr_un's path holds 108 bytes; a folder too deep for one gets none.
  const std::string& dir = node_.node_dir();
  if (!dir.empty() && dir.size() + 12 < 100) so.unix_path = dir + "/store.sock";
  try {
    if (so.bind_address == "::") {
      // IPv6 with IPv4 mapped in; where the system has no IPv6, IPv4 alone.
      try {
        store_ = std::make_unique<comm::StoreServer>(io_, so);
      } catch (const std::system_error& e) {
        if (e.code() != std::errc::address_family_not_supported &&
            e.code() != std::errc::address_not_available)
          throw;
        so.bind_address = "0.0.0.0";
      }
    }
    if (!store_) store_ = std::make_unique<comm::StoreServer>(io_, so);
  } catch (const std::exception& e) {
    return std::string("cannot start the comm store: ") + e.what();
  }
  ready.store_port = store_->port();
  ready.store_path = so.unix_path;
  return std::nullopt;
}

void StoreService::stop() {
  if (store_) store_->close();
}

}  // namespace dlaunch::agent
