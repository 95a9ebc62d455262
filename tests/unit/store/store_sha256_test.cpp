// The store's own SHA-256 and HMAC against OpenSSL's, on every length from 0
// to 300 bytes (each padding case) and on random messages and keys, split
// into random pieces; plus FIPS 180-4's and RFC 4231's vectors.
#include <cstdio>
#include <random>
#include <string>

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "store/sha256.h"
#include "store/wire.h"

namespace d = dlaunch::comm::detail;

namespace {

template <typename Bytes>
std::string hex(const Bytes& b) {
  std::string out;
  for (unsigned char c : b) {
    char h[3];
    std::snprintf(h, sizeof h, "%02x", c);
    out += h;
  }
  return out;
}

std::string openssl_sha256(const std::string& m) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EXPECT_EQ(EVP_Digest(m.data(), m.size(), out, &n, EVP_sha256(), nullptr), 1);
  return hex(std::string(reinterpret_cast<const char*>(out), n));
}

std::string openssl_hmac(const std::string& key, const std::string& m) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EXPECT_NE(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                 reinterpret_cast<const unsigned char*>(m.data()), m.size(), out, &n),
            nullptr);
  return hex(std::string(reinterpret_cast<const char*>(out), n));
}

std::string ours(const std::string& m) {
  d::Sha256 h;
  h.add(m);
  return hex(h.finish());
}

std::string random_string(std::mt19937& rng, std::size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

}  // namespace

TEST(StoreSha256, FipsVectors) {
  EXPECT_EQ(ours(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(ours("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(ours("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(ours(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(StoreSha256, EqualsOpensslOnEveryLengthAndAnySplit) {
  std::mt19937 rng(30);
  for (std::size_t len = 0; len <= 300; ++len) {
    const std::string m = random_string(rng, len);
    d::Sha256 h;
    std::size_t at = 0;
    while (at < m.size()) {
      const std::size_t piece = std::min<std::size_t>(m.size() - at, rng() % 80);
      h.add(std::string_view(m).substr(at, piece));
      at += piece;
    }
    ASSERT_EQ(hex(h.finish()), openssl_sha256(m)) << "length " << len;
  }
}

TEST(StoreSha256, HmacEqualsOpensslForShortAndLongKeys) {
  std::mt19937 rng(4231);
  for (int i = 0; i < 200; ++i) {
    const std::string key = random_string(rng, rng() % 150);  // longer than a block, too
    const std::string a = random_string(rng, rng() % 200);
    const std::string b = random_string(rng, rng() % 200);
    d::Hmac mac(key);
    ASSERT_EQ(hex(mac({a, b})), openssl_hmac(key, a + b)) << "case " << i;
    ASSERT_EQ(hex(mac({a + b})), openssl_hmac(key, a + b)) << "case " << i << ", reused";
  }
}

// RFC 4231, test case 2.
TEST(StoreSha256, Rfc4231Vector) {
  d::Hmac mac("Jefe");
  EXPECT_EQ(hex(mac({"what do ya want ", "for nothing?"})),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(StoreSha256, RandomBytesDiffer) {
  d::Nonce a{};
  d::Nonce b{};
  ASSERT_TRUE(d::random_bytes(a.data(), a.size()));
  ASSERT_TRUE(d::random_bytes(b.data(), b.size()));
  EXPECT_NE(a, b);
  EXPECT_NE(a, d::Nonce{});
}
