#include "store/wire.h"

#include <utility>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "comm/error.h"

namespace dlaunch::comm::detail {

namespace {

constexpr size_t kBlock = 64;  // SHA-256's block size

[[noreturn]] void openssl_failed() { throw Error(ErrorKind::kInternal, "HMAC-SHA256 failed"); }

EVP_MD_CTX* new_ctx() {
  EVP_MD_CTX* c = EVP_MD_CTX_new();
  if (c == nullptr) openssl_failed();
  return c;
}

void update(EVP_MD_CTX* c, std::string_view s) {
  if (!s.empty() && EVP_DigestUpdate(c, s.data(), s.size()) != 1) openssl_failed();
}

std::string_view view(const unsigned char* p, size_t n) {
  return {reinterpret_cast<const char*>(p), n};
}

}  // namespace

Hmac::Hmac(std::string_view key) {
  inner_ = new_ctx();
  outer_ = new_ctx();
  work_ = new_ctx();
  // RFC 2104: a key longer than a block is hashed first; then zero-padded.
  unsigned char block[kBlock] = {};
  if (key.size() > kBlock) {
    unsigned int n = 0;
    if (EVP_DigestInit_ex(work_, EVP_sha256(), nullptr) != 1) openssl_failed();
    update(work_, key);
    if (EVP_DigestFinal_ex(work_, block, &n) != 1) openssl_failed();
  } else {
    std::copy(key.begin(), key.end(), block);
  }
  unsigned char pad[kBlock];
  for (size_t i = 0; i < kBlock; ++i) pad[i] = block[i] ^ 0x36;
  if (EVP_DigestInit_ex(inner_, EVP_sha256(), nullptr) != 1) openssl_failed();
  update(inner_, view(pad, kBlock));
  for (size_t i = 0; i < kBlock; ++i) pad[i] = block[i] ^ 0x5c;
  if (EVP_DigestInit_ex(outer_, EVP_sha256(), nullptr) != 1) openssl_failed();
  update(outer_, view(pad, kBlock));
  OPENSSL_cleanse(block, sizeof block);
  OPENSSL_cleanse(pad, sizeof pad);
}

Hmac::Hmac(Hmac&& o) noexcept
    : inner_(std::exchange(o.inner_, nullptr)),
      outer_(std::exchange(o.outer_, nullptr)),
      work_(std::exchange(o.work_, nullptr)) {}

Hmac& Hmac::operator=(Hmac&& o) noexcept {
  if (this != &o) {
    reset();
    inner_ = std::exchange(o.inner_, nullptr);
    outer_ = std::exchange(o.outer_, nullptr);
    work_ = std::exchange(o.work_, nullptr);
  }
  return *this;
}

Hmac::~Hmac() { reset(); }

void Hmac::reset() {
  EVP_MD_CTX_free(inner_);
  EVP_MD_CTX_free(outer_);
  EVP_MD_CTX_free(work_);
  inner_ = outer_ = work_ = nullptr;
}

Mac Hmac::operator()(std::initializer_list<std::string_view> parts) {
  Mac inner{};
  Mac out{};
  unsigned int n = 0;
  if (EVP_MD_CTX_copy_ex(work_, inner_) != 1) openssl_failed();
  for (std::string_view p : parts) update(work_, p);
  if (EVP_DigestFinal_ex(work_, inner.data(), &n) != 1 || n != inner.size()) openssl_failed();
  if (EVP_MD_CTX_copy_ex(work_, outer_) != 1) openssl_failed();
  update(work_, view(inner.data(), inner.size()));
  if (EVP_DigestFinal_ex(work_, out.data(), &n) != 1 || n != out.size()) openssl_failed();
  return out;
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
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    throw Error(ErrorKind::kInternal, "no random bytes for a nonce (RAND_bytes failed)");
  }
  return n;
}

bool same_mac(const unsigned char* a, const unsigned char* b, size_t n) {
  return CRYPTO_memcmp(a, b, n) == 0;
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
