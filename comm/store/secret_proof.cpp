#include "comm/secret_proof.h"

#include "store/wire.h"

namespace dlaunch::comm {

namespace {
std::string_view challenge_view(const Challenge& c) {
  return {reinterpret_cast<const char*>(c.data()), c.size()};
}
}  // namespace

Proof prove_secret(std::string_view secret, std::string_view role, const Challenge& a,
                   const Challenge& b, std::string_view context) {
  const detail::Hmac mac(secret);
  return mac({"dlaunch secret proof", role, challenge_view(a), challenge_view(b), context});
}

bool same_proof(const Proof& x, const Proof& y) {
  return detail::same_mac(x.data(), y.data(), x.size());
}

Challenge fresh_challenge() { return detail::fresh_nonce(); }

}  // namespace dlaunch::comm
