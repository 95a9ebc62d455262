#include "store/wire.h"

#include <climits>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "comm/error.h"

namespace dlaunch::comm::detail {

Mac auth_mac(std::string_view secret, const unsigned char* nonce) {
  std::array<unsigned char, kNonceBytes + kMacContext.size()> msg{};
  std::copy(nonce, nonce + kNonceBytes, msg.begin());
  std::copy(kMacContext.begin(), kMacContext.end(), msg.begin() + kNonceBytes);
  Mac out{};
  unsigned int len = 0;
  if (secret.size() > INT_MAX ||
      HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(), msg.size(),
           out.data(), &len) == nullptr ||
      len != out.size()) {
    throw Error(ErrorKind::kInternal, "HMAC-SHA256 failed");
  }
  return out;
}

}  // namespace dlaunch::comm::detail
