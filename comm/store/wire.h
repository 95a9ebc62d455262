// Wire format shared by the store client and server (docs/store.md): all
// integers big-endian, strings as u32 length + bytes, every frame after the
// greeting as u32 length + body.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlaunch::comm::detail {

inline constexpr std::string_view kGreetingMagic = "DLSTORE1";
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kGreetingBytes = 8 + kNonceBytes;
inline constexpr std::string_view kMacContext = "dlaunch-store-v1";
inline constexpr size_t kFrameHeaderBytes = 4;

enum class Op : uint8_t {
  set = 1,
  get = 2,
  add = 3,
  compare_set = 4,
  check = 5,
  wait = 6,
  erase = 7,
  num_keys = 8,
  multi_get = 9,
  multi_set = 10,
};

enum class Status : uint8_t { ok = 0, timeout = 1, error = 2 };

using Mac = std::array<unsigned char, kMacBytes>;

// HMAC-SHA256(secret, nonce || kMacContext).
Mac auth_mac(std::string_view secret, const unsigned char* nonce);

uint32_t load_u32(const char* p);

// Builds one frame; the length prefix is filled in by finish().
class Writer {
 public:
  explicit Writer(uint8_t tag) : buf_(kFrameHeaderBytes, '\0') { u8(tag); }
  Writer& u8(uint8_t v);
  Writer& u32(uint32_t v);
  Writer& u64(uint64_t v);
  Writer& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  Writer& str(std::string_view s);
  size_t body_size() const { return buf_.size() - kFrameHeaderBytes; }
  std::string finish();  // frame bodies over 4 GiB are the caller's job to refuse

 private:
  std::string buf_;
};

// Reads one frame body; any overrun sets !ok() and yields zeros/empty.
class Reader {
 public:
  explicit Reader(std::string_view body) : p_(body) {}
  uint8_t u8();
  uint32_t u32();
  uint64_t u64();
  int64_t i64() { return static_cast<int64_t>(u64()); }
  std::string_view str();
  // A list count, refused when the rest of the body cannot hold that many strings.
  uint32_t count();
  bool ok() const { return ok_; }
  bool done() const { return ok_ && p_.empty(); }

 private:
  bool take(size_t n, std::string_view& out);
  std::string_view p_;
  bool ok_ = true;
};

}  // namespace dlaunch::comm::detail
