#include "store/wire.h"

#include <algorithm>

#include "comm/error.h"

namespace dlaunch::comm::detail {

namespace {

std::string_view view(const unsigned char* p, size_t n) {
  return {reinterpret_cast<const char*>(p), n};
}

}  // namespace

Hmac::Hmac(std::string_view key) {
  // RFC 2104: a key longer than a block is hashed first; then zero-padded.
  unsigned char block[Sha256::kBlockBytes] = {};
  if (key.size() > Sha256::kBlockBytes) {
    Sha256 h;
    h.add(key);
    const Sha256::Digest d = h.finish();
    std::copy(d.begin(), d.end(), block);
  } else {
    std::copy(key.begin(), key.end(), block);
  }
  unsigned char pad[Sha256::kBlockBytes];
  for (size_t i = 0; i < Sha256::kBlockBytes; ++i) pad[i] = block[i] ^ 0x36;
  inner_.add(pad, sizeof pad);
  for (size_t i = 0; i < Sha256::kBlockBytes; ++i) pad[i] = block[i] ^ 0x5c;
  outer_.add(pad, sizeof pad);
  wipe(block, sizeof block);
  wipe(pad, sizeof pad);
}

Mac Hmac::operator()(std::initializer_list<std::string_view> parts) const {
  Sha256 inner = inner_;
  for (std::string_view p : parts) inner.add(p);
  const Sha256::Digest in = inner.finish();
  Sha256 outer = outer_;
  outer.add(in.data(), in.size());
  return outer.finish();
}

Handshake handshake_values(std::string_view secret, const Nonce& server_nonce,
                           const Nonce& client_nonce) {
  Hmac mac(secret);
  const std::string_view ns = view(server_nonce.data(), server_nonce.size());
  const std::string_view nc = view(client_nonce.data(), client_nonce.size());
  Handshake h;
  h.server_proof = mac({kMacContext, "server-proof", ns, nc});
  h.client_proof = mac({kMacContext, "client-proof", ns, nc});
  h.to_server = mac({kMacContext, "client-to-server", ns, nc});
  h.to_client = mac({kMacContext, "server-to-client", ns, nc});
  return h;
}

Nonce fresh_nonce() {
  Nonce n{};
  if (!random_bytes(n.data(), n.size())) {
    throw Error(ErrorKind::kInternal, "no random bytes for a nonce (getrandom failed)");
  }
  return n;
}

bool same_mac(const unsigned char* a, const unsigned char* b, size_t n) {
  // Every byte is compared, whatever differs first: no timing tells where.
  unsigned char diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

Tag FrameTagger::next(std::string_view frame) {
  char seq[8];
  for (size_t i = 0; i < 8; ++i) seq[i] = static_cast<char>((sequence_ >> (8 * i)) & 0xff);
  ++sequence_;
  const Mac full = mac_({std::string_view(seq, sizeof seq), frame});
  Tag t{};
  std::copy(full.begin(), full.begin() + kTagBytes, t.begin());
  return t;
}

bool FrameTagger::check(std::string_view frame, const unsigned char* tag) {
  const Tag want = next(frame);
  return same_mac(want.data(), tag, kTagBytes);
}

}  // namespace dlaunch::comm::detail
