// Wire format shared by the store client and server (docs/store.md): the
// codec of dlaunch/codec.h, as the control protocol's: integers
// little-endian, strings as u32 length + bytes; every frame after the
// greeting is u32 length + body.
//
// Protocol version 2 (kProtocolVersion, the digit ending kGreetingMagic):
// version 1 had the same messages with every integer big-endian. A client
// and a server of different versions refuse each other at the greeting.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dlaunch/codec.h"

namespace dlaunch::comm::detail {

inline constexpr int kProtocolVersion = 2;
inline constexpr std::string_view kGreetingPrefix = "DLSTORE";
inline constexpr std::string_view kGreetingMagic = "DLSTORE2";  // prefix + version
static_assert(kGreetingMagic.size() == kGreetingPrefix.size() + 1 &&
              kGreetingMagic.substr(0, kGreetingPrefix.size()) == kGreetingPrefix &&
              kGreetingMagic.back() == '0' + kProtocolVersion);
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kGreetingBytes = 8 + kNonceBytes;
// Unchanged since version 1: the authentication is the same.
inline constexpr std::string_view kMacContext = "dlaunch-store-v1";
inline constexpr size_t kFrameHeaderBytes = 4;
// The least a string takes on the wire (its length), for codec::Reader::count.
inline constexpr size_t kMinStringBytes = 4;

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
  set_owned = 11,  // a set the server undoes when this connection closes
};

enum class Status : uint8_t { ok = 0, timeout = 1, error = 2 };

using Mac = std::array<unsigned char, kMacBytes>;

// HMAC-SHA256(secret, nonce || kMacContext).
Mac auth_mac(std::string_view secret, const unsigned char* nonce);

// The body length in a frame header (kFrameHeaderBytes at `header`).
inline uint32_t frame_length(const char* header) {
  return codec::Reader(std::string_view(header, kFrameHeaderBytes)).u32();
}

// Builds one frame with codec::Writer; the length prefix is filled in by finish().
class Writer {
 public:
  explicit Writer(uint8_t tag) : buf_(kFrameHeaderBytes, '\0') { u8(tag); }
  Writer& u8(uint8_t v) {
    codec::Writer(buf_).u8(v);
    return *this;
  }
  Writer& u32(uint32_t v) {
    codec::Writer(buf_).u32(v);
    return *this;
  }
  Writer& u64(uint64_t v) {
    codec::Writer(buf_).u64(v);
    return *this;
  }
  Writer& i64(int64_t v) {
    codec::Writer(buf_).i64(v);
    return *this;
  }
  Writer& str(std::string_view s) {
    codec::Writer(buf_).bytes(s);
    return *this;
  }
  size_t body_size() const { return buf_.size() - kFrameHeaderBytes; }
  // Frame bodies over 4 GiB are the caller's job to refuse.
  std::string finish() {
    codec::Writer(buf_).u32_at(0, static_cast<uint32_t>(body_size()));
    return std::move(buf_);
  }

 private:
  std::string buf_;
};

// Frame bodies are read with codec::Reader: sticky, so a handler reads every
// field and then checks finish() (all read, nothing left over) once.
using codec::Reader;

}  // namespace dlaunch::comm::detail
