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

uint32_t load_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

Writer& Writer::u8(uint8_t v) {
  buf_.push_back(static_cast<char>(v));
  return *this;
}

Writer& Writer::u32(uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) buf_.push_back(static_cast<char>(v >> shift));
  return *this;
}

Writer& Writer::u64(uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) buf_.push_back(static_cast<char>(v >> shift));
  return *this;
}

Writer& Writer::str(std::string_view s) {
  u32(static_cast<uint32_t>(s.size()));
  buf_.append(s);
  return *this;
}

std::string Writer::finish() {
  auto n = static_cast<uint32_t>(body_size());
  for (int i = 0; i < 4; ++i) buf_[i] = static_cast<char>(n >> (24 - 8 * i));
  return std::move(buf_);
}

bool Reader::take(size_t n, std::string_view& out) {
  if (!ok_ || p_.size() < n) {
    ok_ = false;
    out = {};
    return false;
  }
  out = p_.substr(0, n);
  p_.remove_prefix(n);
  return true;
}

uint8_t Reader::u8() {
  std::string_view s;
  return take(1, s) ? static_cast<uint8_t>(s[0]) : 0;
}

uint32_t Reader::u32() {
  std::string_view s;
  return take(4, s) ? load_u32(s.data()) : 0;
}

uint64_t Reader::u64() {
  std::string_view s;
  if (!take(8, s)) return 0;
  uint64_t v = 0;
  for (char c : s) v = (v << 8) | static_cast<unsigned char>(c);
  return v;
}

std::string_view Reader::str() {
  uint32_t n = u32();
  std::string_view s;
  take(n, s);
  return s;
}

uint32_t Reader::count() {
  uint32_t n = u32();
  if (ok_ && n > p_.size() / 4) ok_ = false;
  return ok_ ? n : 0;
}

}  // namespace dlaunch::comm::detail
